"""The rows the queue's statements return, and the batch of decisions `job_finish_many` records:
msgspec Structs made by the wrappers of `core/queries.py`; `job_from_row` reads a whole row of the
jobs table as a `Job`."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias

import asyncpg
import msgspec

from .jobs import Job, JobId

if TYPE_CHECKING:
    from .decision import Decision


ClaimToken: TypeAlias = tuple[int, int]
"""A claim's token: the job's id and its claim count, unique to one claim of one job."""


class Claimed(msgspec.Struct, array_like=True):
    """A job a worker has just claimed."""

    id: JobId
    claims: int
    task: str
    args: str
    attempt: int
    max_attempts: int
    snoozes: int
    queue: str
    deadline_in: float | None  # seconds from the claim to the job's deadline (database time)
    group: str | None
    waited: float  # seconds from when it was due to this claim
    trace_context: str | None  # the enqueuer's traceparent
    timeout: float | None  # the most seconds this execution may run
    crashes: int  # workers that died running it (job_rescue): a suspect, run alone, if > 0
    handbacks: int  # times in a row workers without its task's handler handed it back

    @property
    def token(self) -> ClaimToken:
        return (self.id, self.claims)


class Rescued(msgspec.Struct, frozen=True, array_like=True):
    """A running job whose lease lapsed, taken back from the worker that held it."""

    id: JobId
    worker_id: str
    died: bool  # none of the worker's connections was open: its process is gone
    state: str  # available again, or failed
    failure_reason: str | None


class ClaimBatch(msgspec.Struct, frozen=True):
    """What one claim returned: the jobs; whether to claim again at once (it woke concurrency
    keys, whose jobs the next claim can take, or it was light and found a key in play); and
    whether the next claim may be light (no key was in play)."""

    jobs: list[Claimed]
    woke: bool
    light: bool = False


class FinishBatch(msgspec.Struct):
    """The decisions of ended executions, as parallel columns, that `job_finish_many` records in
    one statement."""

    id: list[int] = msgspec.field(default_factory=list)
    claims: list[int] = msgspec.field(default_factory=list)
    state: list[str] = msgspec.field(default_factory=list)
    delay: list[float] = msgspec.field(default_factory=list)
    refund: list[bool] = msgspec.field(default_factory=list)
    snoozed: list[bool] = msgspec.field(default_factory=list)
    failure_reason: list[str | None] = msgspec.field(default_factory=list)
    error_kind: list[str | None] = msgspec.field(default_factory=list)
    error: list[str | None] = msgspec.field(default_factory=list)
    result: list[str | None] = msgspec.field(default_factory=list)

    def add(self, token: ClaimToken, decision: Decision) -> None:
        self.id.append(token[0])
        self.claims.append(token[1])
        self.state.append(decision.state)
        self.delay.append(decision.delay)
        self.refund.append(not decision.charged)
        self.snoozed.append(decision.snoozed)
        self.failure_reason.append(decision.failure_reason)
        self.error_kind.append(decision.error_kind)
        # PostgreSQL text cannot hold NUL, and an exception message may.
        error = decision.error
        self.error.append(None if error is None else error.replace("\x00", "\\x00"))
        self.result.append(decision.result)

    def tokens(self) -> list[ClaimToken]:
        return list(zip(self.id, self.claims, strict=True))

    def sorted(self) -> FinishBatch:
        """The same decisions in job id order (the order the statements lock rows in)."""
        if all(a <= b for a, b in zip(self.id, self.id[1:], strict=False)):
            return self
        order = sorted(range(len(self.id)), key=self.id.__getitem__)
        return FinishBatch(
            **{f: [getattr(self, f)[i] for i in order] for f in FinishBatch.__struct_fields__}
        )

    def __len__(self) -> int:
        return len(self.id)


class Recorded(msgspec.Struct, frozen=True):
    """What one write of outcomes recorded: the claims it matched, and the closed groups
    waiting for their end among those of the jobs it ended (for the firing step)."""

    tokens: set[ClaimToken]
    sealed: list[str]


class LockedGroup(msgspec.Struct, frozen=True, array_like=True):
    """A sealed, unfired group whose row the firing step holds, with its `then` (JSON)."""

    name: str
    then_spec: str | None


class GroupRow(msgspec.Struct, frozen=True, array_like=True):
    """How a group stands (job_group_get)."""

    sealed: bool
    fired: bool
    then_job: JobId | None


class ConcurrencyKey(msgspec.Struct, frozen=True):
    """A concurrency key: its limit and running jobs, its waiting (available) jobs, and its
    rate: at most `rate_count` starts per window of `rate_seconds`, `rate_used` of them in the
    current window; its `weight`: the turns in a row it takes among keys; and whether its jobs
    start one at a time in enqueue order (`ordered`)."""

    key: str
    max_running: int | None
    running: int
    waiting: int
    rate_count: int | None = None
    rate_seconds: float | None = None
    rate_used: int = 0
    weight: int = 1
    ordered: bool = False


class CronRow(msgspec.Struct, frozen=True):
    name: str
    expression: str
    tz: str
    next_run_at: datetime
    last_run_at: datetime | None
    last_job_id: int | None
    last_outcome: str | None


def job_from_row(record: asyncpg.Record) -> Job:
    """A Job from a full row of the jobs table (its json columns come as text).

    Args or a result nested too deep for the decoder (stored before every enqueue path refused
    them) are left out and named in `unreadable`, so that reading such a job never fails.
    """
    row: dict[str, Any] = dict(record)
    unreadable = []
    for column, empty in (("args", {}), ("result", None)):
        text = row[column]
        if text is None:
            continue
        try:
            row[column] = msgspec.json.decode(text)
        except RecursionError:
            row[column] = empty
            unreadable.append(
                f"its {column} ({len(text):,} characters of JSON) are nested too deep to decode"
            )
    row["errors"] = msgspec.json.decode(row["errors"])
    if unreadable:
        row["unreadable"] = "; ".join(unreadable)
    return msgspec.convert(row, Job)
