"""The one place that decides what the end of an execution does to its job.

`decide` is a pure function: from the execution (its attempt and budget), how the handler ended
(it returned, or what it raised: `Snooze`, `RetryAfter` and `Cancel`, defined here, or any other
exception, a failure) and the time left before the job's deadline, it returns a `Decision`; the
worker records it as it is (`job_finish_many`), and tasks that asked to hear of outcomes
(`Task.on_outcome`) are told it.

The endings are listed in `core/endings.py` (`ENDINGS`), one row each, as data: what
happened, where it is decided, and what the job becomes. Most are the worker's: it calls
`decide()` on how the handler ended. A few are decided in SQL, where no handler runs: the claim
fails a job whose deadline has passed (`job_claim`), the maintenance leader fails an available
one past it (`job_expire_deadlines`) and takes back a job whose lease lapsed (`job_rescue`, after
a lost lease or a dead worker). Those rows name the statement, and `decide()` gives the same
ending for them (`DeadlinePassed`, `LeaseLapsed`): `tests/test_decision.py` holds `decide()` to
every row, and the statements to their rows against PostgreSQL.

A job for a task this worker has no handler for is handed back for a worker that has it (a newer
deploy, in a rolling one): `UNKNOWN_TASK_HANDBACKS` times `UNKNOWN_TASK_RETRY_SECONDS` apart,
about five minutes, before it fails `unknown_task`. What the handler raises never ends the
worker: `SystemExit`, `KeyboardInterrupt` and a cancellation of its own are failures like any
other exception (see `core/execution.py`).

A charged execution that was the last of the budget fails `max_attempts_exceeded` (`timeout`
when it timed out) instead of being rescheduled. The backoff is the task's retry policy's
(`core/retry.py`), else 1 s doubling per attempt. A reschedule that would not start before the
deadline fails the job at once, `deadline_exceeded` (what the handler ended with is still
recorded in its errors).
"""

from __future__ import annotations

import traceback
from datetime import timedelta
from typing import Literal

import msgspec

from .jobs import FailureReason
from .outage import is_connection_loss
from .retry import RetryPolicy, default_delay

MAX_ERROR_CHARS = 4_000
# A job whose execution lost the database runs again this much later.
OUTAGE_RETRY_SECONDS = 1.0
# A job whose task this worker does not know is handed back this often in a row (its `handbacks`
# column), this far apart, before it fails: long enough for a rolling deploy to bring up workers
# that know it.
UNKNOWN_TASK_HANDBACKS = 10
UNKNOWN_TASK_RETRY_SECONDS = 30.0

State = Literal["completed", "available", "failed", "cancelled"]


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """What the end of one execution does to its job."""

    state: State
    delay: float = 0.0  # seconds until it may run again (state available)
    charged: bool = True  # the execution counts against max_attempts
    snoozed: bool = False  # the execution counts as a snooze
    failure_reason: FailureReason | None = None
    error_kind: str | None = None
    error: str | None = None
    # The handler's return value as JSON text (state completed; None when it returned None):
    # set by the worker once the value passed `core/results.py`'s checks.
    result: str | None = None


# How an execution ended, in one word: `JobFinished.outcome`, `Worker.outcomes`, `Performed.outcome`
# (an enqueue's is `jobs.EnqueueOutcome`).
ExecutionOutcome = Literal["completed", "retry", "snooze", "cancel", "failed", "handed_back"]


def outcome_of(decision: Decision) -> ExecutionOutcome:
    """The decision in one word: what the queue does with the job."""
    match decision.state:
        case "completed":
            return "completed"
        case "cancelled":
            return "cancel"
        case "failed":
            return "failed"
    if decision.snoozed:
        return "snooze"
    # Available again: charged is a retry; uncharged (the worker stopped, the database went
    # away) is handed back.
    return "retry" if decision.charged else "handed_back"


# what a handler raises to end an execution otherwise than by returning or failing -----------------

MAX_DELAY_SECONDS = 36_525 * 86_400.0  # 100 years, as for enqueue's delay: a timestamp can hold it


def _seconds(delay: timedelta | float, what: str) -> float:
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    if not 0 <= seconds <= MAX_DELAY_SECONDS:  # also refuses NaN and infinity
        raise ValueError(f"{what} delay must be >= 0 seconds and at most 100 years, got {delay!r}")
    return seconds


MAX_REASON_LENGTH = 1_000


