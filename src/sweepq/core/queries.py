"""One typed async wrapper per SQL statement of the core's queue (`core/sql/*.sql`).

This module runs the queue's statements (migrate.py runs the schema's own, admin.py the
read-only figures for operators). Every wrapper takes the connection (or
pool) to run on first, so callers decide the transaction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias

import asyncpg
import msgspec
from asyncpg.pool import PoolConnectionProxy

from .jobs import GroupCounts, GroupProgress, Job, JobId, JobWait
from .options import SINGLE, fragments
from .sqlfiles import load_statements

if TYPE_CHECKING:
    from .decision import Decision

Conn: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"
Executor: TypeAlias = "Conn | asyncpg.Pool[asyncpg.Record]"


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
    """What one claim returned: the jobs, and whether it woke concurrency keys (whose jobs the
    next claim can take)."""

    jobs: list[Claimed]
    woke: bool


class Outcomes(msgspec.Struct):
    """Parallel columns of execution outcomes (decisions) to record in one statement."""

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

    def sorted(self) -> Outcomes:
        """The same outcomes in job id order (the order the statements lock rows in)."""
        if all(a <= b for a, b in zip(self.id, self.id[1:], strict=False)):
            return self
        order = sorted(range(len(self.id)), key=self.id.__getitem__)
        return Outcomes(
            **{f: [getattr(self, f)[i] for i in order] for f in Outcomes.__struct_fields__}
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
    key: str
    max_running: int | None
    running: int
    waiting: int


class Queries:
    """The core's statements, bound to one schema."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.sql: Mapping[str, str] = load_statements(
            "sweepq.core.sql",
            schema,
            fragments(),
        )
        self.channel = notify_channel(schema)
        self.finished_channel = finished_channel(schema)
        self.runtime = RuntimeQueries(self.sql)

    # jobs ---------------------------------------------------------------------------------

    async def job_insert(
        self, conn: Executor, ids: Sequence[int | None], columns: Sequence[Sequence[Any]]
    ) -> list[tuple[JobId, bool]]:
        """Insert jobs from columns: task, args, then the sent options in declaration order;
        each with its reserved id, or a new one where `ids` holds None."""
        records = await conn.fetch(self.sql["job_insert"], self.channel, ids, *columns)
        return [(JobId(r[0]), r[1]) for r in records]

    async def job_insert_one(self, conn: Executor, job: Mapping[str, Any]) -> JobId:
        """Insert one job without keys, from its values by option name (and task, args)."""
        job_id = await conn.fetchval(
            self.sql["job_insert_one"], self.channel, job["task"], job["args"],
            *[job[o.name] for o in SINGLE],
        )  # fmt: skip
        return JobId(job_id)

    async def job_reserve(
        self, conn: Executor, count: int, due_queues: Sequence[str]
    ) -> tuple[list[int], datetime]:
        """`count` new job ids and the transaction's now(); notifies `due_queues` at commit."""
        record = await conn.fetchrow(self.sql["job_reserve"], self.channel, count, due_queues)
        assert record is not None
        return list(record["ids"]), record["now"]

    async def job_copy(
        self, conn: Conn, columns: Sequence[str], records: Sequence[tuple[Any, ...]]
    ) -> None:
        """COPY complete job rows (ids and times included) into the jobs table."""
        await conn.copy_records_to_table(
            "jobs", schema_name=self.schema, columns=list(columns), records=records
        )

    async def job_find_duplicates(
        self,
        conn: Executor,
        scopes: Sequence[str],
        keys: Sequence[str | None],
        identities: Sequence[str | None],
    ) -> list[tuple[JobId | None, str | None]]:
        records = await conn.fetch(self.sql["job_find_duplicates"], scopes, keys, identities)
        return [(None if r[1] is None else JobId(r[1]), r[2]) for r in records]

    async def job_identity_lock(self, conn: Conn, identities: Sequence[str]) -> None:
        await conn.execute(self.sql["job_identity_lock"], identities)

    async def identity_lock_prune(self, conn: Executor, limit: int) -> int:
        return _rowcount(await conn.execute(self.sql["identity_lock_prune"], limit))

    async def job_identity_recent(
        self, conn: Conn, identities: Sequence[str], windows: Sequence[float]
    ) -> dict[int, tuple[JobId, str]]:
        """{1-based position in `identities`: (job id, state)} of recent jobs per identity."""
        records = await conn.fetch(self.sql["job_identity_recent"], identities, windows)
        return {r[0]: (JobId(r[1]), r[2]) for r in records}

    async def job_get(self, conn: Executor, job_id: int) -> Job | None:
        record = await conn.fetchrow(self.sql["job_get"], job_id)
        return None if record is None else _job(record)

    async def job_make_due(self, conn: Executor, queues: Sequence[str] | None) -> int:
        return int(await conn.fetchval(self.sql["job_make_due"], queues))

    async def job_queues_waiting(self, conn: Executor) -> list[str]:
        return [r[0] for r in await conn.fetch(self.sql["job_queues_waiting"])]

    async def job_list_enqueued(
        self, conn: Executor, task: str, args_contain: str, limit: int
    ) -> list[Job]:
        records = await conn.fetch(self.sql["job_list_enqueued"], task, args_contain, limit)
        return [_job(r) for r in records]

    async def job_claim(
        self,
        conn: Executor,
        queues: Sequence[str],
        limit: int,
        worker_id: str,
        lease: float,
        suspect_ok: bool = True,
    ) -> ClaimBatch:
        records = await conn.fetch(
            self.sql["job_claim"], queues, limit, worker_id, lease, suspect_ok
        )
        jobs = [Claimed(*r) for r in records if r[0] is not None]
        return ClaimBatch(jobs, woke=len(jobs) < len(records))

    async def job_finish_many(self, conn: Executor, worker_id: str, out: Outcomes) -> Recorded:
        """Record outcomes; returns the claims recorded (the others were no longer held) and
        the closed groups that wait for their end among those of the jobs ended."""
        out = out.sorted()
        records = await conn.fetch(
            self.sql["job_finish_many"], worker_id, out.id, out.claims, out.state, out.delay,
            out.refund, out.snoozed, out.failure_reason, out.error_kind, out.error, out.result,
        )  # fmt: skip
        sealed = sorted({r[2] for r in records if r[2] is not None})
        return Recorded({(r[0], r[1]) for r in records}, sealed)

    async def job_heartbeat(
        self, conn: Executor, worker_id: str, lease: float, tokens: Sequence[ClaimToken]
    ) -> set[ClaimToken]:
        """Renew the leases of `tokens`; returns those still held."""
        ids, claims = [t[0] for t in tokens], [t[1] for t in tokens]
        records = await conn.fetch(self.sql["job_heartbeat"], worker_id, lease, ids, claims)
        return {(r[0], r[1]) for r in records}

    async def job_rescue(self, conn: Executor, limit: int, grace: float) -> list[Rescued]:
        return [Rescued(*r) for r in await conn.fetch(self.sql["job_rescue"], limit, grace)]

    async def job_expire_deadlines(self, conn: Executor, limit: int) -> int:
        return len(await conn.fetch(self.sql["job_expire_deadlines"], limit))

    async def job_cancel(
        self,
        conn: Executor,
        job_id: int | None,
        group: str | None,
        *,
        running: bool,
        reason: str,
    ) -> tuple[int, list[str]]:
        """Cancel; how many jobs, and the closed groups waiting for their end among theirs."""
        record = await conn.fetchrow(self.sql["job_cancel"], job_id, group, running, reason)
        assert record is not None
        return int(record[0]), list(record[1])

    async def job_retry(self, conn: Executor, job_id: int) -> bool:
        return await conn.fetchval(self.sql["job_retry"], job_id) is not None

    async def job_prune(self, conn: Executor, older_than: float, limit: int) -> int:
        status = await conn.execute(self.sql["job_prune"], older_than, limit)
        return _rowcount(status)

    # waiters ------------------------------------------------------------------------------

    async def job_waiter_add(self, conn: Conn, job_id: int) -> int:
        return int(await conn.fetchval(self.sql["job_waiter_add"], job_id))

    async def job_waiter_renew(self, conn: Conn, waiter_id: int) -> None:
        await conn.execute(self.sql["job_waiter_renew"], waiter_id)

    async def job_waiter_remove(self, conn: Conn, waiter_id: int) -> None:
        await conn.execute(self.sql["job_waiter_remove"], waiter_id)

    async def job_waiter_prune(self, conn: Executor, older_than: float, limit: int) -> int:
        return _rowcount(await conn.execute(self.sql["job_waiter_prune"], older_than, limit))

    async def job_waits(self, conn: Executor, ids: Sequence[int]) -> dict[int, JobWait]:
        records = await conn.fetch(self.sql["job_waits"], ids)
        return {r["id"]: msgspec.convert(dict(r), JobWait) for r in records}

    async def job_get_settled(self, conn: Conn, job_id: int) -> Job | None:
        """The job once no statement that makes jobs terminal is in flight."""
        record = await conn.fetchrow(self.sql["job_get_settled"], job_id)
        return None if record is None else _job(record)

    # groups -------------------------------------------------------------------------------

    async def job_group_counts(self, conn: Executor, group: str) -> GroupCounts:
        records = await conn.fetch(self.sql["job_group_counts"], group)
        return msgspec.convert({r[0]: r[1] for r in records}, GroupCounts)

    async def job_group_outstanding(self, conn: Executor, groups: Sequence[str]) -> dict[str, int]:
        records = await conn.fetch(self.sql["job_group_outstanding"], groups)
        return {r[0]: r[1] for r in records}

    async def job_group_list(
        self, conn: Executor, group: str, state: str, limit: int, before: int | None
    ) -> list[Job]:
        records = await conn.fetch(self.sql["job_group_list"], group, state, limit, before)
        return [_job(r) for r in records]

    async def job_group_progress(
        self, conn: Executor, groups: Sequence[str]
    ) -> dict[str, GroupProgress]:
        records = await conn.fetch(self.sql["job_group_progress"], groups)
        return {r[0]: GroupProgress(*r[1:]) for r in records}

    async def job_group_retry_failed(
        self, conn: Executor, group: str, limit: int, states: Sequence[str]
    ) -> int:
        return int(await conn.fetchval(self.sql["job_group_retry_failed"], group, limit, states))

    # closing groups -----------------------------------------------------------------------

    async def job_group_seal(self, conn: Conn, group: str, then_spec: str | None) -> bool:
        """Seal the group (making its row); whether this call sealed it (not sealed before)."""
        return await conn.fetchval(self.sql["job_group_seal"], group, then_spec) is not None

    async def job_group_get(self, conn: Executor, group: str) -> GroupRow | None:
        record = await conn.fetchrow(self.sql["job_group_get"], group)
        return None if record is None else GroupRow(*record)

    async def job_group_reopen(self, conn: Executor, group: str) -> bool:
        return await conn.fetchval(self.sql["job_group_reopen"], group) is not None

    async def job_group_lock_sealed(self, conn: Conn, groups: Sequence[str]) -> list[LockedGroup]:
        records = await conn.fetch(self.sql["job_group_lock_sealed"], groups)
        return [LockedGroup(*r) for r in records]

    async def job_group_lock_sealed_free(
        self, conn: Conn, groups: Sequence[str]
    ) -> list[LockedGroup]:
        records = await conn.fetch(self.sql["job_group_lock_sealed_free"], groups)
        return [LockedGroup(*r) for r in records]

    async def job_group_sealed_page(self, conn: Conn, after: str | None, limit: int) -> list[str]:
        return [r[0] for r in await conn.fetch(self.sql["job_group_sealed_page"], after, limit)]

    async def job_group_ended(self, conn: Conn, groups: Sequence[str]) -> set[str]:
        return {r[0] for r in await conn.fetch(self.sql["job_group_ended"], groups)}

    async def job_group_fired(
        self, conn: Conn, groups: Sequence[str], then_jobs: Sequence[int | None]
    ) -> None:
        await conn.execute(self.sql["job_group_fired"], groups, then_jobs)

    async def job_group_prune(
        self, conn: Executor, older_than: float, after: str | None, limit: int
    ) -> tuple[str | None, int]:
        """Prune among the `limit` groups after `after`; (the last name read or None, deleted)."""
        record = await conn.fetchrow(self.sql["job_group_prune"], older_than, after, limit)
        assert record is not None
        return record[0], int(record[1])

    # concurrency keys ---------------------------------------------------------------------

    async def concurrency_key_set_limit(self, conn: Executor, key: str, limit: int | None) -> None:
        await conn.execute(self.sql["concurrency_key_set_limit"], key, limit)

    async def concurrency_key_list(self, conn: Executor) -> list[ConcurrencyKey]:
        records = await conn.fetch(self.sql["concurrency_key_list"])
        return [ConcurrencyKey(*r) for r in records]

    async def concurrency_key_prune(self, conn: Executor, older_than: float, limit: int) -> int:
        return _rowcount(await conn.execute(self.sql["concurrency_key_prune"], older_than, limit))

    async def concurrency_wakeup_apply(self, conn: Executor, limit: int) -> int:
        return int(await conn.fetchval(self.sql["concurrency_wakeup_apply"], limit))


