"""Worker processes of tests/runtime_proc.py (its `noop` and `slow` tasks) on a test's schema."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sweepq

PROC = Path(__file__).with_name("runtime_proc.py")


@contextmanager
def runtime_workers(app: sweepq.App, count: int) -> Iterator[list[subprocess.Popen[str]]]:
    """`count` worker processes, each ready (it said so) before the block; killed after."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for _ in range(count):
            proc = subprocess.Popen(
                [sys.executable, str(PROC), app.dsn, app.schema], stdout=subprocess.PIPE, text=True
            )
            procs.append(proc)
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith("ready")
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
