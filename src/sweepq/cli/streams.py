"""The worker's output streams, which outlive their readers.

`sweepq worker ... | tee log` and Ctrl-C: SIGINT reaches both processes, tee exits first, and the
worker's next line ("SIGINT: stopping...", a log record) meets a pipe that nobody reads. Python
ignores SIGPIPE, so the write raises BrokenPipeError (which rich's Console turns into
SystemExit), and the worker would end there, cutting short the jobs it was letting finish.

Within `unbreakable()`, sys.stdout and sys.stderr never raise: the first write or flush that fails
points the stream's file descriptor at os.devnull for the rest of the run (as the Python docs
advise for SIGPIPE, so that the interpreter's last flush at exit succeeds too), and what is
written to it afterwards is dropped. Output is a courtesy to whoever watches; the work does not
depend on it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any, TextIO, cast


class Unbreakable:
    """A text stream whose writes never raise: once one fails, it drops the rest."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.broken = False
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self.stream.write(text)
            except BlockingIOError:  # a full non-blocking pipe: this line is lost, not the rest
                pass
            except (OSError, ValueError):  # a closed pipe, a lost terminal, a closed file
                self._break()
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.broken:
            try:
                self.stream.flush()
            except BlockingIOError:
                pass
            except (OSError, ValueError):
                self._break()

    def isatty(self) -> bool:
        if self.broken:
            return False
        try:
            return self.stream.isatty()
        except (OSError, ValueError):
            return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)  # encoding, fileno, ...: the stream's own

    def _break(self) -> None:
        with self._lock:
            if self.broken:
                return
            self.broken = True
            # No descriptor (a test's in-memory stream, a closed file): dropping is enough.
            with contextlib.suppress(OSError, ValueError):
                fd = self.stream.fileno()
                devnull = os.open(os.devnull, os.O_WRONLY)
                try:
                    os.dup2(devnull, fd)
                finally:
                    os.close(devnull)
                self.stream.flush()  # what the failed write left in its buffer goes to devnull


def unbreakable_stream(stream: TextIO) -> TextIO:
    """`stream`, or an `Unbreakable` around it."""
    if isinstance(stream, Unbreakable):
        return stream
    # It writes, flushes and answers isatty itself and hands every other attribute to `stream`.
    return cast(TextIO, Unbreakable(stream))


@contextlib.contextmanager
def unbreakable() -> Iterator[None]:
    """Within the block, sys.stdout and sys.stderr never raise on a write (and what prints to
    them: rich consoles, logging handlers made inside it, handlers' own print())."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = unbreakable_stream(sys.stdout), unbreakable_stream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
