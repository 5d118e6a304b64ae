"""The job as users see it: its states, its row, and the result of enqueueing it."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Literal, NewType

import msgspec

JobId = NewType("JobId", int)


class JobState(enum.StrEnum):
    """Mirrors the `job_state` enum in PostgreSQL."""

    AVAILABLE = "available"  # waiting for its run_at, or due
    RUNNING = "running"  # claimed by a worker that holds its lease
    COMPLETED = "completed"
    FAILED = "failed"  # see Job.failure_reason
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})

FailureReason = Literal["max_attempts_exceeded", "deadline_exceeded", "error"]
EnqueueOutcome = Literal["created", "existing_active", "existing_terminal"]


class JobError(msgspec.Struct, frozen=True):
    """One recorded error of a job (the newest ten are kept)."""

    attempt: int
    at: str
    kind: str
    error: str


class Job(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one job row."""

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


class Enqueued(msgspec.Struct, frozen=True):
    """What `enqueue` did: the job it points at, and whether that job is new."""

    job_id: JobId
    outcome: EnqueueOutcome

    @property
    def created(self) -> bool:
        return self.outcome == "created"


class GroupCounts(msgspec.Struct, frozen=True):
    """The jobs of a group per state (`App.group_counts`)."""

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
        return self.outstanding + self.completed + self.failed + self.cancelled


class GroupProgress(msgspec.Struct, frozen=True):
    """A group's jobs not finished yet (`App.group_progress`): due now, waiting (for a retry, a
    snooze or their run_at), and running; `waiting_seconds` is how long until the last waiting
    one is due (None when none waits): nothing in the group ends before then."""

    due: int = 0
    waiting: int = 0
    running: int = 0
    waiting_seconds: float | None = None

    @property
    def outstanding(self) -> int:
        return self.due + self.waiting + self.running
