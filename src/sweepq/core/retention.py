"""Retention: every table the core writes is pruned by age, in bounded batches."""

from __future__ import annotations

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
    while True:
        n = await queries.job_prune(conn, older_than, batch)
        removed["jobs"] += n
        if n < batch:
            break
    # Wake-ups are consumed by claims; fold in any left (no worker claiming), then prune keys.
    while True:
        n = await queries.concurrency_wakeup_apply(conn, batch)
        removed["concurrency_wakeups"] += n
        if n < batch:
            break
    while True:
        n = await queries.concurrency_key_prune(conn, older_than, batch)
        removed["concurrency_keys"] += n
        if n < batch:
            break
    # Registered schedules are touched by the leader at least hourly; only forgotten ones go.
    removed["cron_schedules"] = await queries.runtime.cron_prune(
        conn, max(older_than, CRON_MIN_AGE_SECONDS)
    )
    # A live waiter renews its row far more often than this: only those of dead waiters go.
    while True:
        n = await queries.job_waiter_prune(conn, max(older_than, WAITER_MIN_AGE_SECONDS), batch)
        removed["job_waiters"] += n
        if n < batch:
            break
    # An identity no job carries any more needs no lock row (the next enqueue makes it again).
    while True:
        n = await queries.identity_lock_prune(conn, batch)
        removed["identity_locks"] += n
        if n < batch:
            break
    # A group no job belongs to any more needs no row (the next enqueue makes it again), unless it
    # is closed and waits to fire; a closed group whose row goes takes jobs again.
    name: str | None = None
    while True:
        name, n = await queries.job_group_prune(conn, older_than, name, batch)
        removed["job_groups"] += n
        if name is None:
            break
    # A rate-limit row older than its own spacing holds no state an absent row would not.
    after: str | None = None
    while True:
        after, n = await queries.runtime.rate_limit_prune(conn, older_than, after, batch)
        removed["rate_limits"] += n
        if after is None:
            break
    return removed
