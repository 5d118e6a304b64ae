"""Worker hosts on one machine: network namespaces on a bridge, and a server they reach over it.

`network_hosts(n)` makes a bridge with the server side's address and `n` network namespaces,
each joined to the bridge by a veth pair with an address of its own: a process that enters one
(`enter_network_namespace`) reaches the server only over that link, by TCP, as a separate host
on a LAN would (no added latency: this kernel has no netem). `OwnedServer` is a PostgreSQL
cluster this process starts for the run, listening on the bridge's address: the shared server
listens on loopback only, and is never reconfigured. Both need root (iproute2's `ip`); the
cluster runs as the OS user `postgres`, with fsync and synchronous_commit on, as the shared one.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

BRIDGE = "sweepqbr0"
SUBNET = "10.77.0"
SERVER_ADDRESS = f"{SUBNET}.1"
CLONE_NEWNET = 0x40000000


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _namespace(index: int) -> str:
    return f"sweepq-host{index}"


def _cleanup(count: int) -> None:
    for index in range(count):
        _ip("netns", "del", _namespace(index), check=False)
        _ip("link", "del", f"sqh{index}a", check=False)
    _ip("link", "del", BRIDGE, check=False)


@contextlib.contextmanager
def network_hosts(count: int) -> Iterator[list[str]]:
    """`count` network namespaces, each a host on a bridge with the server side's address."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise SystemExit("--hosts needs root and iproute2's `ip` (network namespaces)")
    _cleanup(count)  # what a killed run may have left
    try:
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{SERVER_ADDRESS}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        names = []
        for index in range(count):
            name, outer, inner = _namespace(index), f"sqh{index}a", f"sqh{index}b"
            _ip("netns", "add", name)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", outer, "master", BRIDGE)
            _ip("link", "set", outer, "up")
            _ip("link", "set", inner, "netns", name)
            _ip("-n", name, "addr", "add", f"{SUBNET}.{10 + index}/24", "dev", inner)
            _ip("-n", name, "link", "set", inner, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            names.append(name)
        yield names
    finally:
        _cleanup(count)


def enter_network_namespace(name: str) -> None:
    """Move this process (single-threaded, before any connection) into namespace `name`."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {name}")
    finally:
        os.close(fd)


class OwnedServer:
    """A PostgreSQL cluster for one run, on `SERVER_ADDRESS:port` (and loopback), trust auth
    from the hosts' subnet; deleted when the block ends."""

    def __init__(self, port: int = 5499) -> None:
        self.port = port
        self.bindir = Path(
            subprocess.run(
                ["pg_config", "--bindir"], check=True, capture_output=True, text=True
            ).stdout.strip()
        )
        self.folder = Path(tempfile.mkdtemp(prefix="sweepq-hosts-pg-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@{SERVER_ADDRESS}:{self.port}/postgres"

    def _as_postgres(self, *args: str) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else list(args)

    def __enter__(self) -> OwnedServer:
        data = self.folder / "data"
        shutil.chown(self.folder, "postgres") if os.geteuid() == 0 else None
        subprocess.run(
            self._as_postgres(
                str(self.bindir / "initdb"), "-D", str(data), "-U", "postgres",
                "--auth=trust", "--no-sync",
            ),
            check=True, capture_output=True,
        )  # fmt: skip
        with open(data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {SUBNET}.0/24 trust\n")
        self.proc = subprocess.Popen(
            self._as_postgres(
                str(self.bindir / "postgres"), "-D", str(data), "-p", str(self.port),
                "-c", f"listen_addresses={SERVER_ADDRESS},127.0.0.1",
                "-c", f"unix_socket_directories={self.folder}",
                "-c", "shared_buffers=128MB", "-c", "max_connections=200",
                "-c", "synchronous_commit=on", "-c", "fsync=on",
            ),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ready = subprocess.run(
                [str(self.bindir / "pg_isready"), "-h", SERVER_ADDRESS, "-p", str(self.port)],
                capture_output=True,
            )
            if ready.returncode == 0:
                return self
            time.sleep(0.1)
        self.__exit__()
        raise RuntimeError("the run's own PostgreSQL did not start within 30 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()  # smart shutdown: the run's connections are closed by now
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)
