"""Waiting on a condition with a deadline, never for a fixed time.

A test that needs something to have happened (a row another process writes, a worker that
started listening, a thread that began) polls for it: it goes on as soon as the condition holds,
and fails with the condition named if it does not hold within the deadline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio


async def wait_until(
    check: Callable[[], Awaitable[bool]],
    *,
    timeout: float = 20.0,
    what: str | None = None,
    every: float = 0.02,
) -> None:
    """Await `check()` every `every` seconds until it is true; fail after `timeout` seconds.

    `check` may assert (a worker process that died, say) to fail at once.
    """
    try:
        with anyio.fail_after(timeout):
            while not await check():
                await anyio.sleep(every)
    except TimeoutError:
        raise AssertionError(f"not within {timeout} s: {what or check}") from None


class StartLine:
    """Tasks that must start at the same instant: each awaits `reached()` once it is ready (its
    connection open, its setup done), and `release()` lets them all go once `runners` have."""

    def __init__(self, runners: int) -> None:
        self.runners = runners
        self.arrived = 0
        self._everyone = anyio.Event()
        self._go = anyio.Event()

    async def reached(self) -> None:
        self.arrived += 1
        if self.arrived == self.runners:
            self._everyone.set()
        await self._go.wait()

    async def release(self, *, timeout: float = 20.0) -> None:
        try:
            with anyio.fail_after(timeout):
                await self._everyone.wait()
        except TimeoutError:
            raise AssertionError(
                f"{self.arrived} of {self.runners} tasks reached the start line in {timeout} s"
            ) from None
        self._go.set()
