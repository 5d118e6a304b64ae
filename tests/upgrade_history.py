"""Old versions of sweepq, taken from this repository's own history, for the upgrade tests.

`old_source(rev, into)` exports `src/sweepq` of a commit or tag with `git archive`, and
`OldProcess.start(source, script, ...)` runs one of the `tests/upgrade_*_proc.py` scripts with
that code first on its PYTHONPATH (the dependencies are the installed ones). Each script prints
`ready <worker id or -> <path of the sweepq it imported>`, which `start` checks, so a test can
never run today's code where it meant an old one.

A missing `git` or a commit missing from the clone (a shallow clone) fails the test with the fix:
a skipped upgrade test would prove nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

# The oldest schema whose data an upgrade carries forward: core migrations 0001-0002 and sweeps
# 0001, before job groups (a stopped deploy: migrate, then start the new code).
OLDEST = "12d7951"
# The release before this one, 0.1.0, by its commit (a tag need not travel with a clone): a
# rolling deploy from it is supported (migrate first, then old and new processes side by side).
PREVIOUS = "c7da320"

START_TIMEOUT = 30.0


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, check=False)


def old_source(rev: str, into: Path) -> Path:
    """`src/` of sweepq at `rev` (a commit or a tag), exported under `into`; returns its path."""
    if shutil.which("git") is None:
        pytest.fail(
            "the upgrade tests install old versions of sweepq from this repository's history "
            "with git, which is not on PATH: install git"
        )
    found = _git("rev-parse", "--verify", "-q", f"{rev}^{{commit}}")
    if found.returncode != 0:
        pytest.fail(
            f"{rev} is not in the history of the clone at {ROOT} (a shallow clone?): run "
            "`git fetch --unshallow` there (.ci/run does) and run again"
        )
    into.mkdir(parents=True, exist_ok=True)
    tar = into / "sweepq.tar"
    for step in (
        ["git", "-C", str(ROOT), "archive", "-o", str(tar), found.stdout.decode().strip(),
         "src/sweepq"],
        ["tar", "-x", "-f", str(tar), "-C", str(into)],
    ):  # fmt: skip
        done = subprocess.run(step, capture_output=True, check=False)
        if done.returncode != 0:
            pytest.fail(
                f"could not export src/sweepq of {rev} ({' '.join(step[:2])}): "
                f"{done.stderr.decode(errors='replace')}"
            )
    tar.unlink()
    source = into / "src"
    if not (source / "sweepq" / "__init__.py").is_file():
        pytest.fail(f"{rev} has no src/sweepq/__init__.py: is it a commit of sweepq?")
    return source


def _same_file(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def _environment(source: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(source), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
    return env


async def run_to_end(
    source: Path | None, script: str, args: Sequence[str], *, timeout: float = 60.0
) -> subprocess.CompletedProcess[bytes]:
    """Run `tests/<script> <args>` with sweepq from `source` until it exits; never raises for
    its exit code (the caller reads it)."""
    with anyio.fail_after(timeout):
        return await anyio.run_process(
            [sys.executable, str(TESTS / script), *args], env=_environment(source), check=False
        )


class OldProcess:
    """A script of tests/ running under some version of sweepq, with its output kept."""

    def __init__(self, process: Process, stdout: BufferedByteReceiveStream, log: Path) -> None:
        self.process = process
        self.stdout = stdout
        self.log = log
        self.name = log.stem  # how failures name it
        self.worker_id = ""

    @classmethod
    async def start(
        cls, source: Path | None, script: str, args: Sequence[str], *, log: Path
    ) -> OldProcess:
        """Run `tests/<script> <args>` with sweepq from `source` (None: today's) and wait for
        its `ready` line."""
        env = _environment(source)
        handle = log.open("wb")
        try:
            process = await anyio.open_process(
                [sys.executable, str(TESTS / script), *args],
                stdout=subprocess.PIPE,
                stderr=handle,
                env=env,
            )
        finally:
            handle.close()
        assert process.stdout is not None
        self = cls(process, BufferedByteReceiveStream(process.stdout), log)
        try:
            with anyio.fail_after(START_TIMEOUT):
                line = await self.line()
        except (TimeoutError, anyio.EndOfStream, anyio.IncompleteRead):
            self.kill()
            await self.process.wait()
            pytest.fail(f"{script} did not start: {self.errors()}")
        word, worker_id, imported = line.split(" ", 2)
        assert word == "ready", line
        expected = (source or ROOT / "src") / "sweepq" / "__init__.py"
        assert _same_file(Path(imported), expected), f"{script} imported {imported}, not {expected}"
        self.worker_id = worker_id
        return self

    async def line(self) -> str:
        return (await self.stdout.receive_until(b"\n", 65536)).decode()

    def errors(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)

    async def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait for the exit code (a worker finishes its running jobs first)."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(timeout):
            return await self.process.wait()

    async def close(self) -> None:
        self.kill()
        with anyio.CancelScope(shield=True):
            await self.process.wait()
            await self.process.aclose()
