"""`JobOperations`: enqueueing, reading, waiting for, cancelling and retrying jobs, and the
upkeep calls the maintenance leader makes (their public descriptions are on `Queue`, the
core's app)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import anyio
import asyncpg
import msgspec

from . import checks, groups, waiters
from . import enqueue as _enqueue
from . import options as _options
from .database import UNMIGRATED, Database, close_quietly
from .enqueue import JobSpec
from .errors import InvalidJobOptionError
from .group_operations import GroupOperations
from .jobs import Enqueued, Job, JobWait
from .layers import Layer
from .logs import log_rescued
from .options import JobOptions
from .outage import unavailable_as_error
from .queries import Conn
from .ratelimit import spacing_seconds
from .registry import Registry
from .retention import prune
from .rows import CronRow

PRUNE_BATCH = 5_000  # rows per statement of `prune`, unless its caller says otherwise


class JobOperations:
    """The job operations of one app: its registry's tasks, on its database."""

    def __init__(self, db: Database, registry: Registry, group_ops: GroupOperations) -> None:
        self.db = db
        self.registry = registry
        self.group_ops = group_ops

    # enqueue ------------------------------------------------------------------------------

    async def enqueue(
        self,
        task: Any,
        args: dict[str, Any] | msgspec.Struct | None,
        conn: Conn | None,
        on_behalf_of: Layer | None,
        options: JobOptions,
    ) -> Enqueued:
        if options:
            _options.check_names(options)
        registry = self.registry
        source = registry.trace_context_source
        row, window = _enqueue.build_row(
            registry.get_task(task),
            args,
            options,
            source() if source is not None else None,
            registry.reserved_from(on_behalf_of),
        )
        rows = _enqueue.Rows([row], [window])
        if window is None and rows.plain():
            async with self.db.own_connection(conn) as c:
                return await _enqueue.insert_one(self.db.queries, c, row)
        return (await self.insert(rows, conn))[0]

    async def enqueue_many(
        self,
        specs: Sequence[JobSpec],
        conn: Conn | None,
        on_duplicate: str,
        on_behalf_of: Layer | None,
    ) -> list[Enqueued]:
        specs = _enqueue.job_specs(specs)
        if on_duplicate not in ("report", "raise"):
            raise InvalidJobOptionError(
                f"on_duplicate must be 'report' or 'raise', got {on_duplicate!r}"
            )
        if not specs:
            return []
        registry = self.registry
        rows = _enqueue.build_rows(
            specs,
            registry.get_task,
            registry.trace_context_source,
            registry.reserved_from(on_behalf_of),
        )
        return await self.insert(rows, conn, strict=on_duplicate == "raise")

    async def insert(
        self, rows: _enqueue.Rows, conn: Conn | None, *, strict: bool = False
    ) -> list[Enqueued]:
        """Insert checked rows; in a transaction when they take several statements."""
        several = (
            strict
            or len(rows.plain()) >= _enqueue.COPY_MIN_ROWS
            or any(w is not None for w in rows.windows)
        )
        queries = self.db.queries
        async with self.db.own_connection(conn) as c:
            if several and not c.is_in_transaction():
                async with c.transaction():
                    return await _enqueue.insert(queries, c, rows, strict=strict)
            return await _enqueue.insert(queries, c, rows, strict=strict)

    # reads --------------------------------------------------------------------------------

    async def get(self, job_id: int, conn: Conn | None) -> Job | None:
        return await self.db.query(conn, self.db.queries.job_get, checks.job_id(job_id))

    async def waits(self, job_ids: Sequence[int], conn: Conn | None) -> dict[int, JobWait]:
        ids = [checks.job_id(i) for i in job_ids]
        return await self.db.query(conn, self.db.queries.job_waits, ids)

    async def wait_for(self, job_id: int, timeout: float | timedelta | None) -> Job:  # noqa: ASYNC109
        job_id = checks.job_id(job_id)
        seconds = checks.optional_seconds(timeout, "timeout", allow_zero=True)
        try:
            return await self._wait_for(job_id, seconds)
        except waiters.TimedOut as exc:
            raise TimeoutError(str(exc)) from None

    async def _wait_for(self, job_id: int, seconds: float | None) -> Job:
        where = self.db.where
        async with unavailable_as_error(where):
            conn = await asyncpg.connect(
                self.db.dsn,
                server_settings={
                    "application_name": "sweepq wait_for",
                    # The race argument of core/waiters.py reads committed rows, statement by
                    # statement, whatever the server's default.
                    "default_transaction_isolation": "read committed",
                },
            )
            try:
                return await waiters.wait(conn, self.db.queries, job_id, seconds, where=where)
            except UNMIGRATED:
                await self.db.raise_if_unmigrated_on(conn, where)
                raise
            finally:
                with anyio.CancelScope(shield=True):
                    await close_quietly(conn)

    # changes ------------------------------------------------------------------------------

    async def cancel(self, job_id: int, reason: str, conn: Conn | None) -> Job | None:
        job_id, reason = checks.job_id(job_id), checks.reason(reason)
        queries = self.db.queries
        async with self.db.own_connection(conn) as c:
            _, sealed = await queries.job_cancel(c, job_id, None, running=True, reason=reason)
            await groups.fire_now(queries, c, sealed)
        return await self.get(job_id, conn)

    async def retry(self, job_id: int, conn: Conn | None) -> Job | None:
        """The core's retry of one job; the layers' `retry` hooks wrap it (`Queue.retry`)."""
        job_id = checks.job_id(job_id)
        try:
            await self.db.query(conn, self.db.queries.job_retry, job_id)
        except asyncpg.UniqueViolationError:
            raise InvalidJobOptionError(
                f"job {job_id} cannot be retried: another active job holds its identity_key"
            ) from None
        return await self.get(job_id, conn)

    async def rate_limit(self, key: str, per_second: float, burst: int) -> float:
        spacing = spacing_seconds(key, per_second=per_second, burst=burst)
        runtime = self.db.queries.runtime
        wait = await self.db.query(None, runtime.rate_limit_reserve, key, spacing, burst)
        if wait > 0:
            await anyio.sleep(wait)
        return wait

    async def cron_schedules(self, conn: Conn | None) -> list[CronRow]:
        return await self.db.query(conn, self.db.queries.runtime.cron_list)

    # upkeep -------------------------------------------------------------------------------

    async def prune(
        self, older_than: timedelta, batch_size: int, conn: Conn | None
    ) -> dict[str, int]:
        age, batch_size = checks.retention(older_than, batch_size)
        async with self.db.own_connection(conn) as c:
            removed = await prune(self.db.queries, c, age, batch_size)
            for layer in self.registry.layers:
                removed |= await layer.prune(c, age, batch_size)
        return removed

    async def rescue_lapsed(self, limit: int, grace_seconds: float, conn: Conn | None) -> int:
        q = self.db.queries
        rescued = await self.db.query(conn, q.job_rescue, limit, grace_seconds)
        log_rescued(rescued)
        if any(r.state == "failed" for r in rescued):
            await self.group_ops.fire_closed(1_000, conn)  # a closed group may have ended
        return len(rescued)

    async def expire_deadlines(self, limit: int, conn: Conn | None) -> int:
        expired = await self.db.query(conn, self.db.queries.job_expire_deadlines, limit)
        if expired:
            await self.group_ops.fire_closed(1_000, conn)  # a closed group may have ended
        return expired
