"""How a sweepq job reads as a Django task result: its status, its errors, its workers.

| sweepq job state | TaskResultStatus | notes                                                 |
|------------------|------------------|-------------------------------------------------------|
| available        | READY            | waiting for its first run, its run_after, or a retry  |
| running          | RUNNING          |                                                       |
| completed        | SUCCESSFUL       | `return_value` is the job's result                    |
| failed           | FAILED           | the last error says why (`failure_reason` on the job) |
| cancelled        | FAILED           | its last error is a `sweepq.Cancel`                   |

Each error of the job's history (its newest ten) that ended an execution becomes a `TaskError`:
an exception the task raised by its class's dotted path, read from the traceback; a
`sweepq.RetryAfter` or `sweepq.Cancel` by theirs; an execution that ran past its timeout, or
whose worker lost its lease, as `builtins.TimeoutError`; stored args that no longer fit the
function as `builtins.TypeError`. Executions handed back uncharged (the worker stopped, the
database went away) are not errors of the task and are left out.

The task of a result is the job's: its queue, its priority, and as `run_after` its `run_at` when
that is not its `created_at` (the `run_after` it was enqueued with; once a retry or a snooze
moved it, the time the job waits for), else None.
"""

from __future__ import annotations

import builtins
import re
from datetime import datetime

from sweepq.core.decision import error_line
from sweepq.core.jobs import Job, JobError, JobState

STATUS = {
    JobState.AVAILABLE: "READY",
    JobState.RUNNING: "RUNNING",
    JobState.COMPLETED: "SUCCESSFUL",
    JobState.FAILED: "FAILED",
    JobState.CANCELLED: "FAILED",
}
# Errors that name no exception class of their own, by kind.
_KIND_CLASS = {
    "retry_after": "sweepq.RetryAfter",
    "cancelled": "sweepq.Cancel",
    "timeout": "builtins.TimeoutError",
    "lease_expired": "builtins.TimeoutError",
    # The worker's process died while the task ran (killed, out of memory, a crash).
    "worker_died": "builtins.SystemError",
    # No worker that took the job had the task (handed back, then failed `unknown_task`).
    "unknown_task": "builtins.LookupError",
    "error": "builtins.TypeError",
}
# Not the task's failures: the execution was handed back without an attempt charged.
_HANDED_BACK = frozenset({"interrupted", "database_unavailable"})
# The last line of a Python traceback: "module.Class: message" (builtins and __main__ unqualified).
_EXCEPTION_LINE = re.compile(r"([A-Za-z_][\w.]*)(?::\s|:?$)")


def exception_path(error: JobError) -> str | None:
    """The dotted path of the exception class an error stands for (None: not the task's)."""
    if error.kind in _HANDED_BACK:
        return None
    if error.kind in _KIND_CLASS:
        return _KIND_CLASS[error.kind]
    match = _EXCEPTION_LINE.match(error_line(error.error))
    if match is None:
        return "builtins.Exception"
    name = match[1]
    if "." in name:
        return name
    return (
        f"builtins.{name}"
        if isinstance(getattr(builtins, name, None), type)
        else f"__main__.{name}"
    )


def task_errors(job: Job) -> list[tuple[str, str]]:
    """(exception class path, traceback text) of each error of the job that was the task's."""
    found: list[tuple[str, str]] = []
    for error in job.errors:
        path = exception_path(error)
        if path is not None:
            found.append((path, error.error))
    return found


def worker_ids(job: Job) -> list[str]:
    """One entry per attempt charged, so that `TaskResult.attempts` counts them: the id of the
    worker running the job for the attempt in progress, else "" (sweepq does not keep which
    worker ran an attempt once it ended)."""
    ids = [""] * job.attempt
    if job.state is JobState.RUNNING and job.worker_id is not None and ids:
        ids[-1] = job.worker_id
    return ids


def run_after(job: Job) -> datetime | None:
    """The `run_after` of a job's task: its `run_at`, unless that is when it was created (an
    enqueue without `run_after` runs at the transaction's `now()`, its `created_at`)."""
    return None if job.run_at == job.created_at else job.run_at
