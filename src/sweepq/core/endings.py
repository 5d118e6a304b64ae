"""The decision table: every ending of an execution, where it is decided, and what it does to
its job, as data (`ENDINGS`).

Most endings are the worker's (`decide()` on how the handler ended, in `core/execution.py`);
the rows whose `where` names a statement are written by SQL where no handler runs, and
`decide()` gives the same for them. `tests/test_decision.py` holds `decide()` to every row, and
each statement to its rows against PostgreSQL.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from .decision import (
    UNKNOWN_TASK_HANDBACKS,
    Cancel,
    DeadlinePassed,
    ExecutionTimeout,
    Interrupted,
    LeaseLapsed,
    NotRunnable,
    RetryAfter,
    Snooze,
    State,
    UnknownTask,
)
from .errors import InvalidResultError
from .jobs import FailureReason
from .retry import RetryPolicy

Where = Literal["worker", "job_claim", "job_rescue", "job_expire_deadlines"]


class Ending(NamedTuple):
    """One row of the decision table: an ending, where it is decided, and what it does.

    `raised`, `attempt`, `max_attempts`, `deadline_in` and `policy` are an execution that ends
    so (`decide()`'s arguments); `state`, `failure_reason`, `error_kind` and `charged` are what
    the job becomes. A row decided in SQL (`where` names the statement) is what that statement
    writes, and `decide()` gives the same.
    """

    case: str
    where: Where
    raised: BaseException | None
    state: State
    failure_reason: FailureReason | None = None
    error_kind: str | None = None
    charged: bool = True
    attempt: int = 1
    max_attempts: int = 3
    deadline_in: float | None = None
    policy: RetryPolicy | None = None


_DISCARDS = RetryPolicy(discard_on=(ValueError,))

# fmt: off
ENDINGS: tuple[Ending, ...] = (
    Ending("returns (its value is the result)", "worker", None, "completed"),
    Ending("raises Snooze(d)", "worker", Snooze(5), "available", charged=False),
    Ending(
        "... with reason=", "worker", Snooze(5, reason="busy"), "available",
        error_kind="snoozed", charged=False,
    ),
    Ending("raises RetryAfter(d)", "worker", RetryAfter(5), "available", error_kind="retry_after"),
    Ending(
        "... with consume_budget=False", "worker", RetryAfter(5, consume_budget=False),
        "available", charged=False,
    ),
    Ending("raises Cancel(reason)", "worker", Cancel("no"), "cancelled", error_kind="cancelled"),
    Ending("raises anything else", "worker", RuntimeError("boom"), "available",
           error_kind="exception"),
    Ending(
        "... on its last attempt", "worker", RuntimeError("boom"), "failed",
        failure_reason="max_attempts_exceeded", error_kind="exception", attempt=3,
    ),
    Ending(
        "... that its policy discards", "worker", ValueError("bad"), "failed",
        failure_reason="error", error_kind="exception", policy=_DISCARDS,
    ),
    Ending(
        "... whose backoff passes its deadline", "worker", RuntimeError("boom"), "failed",
        failure_reason="deadline_exceeded", error_kind="exception", deadline_in=0.5,
    ),
    Ending(
        "runs past its timeout (async def or def)", "worker", ExecutionTimeout(1), "available",
        error_kind="timeout",
    ),
    Ending(
        "... on its last attempt", "worker", ExecutionTimeout(1), "failed",
        failure_reason="timeout", error_kind="timeout", attempt=3,
    ),
    Ending(
        "returns a value not storable", "worker", InvalidResultError("t", "too big"), "available",
        error_kind="exception",
    ),
    Ending(
        "has stored args that do not fit", "worker", NotRunnable("no", reason="invalid_args"),
        "failed", failure_reason="invalid_args", error_kind="error",
    ),
    Ending(
        "is stopped with the worker", "worker", Interrupted("stop"), "available",
        error_kind="interrupted", charged=False,
    ),
    Ending(
        "has no handler in this worker", "worker", UnknownTask("t", 0), "available",
        error_kind="unknown_task", charged=False,
    ),
    Ending(
        "... for the 10th time in a row", "worker", UnknownTask("t", UNKNOWN_TASK_HANDBACKS - 1),
        "failed", failure_reason="unknown_task", error_kind="unknown_task", charged=False,
    ),
    Ending(
        "is claimed past its deadline", "job_claim", DeadlinePassed(), "failed",
        failure_reason="deadline_exceeded", charged=False, deadline_in=-1.0,
    ),
    Ending(
        "waits past its deadline", "job_expire_deadlines", DeadlinePassed(), "failed",
        failure_reason="deadline_exceeded", charged=False, deadline_in=-1.0,
    ),
    Ending(
        "loses its lease", "job_rescue", LeaseLapsed("w", died=False), "available",
        error_kind="lease_expired",
    ),
    Ending(
        "... on its last attempt", "job_rescue", LeaseLapsed("w", died=False), "failed",
        failure_reason="max_attempts_exceeded", error_kind="lease_expired", attempt=3,
    ),
    Ending(
        "... past its deadline", "job_rescue", LeaseLapsed("w", died=False), "failed",
        failure_reason="deadline_exceeded", error_kind="lease_expired", deadline_in=-1.0,
    ),
    Ending(
        "kills its worker", "job_rescue", LeaseLapsed("w", died=True), "available",
        error_kind="worker_died",
    ),
    Ending(
        "... a second one", "job_rescue", LeaseLapsed("w", died=True, crashes=1), "failed",
        failure_reason="worker_died", error_kind="worker_died",
    ),
)
# fmt: on
