"""`GroupOperations`: reading, closing, cancelling and retrying job groups, and the limits of
concurrency keys (their public descriptions are on `Queue`, the core's app)."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from . import checks, groups
from . import enqueue as _enqueue
from . import options as _options
from .database import Database
from .enqueue import JobSpec
from .errors import InvalidJobOptionError
from .jobs import GroupClosure, GroupCounts, GroupProgress, Job, JobState
from .layers import Layer
from .queries import Conn
from .registry import Registry
from .rows import ConcurrencyKey

_GROUP_BATCH = 1_000


class GroupOperations:
    """The group and concurrency-key operations of one app, on its database."""

    def __init__(self, db: Database, registry: Registry) -> None:
        self.db = db
        self.registry = registry

    async def counts(self, group: str, conn: Conn | None) -> GroupCounts:
        group = checks.text(group, "group")
        return await self.db.query(conn, self.db.queries.job_group_counts, group)

    async def outstanding(self, names: Sequence[str], conn: Conn | None) -> dict[str, int]:
        checked = [checks.text(g, "group") for g in names]
        return await self.db.query(conn, self.db.queries.job_group_outstanding, checked)

    async def progress(self, names: Sequence[str], conn: Conn | None) -> dict[str, GroupProgress]:
        checked = [checks.text(g, "group") for g in names]
        return await self.db.query(conn, self.db.queries.job_group_progress, checked)

    async def jobs(
        self, group: str, state: JobState | str, limit: int, before: int | None, conn: Conn | None
    ) -> list[Job]:
        group = checks.text(group, "group")
        state = checks.job_state(state)
        limit = checks.int_in(limit, "limit", range(1, 100_001))
        before = None if before is None else checks.job_id(before)
        q = self.db.queries
        return await self.db.query(conn, q.job_group_list, group, state, limit, before)

    async def cancel(
        self, group: str, include_running: bool, reason: str, conn: Conn | None
    ) -> int:
        group, reason = checks.text(group, "group"), checks.reason(reason)
        async with self.db.own_connection(conn) as c:
            cancelled, sealed = await self.db.queries.job_cancel(
                c, None, group, running=include_running, reason=reason
            )
            await groups.fire_now(self.db.queries, c, sealed)
        return cancelled

    async def close(
        self, group: str, then: JobSpec | None, conn: Conn | None, on_behalf_of: Layer | None
    ) -> GroupClosure:
        group = checks.text(group, "group")
        reserved = self.registry.reserved_from(on_behalf_of)
        _options.check_reserved("group", group, reserved)
        spec = then_group = None
        if then is not None:
            if not isinstance(then, JobSpec):
                raise InvalidJobOptionError(
                    f"then must be a sweepq.JobSpec(task, args, ...), got {type(then).__name__}"
                )
            registry = self.registry
            rows = _enqueue.build_rows(
                [then], registry.get_task, registry.trace_context_source, reserved
            )
            if rows.get("group", 0) == group:
                raise InvalidJobOptionError(
                    f"then is in group {checks.show(group)}, the group it follows: a closed group "
                    "takes no job, so it could never be enqueued; leave its group out, or use "
                    "another"
                )
            spec, then_group = _enqueue.encode_spec(rows, 0), rows.get("group", 0)
        async with self.db.own_connection(conn) as c:
            return await groups.close(self.db.queries, c, group, spec, then_group)

    async def reopen(self, group: str, conn: Conn | None, on_behalf_of: Layer | None) -> bool:
        group = checks.text(group, "group")
        _options.check_reserved("group", group, self.registry.reserved_from(on_behalf_of))
        return await self.db.query(conn, self.db.queries.job_group_reopen, group)

    async def fire_closed(self, limit: int, conn: Conn | None) -> int:
        limit = checks.int_in(limit, "limit", range(1, 100_001))
        async with self.db.own_connection(conn) as c:
            return await groups.fire_waiting(self.db.queries, c, limit)

    async def retry_failures(self, group: str, include_cancelled: bool, conn: Conn | None) -> int:
        group = checks.text(group, "group")
        states = ["failed", "cancelled"] if include_cancelled else ["failed"]
        retried = 0
        async with self.db.own_connection(conn) as c:
            while n := await self.db.queries.job_group_retry_failed(c, group, _GROUP_BATCH, states):
                retried += n
                if n < _GROUP_BATCH:
                    break
        return retried

    # concurrency keys ---------------------------------------------------------------------

    async def set_limit(
        self,
        key: str,
        limit: int | None,
        weight: int | None,
        ordered: bool | None,
        conn: Conn | None,
    ) -> None:
        key, limit = checks.concurrency_limit(key, limit)
        weight = checks.key_weight(weight)
        ordered = checks.key_ordered(ordered, limit)
        try:
            await self.db.query(
                conn, self.db.queries.concurrency_key_set_limit, key, limit, weight, ordered
            )
        except asyncpg.CheckViolationError as exc:
            if exc.constraint_name != "concurrency_keys_ordered":
                raise
            raise InvalidJobOptionError(
                f"key {key!r} is ordered: its limit stays 1 (its jobs start one at a time); "
                "pass ordered=False to lift the order first"
            ) from None

    async def set_rate(self, key: str, count: int | None, per: object, conn: Conn | None) -> None:
        key, count, seconds = checks.rate_limit(key, count, per)
        await self.db.query(conn, self.db.queries.concurrency_key_set_rate, key, count, seconds)

    async def limits(self, conn: Conn | None) -> list[ConcurrencyKey]:
        return await self.db.query(conn, self.db.queries.concurrency_key_list)
