"""The job as users see it: its states, its row, and the result of enqueueing it."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Literal, NewType

import msgspec

JobId = NewType("JobId", int)
"""A job's id: an `int`, increasing with each job created (`Enqueued.job_id`, `Job.id`)."""


class JobState(enum.StrEnum):
    """A job's state; mirrors the `job_state` enum in PostgreSQL.

    Attributes:
        AVAILABLE: waiting to run: due, or waiting for its `run_at` (a delay, a backoff, a
            snooze).
        RUNNING: claimed by a worker that holds its lease (renewed by heartbeats).
        COMPLETED: the handler returned.
        FAILED: it will not run again by itself; `Job.failure_reason` says why.
        CANCELLED: cancelled by `App.cancel` or by the handler raising `Cancel`; not a failure.

    Terminal states (`COMPLETED`, `FAILED`, `CANCELLED`) never change except by an explicit
    `App.retry`.
    """

    AVAILABLE = "available"  # waiting for its run_at, or due
    RUNNING = "running"  # claimed by a worker that holds its lease
    COMPLETED = "completed"
    FAILED = "failed"  # see Job.failure_reason
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Whether the state is terminal: completed, failed or cancelled."""
        return self in _TERMINAL


_TERMINAL = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})

FailureReason = Literal[
    "max_attempts_exceeded",
    "deadline_exceeded",
    "error",
    "invalid_args",
    "timeout",
    "worker_died",
    "unknown_task",
]
EnqueueOutcome = Literal["created", "existing_active", "existing_terminal"]


class JobError(msgspec.Struct, frozen=True):
    """One recorded error of a job (the newest ten are kept, in `Job.errors`).

    Attributes:
        attempt: the attempt it happened on.
        at: when, as an ISO 8601 timestamp.
        kind: what ended the execution: `exception`, `retry_after`, `cancelled`, `timeout`,
            `lease_expired` (its worker lost the lease), `worker_died` (its worker's process
            died while running it), `interrupted`, `database_unavailable`, `unknown_task` (the
            worker had no handler for it), `error`, or `snoozed` (not an error: a
            `Snooze(reason=...)`, the reason).
        error: the text; for an exception, its traceback.
    """

    attempt: int
    at: str
    kind: str
    error: str


class Job(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one job row (`App.get_job`).

    Attributes:
        id: the job's id.
        task: the task's name.
        queue: the queue it is in.
        priority: higher runs first among due jobs.
        state: where it is in its life.
        args: its arguments, as stored (JSON values).
        attempt: executions charged to `max_attempts` so far (a snooze is not charged).
        max_attempts: executions that may be charged before it fails `max_attempts_exceeded`.
        snoozes: how many times it was deferred without an attempt charged (a `Snooze`, or a
            `RetryAfter` with `consume_budget=False`).
        errors: its newest ten errors, oldest first.
        run_at: when it may start (for a waiting job: its delay, backoff or snooze).
        created_at: when it was enqueued.
        attempted_at: when it was last claimed, or None.
        finished_at: when it became terminal, or None.
        deadline_at: when its deadline passes, or None.
        failure_reason: set exactly when the state is `failed`: why it failed (for example
            `max_attempts_exceeded` or `deadline_exceeded`).
        worker_id: the worker that holds its lease while it runs, else None.
        lease_expires_at: when the lease of a running job lapses, or None.
        idempotency_scope: the namespace of `idempotency_key` (`""` by default).
        idempotency_key: its idempotency key, or None.
        identity_key: its identity key, or None.
        concurrency_key: its concurrency key, or None.
        group: the job group it belongs to, or None.
        claims: how many times it was claimed; with the id, the token of the current claim.
        trace_context: the W3C traceparent of whoever enqueued it, if they were traced.
        timeout: the most seconds one execution may run, or None.
        result: what the handler returned, read back from JSON (dicts, lists, str, int,
            float, bool), once the job is `completed`; None while it is not, and when the
            handler returned None. Bounded by the App's `result_max_bytes`; removed with the
            job by retention.
        crashes: how many workers died while running it since it last ran to an end (a job
            whose worker died twice fails `worker_died`).
        handbacks: how many times in a row a worker without a handler for its task handed it
            back (the tenth fails it `unknown_task`).
        unreadable: None, unless its stored args or result cannot be read back (JSON nested
            deeper than Python can decode, written before sweepq refused it at enqueue); then
            it says which, and `args` is `{}` or `result` is None. Such a job fails
            `invalid_args` when claimed.
    """

    id: JobId
    task: str
    queue: str
    priority: int
    state: JobState
    args: dict[str, Any]
    attempt: int
    max_attempts: int
    snoozes: int
    errors: list[JobError]
    run_at: datetime
    created_at: datetime
    attempted_at: datetime | None
    finished_at: datetime | None
    deadline_at: datetime | None
    failure_reason: FailureReason | None
    worker_id: str | None
    lease_expires_at: datetime | None
    idempotency_scope: str
    idempotency_key: str | None
    identity_key: str | None
    concurrency_key: str | None
    group: str | None = msgspec.field(name="job_group")
    claims: int = 0  # times the job was claimed; with the id, the token of the current claim
    trace_context: str | None = None
    timeout: float | None = None
    result: Any = None
    crashes: int = 0
    handbacks: int = 0
    unreadable: str | None = None