class Snooze(Exception):
    """Run this job again after `delay`, without charging an attempt.

    Args:
        delay: how long to wait (a timedelta or seconds).
        reason: why it waits, recorded in the job's history (`Job.errors`, kind `snoozed`)
            by the same write as the snooze itself; None records nothing.

    Example:
        >>> raise sweepq.Snooze(timedelta(seconds=30), reason="the API is down")  # doctest: +SKIP
    """

    def __init__(self, delay: timedelta | float, *, reason: str | None = None) -> None:
        self.seconds = _seconds(delay, "Snooze")
        if reason is not None and (
            not isinstance(reason, str) or not 0 < len(reason) <= MAX_REASON_LENGTH
        ):
            raise ValueError(
                f"Snooze reason must be None or a non-empty str of at most "
                f"{MAX_REASON_LENGTH:,} characters, got {reason!r:.80}"
            )
        self.reason = reason
        super().__init__(f"snoozed for {self.seconds:g}s" + (f": {reason}" if reason else ""))


class RetryAfter(Exception):
    """Retry this job after `delay` (a 429's Retry-After, say).

    Args:
        delay: how long to wait (a timedelta or seconds).
        consume_budget: charge the attempt to `max_attempts` (default), or, when False, treat
            it like a snooze: nothing charged, `snoozes` counted, the deadline still applies.
    """

    def __init__(self, delay: timedelta | float, *, consume_budget: bool = True) -> None:
        self.seconds = _seconds(delay, "RetryAfter")
        self.consume_budget = consume_budget
        super().__init__(f"retry after {self.seconds:g}s")


class Cancel(Exception):
    """End this job as `cancelled`: terminal, and not a failure.

    Args:
        reason: recorded in the job's errors.
    """

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        super().__init__(reason or "cancelled by the handler")


# the endings no handler raises --------------------------------------------------------------------


