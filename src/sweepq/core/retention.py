"""Retention: every table the core writes is pruned by age, in bounded batches."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from .queries import Executor, Queries
from .waiters import WAITER_MIN_AGE_SECONDS

CRON_MIN_AGE_SECONDS = 86_400.0


async def prune(queries: Queries, conn: Executor, older_than: float, batch: int) -> dict[str, int]:
    """Delete rows older than `older_than` seconds from each table, `batch` rows per statement.

    Each batch is its own statement (and, on a pool, its own transaction), so pruning a large
    backlog never holds locks on many rows at once.
    """
    removed = {
        "jobs": 0,
        "concurrency_keys": 0,
        "concurrency_wakeups": 0,
        "cron_schedules": 0,
        "rate_limits": 0,
        "job_waiters": 0,
        "identity_locks": 0,
        "job_groups": 0,
    }
    removed["jobs"] = await _batches(lambda: queries.job_prune(conn, older_than, batch), batch)
    # Wake-ups are consumed by claims; fold in any left (no worker claiming), then prune keys.
    removed["concurrency_wakeups"] = await _batches(
        lambda: queries.concurrency_wakeup_apply(conn, batch), batch
    )
    removed["concurrency_keys"] = await _batches(
        lambda: queries.concurrency_key_prune(conn, older_than, batch), batch
    )
    # Registered schedules are touched by the leader at least hourly; only forgotten ones go.
    removed["cron_schedules"] = await queries.runtime.cron_prune(
        conn, max(older_than, CRON_MIN_AGE_SECONDS)
    )
    # A live waiter renews its row far more often than this: only those of dead waiters go.
    waiter_age = max(older_than, WAITER_MIN_AGE_SECONDS)
    removed["job_waiters"] = await _batches(
        lambda: queries.job_waiter_prune(conn, waiter_age, batch), batch
    )
    # An identity no job carries any more needs no lock row (the next enqueue makes it again).
    removed["identity_locks"] = await _batches(
        lambda: queries.identity_lock_prune(conn, batch), batch
    )
    # A group no job belongs to any more needs no row (the next enqueue makes it again), unless it
    # is closed and waits to fire; a closed group whose row goes takes jobs again.
    removed["job_groups"] = await _pages(
        lambda name: queries.job_group_prune(conn, older_than, name, batch)
    )
    # A rate-limit row older than its own spacing holds no state an absent row would not.
    removed["rate_limits"] = await _pages(
        lambda after: queries.runtime.rate_limit_prune(conn, older_than, after, batch)
    )
    return removed


async def _batches(prune_one: Callable[[], Awaitable[int]], batch: int) -> int:
    """Call `prune_one` (one statement, at most `batch` rows) until it removes fewer; the rows
    removed in all."""
    removed = 0
    while True:
        n = await prune_one()
        removed += n
        if n < batch:
            return removed


async def _pages(
    prune_one: Callable[[str | None], Awaitable[tuple[str | None, int]]],
) -> int:
    """Call `prune_one` from the start (None), then from the key each call returns, until it
    returns None; the rows removed in all."""
    removed = 0
    after: str | None = None
    while True:
        after, n = await prune_one(after)
        removed += n
        if after is None:
            return removed
