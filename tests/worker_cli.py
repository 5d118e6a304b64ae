"""Shared by the tests that run `sweepq worker` as a real process: start it on an APP module
written for the test, and collect its output once it has exited."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import anyio

import sweepq


def start_worker_cli(
    app: sweepq.App, folder: Path, module_text: str, *args: str, **env: str
) -> tuple[subprocess.Popen[str], str]:
    """`sweepq worker MODULE:app ARGS` in `folder`, where MODULE holds `module_text` (formatted
    with the app's schema); its database is the app's (SWEEPQ_DSN), its schema its own."""
    module = f"worker_app_{uuid.uuid4().hex[:8]}"
    (folder / f"{module}.py").write_text(module_text.format(schema=app.schema))
    environ = {**os.environ, "SWEEPQ_DSN": app.dsn, **env}
    environ.pop("SWEEPQ_SCHEMA", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweepq.cli", "worker", f"{module}:app", *args],
        cwd=folder,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, module


async def finish(proc: subprocess.Popen[str], timeout: float = 20) -> tuple[str, str]:
    """Its stdout and stderr once it exits; killed if it does not within `timeout`."""
    try:
        return await anyio.to_thread.run_sync(lambda: proc.communicate(timeout=timeout))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def close_output(proc: subprocess.Popen[str], *streams: str) -> None:
    """Close the reading ends of its `stdout` and/or `stderr` pipes: its next write there fails
    with a broken pipe, as after `| tee log` when tee has exited."""
    for name in streams:
        pipe = getattr(proc, name)
        assert pipe is not None
        pipe.close()


async def wait_for_exit(proc: subprocess.Popen[str], timeout: float = 30) -> str:
    """Its stderr (if the test still reads it) once it exits; killed if it does not in time."""
    try:
        await anyio.to_thread.run_sync(lambda: proc.wait(timeout=timeout))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.stderr is None or proc.stderr.closed:
        return ""
    with proc.stderr:
        return await anyio.to_thread.run_sync(proc.stderr.read)