def _job(record: asyncpg.Record) -> Job:
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


def notify_channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema (channel names are limited to 63 bytes)."""
    channel = f"sweepq_{schema}"
    if len(channel.encode()) <= 63:
        return channel
    return f"sweepq_{hashlib.sha256(schema.encode()).hexdigest()[:32]}"


def finished_channel(schema: str) -> str:
    """The channel on which a schema's waiters hear of jobs that finished (`App.wait_for`);
    `job_waiters_notify` (core migration 0009) names it the same way."""
    channel = f"sweepq_done_{schema}"
    if len(channel.encode()) <= 63:
        return channel
    return f"sweepq_done_{hashlib.sha256(schema.encode()).hexdigest()[:32]}"


def _rowcount(status: str) -> int:
    """The row count of a command tag such as 'DELETE 12'."""
    return int(status.rsplit(" ", 1)[-1])


class CronRow(msgspec.Struct, frozen=True):
    name: str
    expression: str
    tz: str
    next_run_at: datetime
    last_run_at: datetime | None
    last_job_id: int | None
    last_outcome: str | None


class RuntimeQueries:
    """The runtime's statements (leaders, cron schedules, rate limits), bound to one schema."""

    def __init__(self, sql: Mapping[str, str]) -> None:
        self.sql = sql

    async def leader_elect(self, conn: Executor, role: str, worker_id: str, ttl: float) -> bool:
        holder = await conn.fetchval(self.sql["leader_elect"], role, worker_id, ttl)
        return bool(holder == worker_id)

    async def leader_resign(self, conn: Executor, role: str, worker_id: str) -> None:
        await conn.execute(self.sql["leader_resign"], role, worker_id)

    async def clock_now(self, conn: Executor) -> datetime:
        now: datetime = await conn.fetchval(self.sql["clock_now"])
        return now

    async def cron_upsert(
        self, conn: Executor, name: str, expression: str, tz: str, next_run_at: datetime
    ) -> None:
        await conn.execute(self.sql["cron_upsert"], name, expression, tz, next_run_at)

    async def cron_lock_due(
        self, conn: Conn, name: str, now: datetime | None = None
    ) -> tuple[datetime, datetime] | None:
        record = await conn.fetchrow(self.sql["cron_lock_due"], name, now)
        return None if record is None else (record[0], record[1])

    async def cron_advance(
        self,
        conn: Conn,
        name: str,
        tick: datetime,
        job_id: int | None,
        outcome: str,
        next_run_at: datetime,
    ) -> None:
        await conn.execute(self.sql["cron_advance"], name, tick, job_id, outcome, next_run_at)

    async def cron_list(self, conn: Executor) -> list[CronRow]:
        return [CronRow(*r) for r in await conn.fetch(self.sql["cron_list"])]

    async def cron_count_waiting(self, conn: Conn, concurrency_key: str) -> int:
        return int(await conn.fetchval(self.sql["cron_count_waiting"], concurrency_key))

    async def cron_prune(self, conn: Executor, older_than: float) -> int:
        return _rowcount(await conn.execute(self.sql["cron_prune"], older_than))

    async def rate_limit_reserve(
        self, conn: Executor, key: str, interval: float, burst: int
    ) -> float:
        return float(await conn.fetchval(self.sql["rate_limit_reserve"], key, interval, burst))

    async def rate_limit_prune(
        self, conn: Executor, older_than: float, after: str | None, limit: int
    ) -> tuple[str | None, int]:
        """Prune among the `limit` keys after `after`; (the last key read or None, deleted)."""
        record = await conn.fetchrow(self.sql["rate_limit_prune"], older_than, after, limit)
        assert record is not None
        return record[0], int(record[1])
