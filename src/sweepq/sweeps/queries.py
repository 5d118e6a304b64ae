"""One typed async wrapper per SQL statement of the sweeps layer (`sweeps/sql/*.sql`).

Only this module calls `fetch`/`execute` for the sweeps layer's own tables and the catalog.
Every wrapper takes the connection (or pool) to run on first, so callers decide the
transaction. (A TableSweep's generated keyset query is run by `table.py`, the one place that
builds it.)
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import asyncpg
import msgspec

from ..core.queries import Conn, Executor
from ..core.sqlfiles import load_statements


class RunFields(msgspec.Struct, frozen=True, kw_only=True):
    """What every read of a run row carries: the sweep, its params, and where the walk stands."""

    id: int
    sweep: str
    params: dict[str, Any]
    state: str
    draining: bool
    cursor: list[Any] | None
    links: int
    max_links: int
    enqueued: int


class RunHead(RunFields, frozen=True, kw_only=True):
    """The part of a run row that links and leaves work from, and that ends it."""

    link_job: int | None
    queue: str
    link_priority: int
    walked: bool
    stopped_as: str | None
    stop_reason: str | None
    failed_base: int
    ends: int
    on_complete: bool


class Poll(msgspec.Struct, frozen=True):
    """What a waiting link sees of its run (its leaves' counts come from the core)."""

    state: str
    link_job: int | None
    enqueued: int
    failed_base: int
    fail_from_done: int | None
    fail_from_failed: int | None


class RunRow(RunFields, frozen=True, kw_only=True):
    """A run row as lists show it (the live counts of an active run come from the core)."""

    completed: int
    failed: int
    cancelled: int
    walked: bool
    stop_reason: str | None
    ends: int
    link_job: int | None
    queue: str
    estimated_total: int | None
    total_counted: bool
    done_floor: float
    done_cap: int | None
    started_at: datetime
    finished_at: datetime | None
    updated_at: datetime
    failure: str | None
    elapsed: float
    rate_from_done: int | None
    rate_seconds: float | None


class RunStart(msgspec.Struct, frozen=True, kw_only=True):
    """What a new run row holds."""

    sweep: str
    params: str  # canonical JSON
    params_hash: str
    max_links: int
    total: int | None  # counted, or estimated
    counted: bool
    queue: str
    link_priority: int
    on_complete: bool


class Counts(msgspec.Struct, frozen=True):
    completed: int = 0
    failed: int = 0
    cancelled: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            self.completed + other.completed,
            self.failed + other.failed,
            self.cancelled + other.cancelled,
        )


class TableInfo(msgspec.Struct, frozen=True):
    oid: int
    schema: str
    name: str
    kind: str


class ColumnInfo(msgspec.Struct, frozen=True):
    name: str
    type: str
    not_null: bool


class UniqueKey(msgspec.Struct, frozen=True):
    is_primary: bool
    columns: list[str]


def _json_fields(record: asyncpg.Record, *fields: str) -> dict[str, Any]:
    row: dict[str, Any] = dict(record)
    for field in fields:
        if row[field] is not None:
            row[field] = msgspec.json.decode(row[field])
    return row