class ExecutionTimeout(Exception):
    """The handler ran past its timeout (`timeout=`) and was cancelled: a failure, retried."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the handler ran past its timeout of {seconds:g} s and was cancelled")
        self.seconds = seconds


class Interrupted(Exception):
    """The worker stopped the execution (shutdown): nothing is charged."""


class UnknownTask(Exception):
    """No handler for the job's task is registered in this worker; `handbacks` is how many times
    in a row workers without it have handed the job back already."""

    def __init__(self, task: str, handbacks: int) -> None:
        self.task = task
        self.handbacks = handbacks
        if handbacks + 1 >= UNKNOWN_TASK_HANDBACKS:
            message = (
                f"no handler for task {task!r} in any of the {handbacks + 1} workers that took "
                "the job: register the task in the workers' app (or enqueue a task they know); "
                "retry the job once they have it"
            )
        else:
            message = (
                f"no handler for task {task!r} is registered in this worker; handed back for a "
                f"worker that has it ({handbacks + 1} of {UNKNOWN_TASK_HANDBACKS} tries)"
            )
        super().__init__(message)


class NotRunnable(Exception):
    """The job cannot run: stored args that do not fit the handler (`invalid_args`), or another
    reason retrying cannot help with (`error`)."""

    def __init__(self, message: str, reason: FailureReason = "error") -> None:
        super().__init__(message)
        self.reason: FailureReason = reason


class DeadlinePassed(Exception):
    """The job's deadline passed before an execution could start: `job_claim` fails the job it
    would have run, `job_expire_deadlines` one that waits; no attempt is charged."""

    def __init__(self) -> None:
        super().__init__("the job's deadline passed before it ran")


class LeaseLapsed(Exception):
    """The job's lease lapsed while it ran (`job_rescue`): its worker stopped renewing it, or
    died (`died`: none of its connections is open). `crashes` is how many workers died running
    the job before; a second death fails it `worker_died`."""

    def __init__(self, worker_id: str, *, died: bool, crashes: int = 0) -> None:
        if died:
            message = (
                f"worker {worker_id} died while running it (its lease lapsed and none of its "
                "connections is open)"
            )
        else:
            message = f"lease held by worker {worker_id} expired"
        super().__init__(message)
        self.died = died
        self.crashes = crashes


def decide(
    raised: BaseException | None,
    *,
    attempt: int,
    max_attempts: int,
    deadline_in: float | None,
    policy: RetryPolicy | None = None,
    result: str | None = None,
) -> Decision:
    """Decide the end of an execution.

    Args:
        raised: what the handler raised, or None when it returned.
        attempt: the execution's attempt number (charged executions so far, this one included).
        max_attempts: the job's attempt budget.
        deadline_in: seconds from now until the job's deadline (None: it has none).
        policy: the task's retry policy: its backoff, and the exceptions it retries or discards.
        result: what the handler returned, as JSON text (`core/results.py`), kept by a
            completion.
    """
    if raised is None:
        return Decision(state="completed", result=result)
    decision = _ending(raised, last=attempt >= max_attempts, attempt=attempt, policy=policy)
    if decision.state == "available" and deadline_in is not None and decision.delay >= deadline_in:
        return msgspec.structs.replace(
            decision, state="failed", delay=0.0, failure_reason="deadline_exceeded"
        )
    return decision


def _ending(
    raised: BaseException, *, last: bool, attempt: int, policy: RetryPolicy | None
) -> Decision:
    match raised:
        case Snooze(reason=None):
            return Decision(state="available", delay=raised.seconds, charged=False, snoozed=True)
        case Snooze():
            return Decision(
                state="available", delay=raised.seconds, charged=False, snoozed=True,
                error_kind="snoozed", error=raised.reason,
            )  # fmt: skip
        case RetryAfter(consume_budget=False):
            return Decision(state="available", delay=raised.seconds, charged=False, snoozed=True)
        case RetryAfter():
            return _retry(raised.seconds, last, "retry_after", str(raised))
        case Cancel():
            return Decision(state="cancelled", error_kind="cancelled", error=str(raised))
        case Interrupted():
            return Decision(
                state="available", charged=False, error_kind="interrupted", error=str(raised)
            )
        case NotRunnable():
            return Decision(
                state="failed", failure_reason=raised.reason, error_kind="error", error=str(raised)
            )
        case DeadlinePassed():
            return Decision(state="failed", charged=False, failure_reason="deadline_exceeded")
        case LeaseLapsed(died=True, crashes=crashes) if crashes >= 1:
            return Decision(
                state="failed", failure_reason="worker_died", error_kind="worker_died",
                error=str(raised),
            )  # fmt: skip
        case LeaseLapsed():
            # Taken back at once; the attempt was charged when the job was claimed.
            kind = "worker_died" if raised.died else "lease_expired"
            return _retry(0.0, last, kind, str(raised))
        case UnknownTask() if raised.handbacks + 1 >= UNKNOWN_TASK_HANDBACKS:
            return Decision(
                state="failed", charged=False, failure_reason="unknown_task",
                error_kind="unknown_task", error=str(raised),
            )  # fmt: skip
        case UnknownTask():
            return Decision(
                state="available", delay=UNKNOWN_TASK_RETRY_SECONDS, charged=False,
                error_kind="unknown_task", error=str(raised),
            )  # fmt: skip
        case _ if is_connection_loss(raised):
            return Decision(
                state="available",
                delay=OUTAGE_RETRY_SECONDS,
                charged=False,
                error_kind="database_unavailable",
                error=describe(raised),
            )
        case ExecutionTimeout():
            # Retried like any failure; its last attempt fails `timeout`.
            delay = _backoff(policy, attempt, raised)
            return _retry(delay, last, "timeout", str(raised), exhausted="timeout")
        case _ if policy is not None and policy.discards(raised):
            return Decision(
                state="failed", failure_reason="error", error_kind="exception",
                error=describe(raised),
            )  # fmt: skip
        case _:
            return _retry(_backoff(policy, attempt, raised), last, "exception", describe(raised))


def _backoff(policy: RetryPolicy | None, attempt: int, raised: BaseException) -> float:
    if policy is not None:
        delay = policy.delay(attempt, raised)
        if delay is not None:
            return delay
    return default_delay(attempt)


def _retry(
    delay: float,
    last: bool,
    kind: str,
    error: str,
    exhausted: FailureReason = "max_attempts_exceeded",
) -> Decision:
    if last:
        return Decision(state="failed", failure_reason=exhausted, error_kind=kind, error=error)
    return Decision(state="available", delay=delay, error_kind=kind, error=error)


def error_line(error: str | None) -> str:
    """The line that says what went wrong: of a traceback, the line naming the exception (the
    first after its last indented frame line), else the error's first line."""
    lines = [line for line in (error or "").splitlines() if line.strip()]
    framed = [i for i, line in enumerate(lines) if line.startswith(" ")]
    after = framed[-1] + 1 if framed else 0
    return lines[after].strip() if after < len(lines) else (lines[-1].strip() if lines else "")


def describe(exc: BaseException) -> str:
    """The exception with its traceback, shortened in the middle past `MAX_ERROR_CHARS`."""
    text = "".join(traceback.format_exception(exc))
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS // 4] + "\n...\n" + text[-(MAX_ERROR_CHARS * 3 // 4) :]
    return text
