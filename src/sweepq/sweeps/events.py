"""Events of the sweeps: what observers registered on an App (`App.observe`) hear of runs.

They are emitted to the same observers as the core's events (`sweepq.core.events`), in line with
the link or the run that emits them, and cost nothing when no observer is registered.

| event                | when                                          |
|----------------------|-----------------------------------------------|
| `SweepLinkCommitted` | a sweep's link fanned out a page              |
| `SweepRunEnded`      | a sweep run ended, with its exact counts      |
| `SweepThrottled`     | a sweep's link waits on a throttle check      |
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from ..core.events import JobClaimed, JobFinished, JobStarted


class SweepLinkCommitted(msgspec.Struct, frozen=True, kw_only=True):
    """A link of a sweep run committed a page: its leaves, the cursor, and the next link.

    Attributes:
        run_id: the run.
        sweep: the sweep's name.
        items: leaves this page enqueued.
        enqueued: leaves the run has enqueued in all.
        draining: the page was the last one.
    """

    run_id: int
    sweep: str
    items: int
    enqueued: int
    draining: bool


class SweepRunEnded(msgspec.Struct, frozen=True, kw_only=True):
    """A sweep run ended.

    Attributes:
        run_id: the run.
        sweep: the sweep's name.
        state: `completed`, `failed` or `cancelled`.
        completed: its leaves that completed.
        failed: its leaves that failed.
        cancelled: its leaves that were cancelled.
        failure: why it failed, if it did.
    """

    run_id: int
    sweep: str
    state: str
    completed: int
    failed: int
    cancelled: int
    failure: str | None = None


class SweepThrottled(msgspec.Struct, frozen=True, kw_only=True):
    """A sweep's link waits before fanning out its page: one of the sweep's throttle checks
    asked it to (`Sweep.throttle`).

    Attributes:
        run_id: the run.
        sweep: the sweep's name.
        reason: what the check said (e.g. `replica lag 7.2 s > 5 s`).
        seconds: how long the link waits before it looks again.
    """

    run_id: int
    sweep: str
    reason: str
    seconds: float


Event = JobClaimed | JobStarted | JobFinished | SweepLinkCommitted | SweepRunEnded | SweepThrottled
"""Any of the events an observer hears."""

Observer = Callable[[Event], None]
"""A function of one event, registered with `App.observe`; quick, it runs in line with work."""
