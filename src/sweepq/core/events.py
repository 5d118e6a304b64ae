"""Events of the core: what observers registered on an App (`App.observe`) hear of executions.

An observer is a plain function of one event. It runs in the worker's event loop, in line with
the work, so it must be quick (count, time, hand off); its exceptions are logged, never the
job's. With no observer, nothing is built: an event costs one attribute check.

| event         | when                                               |
|---------------|----------------------------------------------------|
| `JobClaimed`  | a worker claimed the job (its lease begins)        |
| `JobStarted`  | its handler is about to run                        |
| `JobFinished` | the execution ended, as decided (not yet recorded) |

The layers above the core emit their own events to the same observers (the sweeps':
`sweepq.sweeps.events`); `sweepq.events` names them all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from .decision import ExecutionOutcome
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
    outcome: ExecutionOutcome
    duration: float
    failure_reason: FailureReason | None = None
    error: str | None = None


Observer = Callable[[Any], None]
"""A function of one event, registered with `App.observe`; quick, it runs in line with work.

The core holds the observers of every layer's events but knows only its own, so the event's
type is left open here; `sweepq.events.Observer` is the same function typed over every event.
"""


def emit(observers: Sequence[Observer], event: msgspec.Struct) -> None:
    """Tell every observer; an observer that raises is logged and the others still hear it."""
    for observer in observers:
        try:
            observer(event)
        except Exception:
            logger.exception("observer %r failed on %s", observer, type(event).__name__)