class Enqueued(msgspec.Struct, frozen=True):
    """What `enqueue` did: the job it points at, and whether that job is new.

    Attributes:
        job_id: the job this enqueue points at: the new job, or the one it was deduplicated
            against.
        outcome: `created` (a new job), `existing_active` (a job with this key is active and
            will do the work) or `existing_terminal` (it has already finished: nothing will run
            for this enqueue, and a WARNING is logged).
    """

    job_id: JobId
    outcome: EnqueueOutcome

    @property
    def created(self) -> bool:
        """Whether a new job was inserted (`outcome == "created"`)."""
        return self.outcome == "created"


class GroupCounts(msgspec.Struct, frozen=True):
    """The jobs of a group per state (`App.group_counts`).

    Attributes:
        available: jobs waiting to run (due, or scheduled for later).
        running: jobs running now.
        completed: jobs that completed.
        failed: jobs that failed.
        cancelled: jobs that were cancelled.
    """

    available: int = 0
    running: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def outstanding(self) -> int:
        """Jobs not finished yet: available (waiting or scheduled) or running."""
        return self.available + self.running

    @property
    def total(self) -> int:
        """Every job of the group that retention has not removed yet."""
        return self.outstanding + self.completed + self.failed + self.cancelled


class GroupProgress(msgspec.Struct, frozen=True):
    """A group's jobs not finished yet (`App.group_progress`): due now, waiting (for a retry, a
    snooze or their run_at), and running; and those that ended failed or cancelled.

    Attributes:
        due: available jobs that may start now.
        waiting: available jobs waiting for a retry's backoff, a snooze or their run_at.
        running: jobs running now.
        waiting_seconds: how long until the last waiting job is due (None when none waits):
            nothing in the group ends before then.
        failed: jobs that failed for good.
        cancelled: jobs that ended cancelled.
    """

    due: int = 0
    waiting: int = 0
    running: int = 0
    waiting_seconds: float | None = None
    failed: int = 0
    cancelled: int = 0

    @property
    def outstanding(self) -> int:
        """Jobs not finished yet: due, waiting or running."""
        return self.due + self.waiting + self.running


class GroupClosure(msgspec.Struct, frozen=True):
    """A group's closure (`App.close_group`): sealed against new jobs, and its `then` job,
    enqueued once when every job of the group has ended.

    Attributes:
        group: the group's name.
        then_job: the `then` job, once it is enqueued (its id: `wait_for` it, `get_job` it);
            None before the group has ended, and for a closure without a `then`.
        fired: whether the group has ended since it was closed (its `then`, if any, is then
            enqueued). A group that was empty when closed fires at once.
        already_closed: the group was closed before this call: this is the earlier closure,
            unchanged (its `then`, not the one this call passed).
    """

    group: str
    then_job: JobId | None
    fired: bool
    already_closed: bool


class JobWait(msgspec.Struct, frozen=True, kw_only=True):
    """Why a job waits, if it does (`App.job_waits`).

    Attributes:
        id: the job.
        state: its state.
        queue: its queue.
        due_seconds: how long it has been due without a worker claiming it (None unless it is
            available and due).
        wait_seconds: how long until it is due (None unless it is available, later).
        last_kind: the kind of the newest entry of its history (`snoozed` for a
            `Snooze(reason=...)`), or None.
        last_error: the text of that entry, or None.
        queue_running: whether any job of its queue is running now: a worker serves the queue.
        queue_paused: whether its queue is paused (`App.pause_queue`): no worker starts it.
    """

    id: int
    state: str
    queue: str
    due_seconds: float | None
    wait_seconds: float | None
    last_kind: str | None
    last_error: str | None
    queue_running: bool
    queue_paused: bool = False