class SweepQueries:
    """The sweeps layer's statements, bound to one schema."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.sql: Mapping[str, str] = load_statements("sweepq.sweeps.sql", schema)

    # runs ---------------------------------------------------------------------------------

    async def sweep_run_insert(self, conn: Conn, start: RunStart) -> int | None:
        value = await conn.fetchval(
            self.sql["sweep_run_insert"], start.sweep, start.params, start.params_hash,
            start.max_links, start.total, start.counted, start.queue, start.link_priority,
            start.on_complete,
        )  # fmt: skip
        return None if value is None else int(value)

    async def sweep_run_find_active(self, conn: Conn, sweep: str, params_hash: str) -> int | None:
        value = await conn.fetchval(self.sql["sweep_run_find_active"], sweep, params_hash)
        return None if value is None else int(value)

    async def sweep_run_set_link(self, conn: Conn, run_id: int, job_id: int) -> None:
        await conn.execute(self.sql["sweep_run_set_link"], run_id, job_id)

    async def sweep_run_head(self, conn: Executor, run_id: int) -> RunHead | None:
        record = await conn.fetchrow(self.sql["sweep_run_head"], run_id)
        if record is None:
            return None
        return msgspec.convert(_json_fields(record, "params", "cursor"), RunHead)

    async def sweep_run_links_running(
        self, conn: Executor, limit: int
    ) -> list[tuple[int, str, int]]:
        records = await conn.fetch(self.sql["sweep_run_links_running"], limit)
        return [(r[0], r[1], r[2]) for r in records]

    async def sweep_run_lock(self, conn: Conn, run_id: int) -> RunHead | None:
        record = await conn.fetchrow(self.sql["sweep_run_lock"], run_id)
        if record is None:
            return None
        return msgspec.convert(_json_fields(record, "params", "cursor"), RunHead)

    async def sweep_run_poll(self, conn: Executor, run_id: int) -> Poll | None:
        record = await conn.fetchrow(self.sql["sweep_run_poll"], run_id)
        return None if record is None else Poll(*record)

    async def sweep_run_advance(
        self,
        conn: Conn,
        run_id: int,
        cursor: str | None,
        enqueued: int,
        *,
        draining: bool,
        link_job: int,
        done: int,
        failed: int,
        sample: int,
        completed: int,
    ) -> None:
        await conn.execute(
            self.sql["sweep_run_advance"], run_id, cursor, enqueued, draining, link_job, done,
            failed, sample, completed,
        )  # fmt: skip

    async def sweep_run_end(
        self,
        conn: Conn,
        run_id: int,
        state: str,
        failure: str | None,
        counts: Counts,
        stopped: tuple[str, str | None] | None,
    ) -> int | None:
        """End the run; returns the number of this end (None: it was not active)."""
        stopped_as, stop_reason = stopped or (None, None)
        value = await conn.fetchval(
            self.sql["sweep_run_end"], run_id, state, failure,
            counts.completed, counts.failed, counts.cancelled, stopped_as, stop_reason,
        )  # fmt: skip
        return None if value is None else int(value)

    async def sweep_run_pause(self, conn: Executor, run_id: int) -> bool:
        return await conn.fetchval(self.sql["sweep_run_pause"], run_id) is not None

    async def sweep_run_resume(self, conn: Conn, run_id: int, job_id: int) -> bool:
        return await conn.fetchval(self.sql["sweep_run_resume"], run_id, job_id) is not None

    async def sweep_run_reopen(
        self, conn: Conn, run_id: int, job_id: int, *, resume: bool, failed: int, done: int
    ) -> bool:
        value = await conn.fetchval(
            self.sql["sweep_run_reopen"], run_id, job_id, resume, failed, done
        )
        return value is not None

    async def sweep_run_list(
        self,
        conn: Executor,
        limit: int,
        active_only: bool,
        sweep: str | None,
        run_id: int | None = None,
    ) -> list[RunRow]:
        records = await conn.fetch(self.sql["sweep_run_list"], limit, active_only, sweep, run_id)
        return [msgspec.convert(_json_fields(r, "params", "cursor"), RunRow) for r in records]

    async def sweep_run_prune(
        self, conn: Executor, older_than: float, limit: int
    ) -> tuple[int, int]:
        record = await conn.fetchrow(self.sql["sweep_run_prune"], older_than, limit)
        assert record is not None
        return int(record[0]), int(record[1])

    # catalog ------------------------------------------------------------------------------

    async def sweep_table_find(self, conn: Executor, quoted_name: str) -> TableInfo | None:
        record = await conn.fetchrow(self.sql["sweep_table_find"], quoted_name)
        return None if record is None else TableInfo(*record)

    async def sweep_table_columns(self, conn: Executor, oid: int) -> list[ColumnInfo]:
        return [ColumnInfo(*r) for r in await conn.fetch(self.sql["sweep_table_columns"], oid)]

    async def sweep_table_unique_keys(self, conn: Executor, oid: int) -> list[UniqueKey]:
        records = await conn.fetch(self.sql["sweep_table_unique_keys"], oid)
        return [UniqueKey(r[0], list(r[1])) for r in records]
