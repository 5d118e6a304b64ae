"""Events: what observers registered on an App hear (`App.observe`).

An observer is a plain function of one event. It runs in the worker's event loop, in line with
the work, so it must be quick (count, time, hand off); its exceptions are logged, never the
job's. With no observer, nothing is built: an event costs one attribute check.

| event                | when                                          |
|----------------------|-----------------------------------------------|
| `JobClaimed`         | a worker claimed the job (its lease begins)   |
| `JobStarted`         | its handler is about to run                   |
| `JobFinished`        | the execution ended, as decided (not yet recorded) |
| `SweepLinkCommitted` | a sweep's link fanned out a page              |
| `SweepRunEnded`      | a sweep run ended, with its exact counts      |
| `SweepThrottled`     | a sweep's link waits on a throttle check      |
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import msgspec

from .decision import Outcome
from .jobs import FailureReason, JobId

logger = logging.getLogger("sweepq.events")


class JobClaimed(msgspec.Struct, frozen=True, kw_only=True):
    """A worker claimed the job.

    Attributes:
        job_id: the job.
        task: its task.
        queue: its queue.
        attempt: the attempt this execution is (charged executions so far, this one included).
        worker_id: the worker that holds its lease.
        waited: seconds from when the job was due (enqueued, or its backoff or snooze over) to
            this claim.
    """

    job_id: JobId
    task: str
    queue: str
    attempt: int
    worker_id: str
    waited: float


class JobStarted(msgspec.Struct, frozen=True, kw_only=True):
    """The job's handler is about to run (in the worker's event loop, or a thread for a `def`).

    Attributes:
        job_id: the job.
        task: its task.
        queue: its queue.
        attempt: this execution's attempt number.
        worker_id: the worker running it.
        trace_context: the enqueuer's W3C traceparent, if it was traced (`trace_context`).
    """

    job_id: JobId
    task: str
    queue: str
    attempt: int
    worker_id: str
    trace_context: str | None = None


class JobFinished(msgspec.Struct, frozen=True, kw_only=True):
    """An execution ended; its outcome is decided and about to be recorded.

    Attributes:
        job_id: the job.
        task: its task.
        queue: its queue.
        attempt: this execution's attempt number.
        worker_id: the worker that ran it.
        outcome: `completed`, `retry`, `snooze`, `cancel`, `failed` or `handed_back`.
        duration: seconds from its claim to its end.
        failure_reason: why it failed, for `failed`.
        error: the line that says what went wrong (an exception's), if anything did.
    """

    job_id: JobId
    task: str
    queue: str
    attempt: int
    worker_id: str
    outcome: Outcome
    duration: float
    failure_reason: FailureReason | None = None
    error: str | None = None


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


def emit(observers: Sequence[Observer], event: Event) -> None:
    """Tell every observer; an observer that raises is logged and the others still hear it."""
    for observer in observers:
        try:
            observer(event)
        except Exception:
            logger.exception("observer %r failed on %s", observer, type(event).__name__)
