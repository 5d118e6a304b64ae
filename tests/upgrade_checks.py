"""What the upgrade tests share besides old code: waiting on a condition while old processes
live, and the most executions that overlapped (a concurrency limit across versions)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

import anyio
import pytest

from upgrade_history import OldProcess


async def wait_until(
    check: Callable[[], Awaitable[str | None]],
    *,
    timeout: float,
    processes: Sequence[OldProcess] = (),
) -> None:
    """Poll `check` until it returns None (satisfied; else it says what is missing), failing
    after `timeout` seconds, or at once if one of `processes` exits, with their stderr."""
    missing: str | None = "not checked yet"
    with anyio.move_on_after(timeout):
        while True:
            missing = await check()
            if missing is None:
                return
            for p in processes:
                if p.process.returncode is not None:
                    pytest.fail(f"{p.name} exited ({p.process.returncode}): {p.errors()}")
            await anyio.sleep(0.05)
    logs = "".join(f"\n{p.name}'s stderr:\n{p.errors()}" for p in processes)
    pytest.fail(f"not reached within {timeout:g} s: {missing}{logs}")


def most_at_once(intervals: Sequence[tuple[datetime, datetime]]) -> int:
    """The most intervals that overlap at any instant (one that ends as another starts does
    not overlap it)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    peak = current = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak
