"""One typed async wrapper per SQL statement of the core's queue (`core/sql/*.sql`).

This module runs the queue's statements (migrate.py runs the schema's own, admin.py and
doctor.py the read-only figures for operators); the rows they return are in rows.py. Every
wrapper takes the connection (or pool) to run on first, so callers decide the transaction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypeAlias

import asyncpg
import msgspec
from asyncpg.pool import PoolConnectionProxy

from .jobs import GroupCounts, GroupProgress, Job, JobId, JobWait
from .options import SINGLE, fragments
from .rows import (
    ClaimBatch,
    Claimed,
    ClaimToken,
    ConcurrencyKey,
    CronRow,
    FinishBatch,
    GroupRow,
    LockedGroup,
    Recorded,
    Rescued,
    job_from_row,
)
from .sqlfiles import load_statements

Conn: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"
Executor: TypeAlias = "Conn | asyncpg.Pool[asyncpg.Record]"


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
        return None if record is None else job_from_row(record)

    async def job_make_due(self, conn: Executor, queues: Sequence[str] | None) -> int:
        return int(await conn.fetchval(self.sql["job_make_due"], queues))

    async def job_queues_waiting(self, conn: Executor) -> list[str]:
        return [r[0] for r in await conn.fetch(self.sql["job_queues_waiting"])]

    async def job_list_enqueued(
        self, conn: Executor, task: str, args_contain: str, limit: int
    ) -> list[Job]:
        records = await conn.fetch(self.sql["job_list_enqueued"], task, args_contain, limit)
        return [job_from_row(r) for r in records]

    async def job_claim(
        self,
        conn: Executor,
        queues: Sequence[str],
        limit: int,
        worker_id: str,
        lease: float,
        suspect_ok: bool = True,
        *,
        light: bool = False,
    ) -> ClaimBatch:
        """Claim with `job_claim`, or with `job_claim_light` when `light` (which claims nothing
        and says so when a concurrency key is in play); the batch says which the next claim
        may be."""
        statement = "job_claim_light" if light else "job_claim"
        records = await conn.fetch(self.sql[statement], queues, limit, worker_id, lease, suspect_ok)
        jobs = [Claimed(*r) for r in records if r[0] is not None]
        advice = records[-1][2] if len(jobs) < len(records) else None
        return ClaimBatch(
            jobs,
            woke=advice in ("again", "full"),
            light=advice == "light" or (light and advice is None),
        )

    async def job_finish_many(self, conn: Executor, worker_id: str, out: FinishBatch) -> Recorded:
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
        return None if record is None else job_from_row(record)

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
        return [job_from_row(r) for r in records]

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
        return await _prune_page(conn, self.sql["job_group_prune"], older_than, after, limit)

    # concurrency keys ---------------------------------------------------------------------

    async def concurrency_key_set_limit(
        self,
        conn: Executor,
        key: str,
        limit: int | None,
        weight: int | None = None,
        ordered: bool | None = None,
    ) -> None:
        await conn.execute(self.sql["concurrency_key_set_limit"], key, limit, weight, ordered)

    async def concurrency_key_set_rate(
        self, conn: Executor, key: str, count: int | None, seconds: float
    ) -> None:
        await conn.execute(
            self.sql["concurrency_key_set_rate"], key, count, None if count is None else seconds
        )

    async def concurrency_key_list(self, conn: Executor) -> list[ConcurrencyKey]:
        records = await conn.fetch(self.sql["concurrency_key_list"])
        return [ConcurrencyKey(*r) for r in records]

    async def concurrency_key_prune(self, conn: Executor, older_than: float, limit: int) -> int:
        return _rowcount(await conn.execute(self.sql["concurrency_key_prune"], older_than, limit))

    async def concurrency_wakeup_apply(self, conn: Executor, limit: int) -> int:
        return int(await conn.fetchval(self.sql["concurrency_wakeup_apply"], limit))


def notify_channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema."""
    return _channel("sweepq_", schema)


def finished_channel(schema: str) -> str:
    """The channel on which a schema's waiters hear of jobs that finished (`App.wait_for`);
    `job_waiters_notify` (core migration 0009) names it the same way."""
    return _channel("sweepq_done_", schema)


def _channel(prefix: str, schema: str) -> str:
    """`prefix` and the schema's name, or a digest of it past the 63 bytes a channel name holds."""
    channel = prefix + schema
    if len(channel.encode()) <= 63:
        return channel
    return prefix + hashlib.sha256(schema.encode()).hexdigest()[:32]


async def _prune_page(
    conn: Executor, sql: str, older_than: float, after: str | None, limit: int
) -> tuple[str | None, int]:
    """Run a statement that prunes one page of names: (the last name read or None, deleted)."""
    record = await conn.fetchrow(sql, older_than, after, limit)
    assert record is not None  # a SELECT without FROM returns its one row
    return record[0], int(record[1])


def _rowcount(status: str) -> int:
    """The row count of a command tag such as 'DELETE 12'."""
    return int(status.rsplit(" ", 1)[-1])


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
        return await _prune_page(conn, self.sql["rate_limit_prune"], older_than, after, limit)
