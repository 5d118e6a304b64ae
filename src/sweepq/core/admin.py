"""Operators' reads: listing jobs and migrations, and the live figures of `sweepq top` (and of
the dashboard).

One typed wrapper per statement of `core/sql/admin.sql` but the doctor's (`core/doctor.py`);
none of them writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg
import msgspec

from .jobs import JobId, JobState
from .queries import Executor, Queries
from .units import format_duration


class AppliedMigration(msgspec.Struct, frozen=True):
    component: str
    version: int
    name: str
    applied_at: datetime

    @property
    def label(self) -> str:
        return f"{self.component}/{self.version:04d}_{self.name}"


class JobRow(msgspec.Struct, frozen=True):
    """One line of a job listing: the job without its arguments, and only its last error
    (`get_job` has them all)."""

    id: JobId
    task: str
    queue: str
    priority: int
    state: JobState
    attempt: int
    max_attempts: int
    snoozes: int
    run_at: datetime
    created_at: datetime
    finished_at: datetime | None
    failure_reason: str | None
    concurrency_key: str | None
    job_group: str | None
    last_error: str | None


class KeyLoad(msgspec.Struct, frozen=True, kw_only=True):
    """A concurrency key: its limit, what runs under it, what waits for it, and the ratio."""

    key: str
    max_running: int | None
    running: int  # the counter the claim admits against
    running_jobs: int  # running jobs that carry the key (must equal `running`)
    due: int  # available and due: would run now if the key had room
    scheduled: int  # available, run_at in the future
    asking: int  # what could run now without the limit: due + running
    ratio: float | None  # asking / limit; None without a limit or with a limit of 0
    binding: bool  # the limit is what holds due jobs back
    rate_count: int | None  # starts allowed per window; None without a rate
    rate_seconds: float | None  # the window
    rate_used: int  # starts counted in the current window
    rate_binding: bool  # the rate, spent in this window, is what holds due jobs back
    oldest_due_seconds: float | None  # since the oldest due job became due; None with none due


def key_load(
    key: str,
    max_running: int | None,
    running: int,
    running_jobs: int,
    due: int,
    scheduled: int,
    rate_count: int | None = None,
    rate_seconds: float | None = None,
    rate_used: int = 0,
    oldest_due_seconds: float | None = None,
) -> KeyLoad:
    asking = due + running_jobs
    return KeyLoad(
        key=key,
        max_running=max_running,
        running=running,
        running_jobs=running_jobs,
        due=due,
        scheduled=scheduled,
        asking=asking,
        ratio=asking / max_running if max_running else None,
        binding=max_running is not None and due > 0 and running >= max_running,
        rate_count=rate_count,
        rate_seconds=rate_seconds,
        rate_used=rate_used,
        rate_binding=rate_count is not None and due > 0 and rate_used >= rate_count,
        oldest_due_seconds=oldest_due_seconds,
    )


def rate_text(k: KeyLoad) -> str:
    """A key's rate as the views show it: `3/5 per 1h` (starts this window / allowed)."""
    if k.rate_count is None or k.rate_seconds is None:
        return ""
    return f"{k.rate_used:,}/{k.rate_count:,} per {format_duration(k.rate_seconds)}"


# listings -----------------------------------------------------------------------------------


async def migration_list(queries: Queries, conn: Executor) -> list[AppliedMigration]:
    """The ledger's migrations; empty when the schema has never been migrated."""
    try:
        records = await conn.fetch(queries.sql["migration_list"])
    except (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError):
        return []
    return [AppliedMigration(*r) for r in records]


async def job_list(
    queries: Queries,
    conn: Executor,
    *,
    state: JobState | None = None,
    task: str | None = None,
    queue: str | None = None,
    group: str | None = None,
    before: int | None = None,
    limit: int = 50,
) -> list[JobRow]:
    """Up to `limit` jobs with ids below `before`, newest first."""
    records = await conn.fetch(
        queries.sql["job_list"],
        None if state is None else str(state),
        task,
        queue,
        before,
        limit,
        group,
    )
    return [msgspec.convert(dict(r), JobRow) for r in records]


# sweepq top ---------------------------------------------------------------------------------

# Finished jobs a frame of `sweepq top` counts at most, newest first (and one more, which tells
# whether there were more): a window with more finished jobs than this is counted in part and
# estimated for the rest. Reading 50,000 takes about 30 ms (measured on 1,000,000 finished jobs).
FINISHED_READ_LIMIT = 50_000
# The rest of a window is first read whole in SAMPLE_RANGES short ranges, at most
# SAMPLE_PROBE_LIMIT jobs each (5,000 in all): a range holding fewer is counted. The ranges that
# hold more are sampled: about SAMPLE_ROWS jobs, read in up to SAMPLE_BUSY_RANGES ranges spread
# evenly over them, at most SAMPLE_RANGE_LIMIT jobs per range (110,000 at the very most, where
# the jobs bunch far more than the probes showed).
SAMPLE_RANGES = 100
SAMPLE_PROBE_LIMIT = 50
SAMPLE_ROWS = 20_000
SAMPLE_BUSY_RANGES = 1_000
SAMPLE_RANGE_LIMIT = 100


class JobsEstimate(msgspec.Struct, frozen=True):
    """The database's clock at a frame, and the planner's estimate of the jobs table's rows."""

    at: datetime
    jobs: int | None  # None until the table was first analysed or vacuumed


class QueueLive(msgspec.Struct, frozen=True):
    """A queue's live jobs: due now, scheduled later, running, and how long the oldest due one
    has been due."""

    queue: str
    due: int
    scheduled: int
    running: int
    oldest_due_seconds: float | None


class QueueFinished(msgspec.Struct, frozen=True):
    """A queue's jobs finished in the windows of a frame, counted newest first: all of them, or
    (with `cut`) those finished after `cut`, where counting stopped."""

    queue: str
    failed_last_hour: int
    completed_last_minute: int
    finished_since: int  # after the `since` given; 0 without one
    read: int  # finished jobs of the queue read, those at `cut` included
    cut: datetime | None  # the same for every queue; None: every window was counted in full


class SampleCount(msgspec.Struct, frozen=True):
    """The jobs of one queue and state finished in one range of a sample (at most the range's
    limit in all), and the newest finished_at among them."""

    range: int  # the index of the range in the lists given, from 0
    queue: str
    state: JobState
    jobs: int
    newest: datetime


class WorkerConnections(msgspec.Struct, frozen=True):
    """A worker connected to the database: its connections, and the running jobs it holds."""

    worker_id: str  # cut at 49 characters, as its connections' application_name cuts it
    connections: int
    connected_seconds: float | None  # None where this role may not see its connections' start
    running: int  # running jobs of this schema that it holds


class Leader(msgspec.Struct, frozen=True):
    """The maintenance leader and its term."""

    worker_id: str
    elected_seconds: float
    term_left_seconds: float  # negative once the term has lapsed


async def top_jobs_estimate(queries: Queries, conn: Executor) -> JobsEstimate:
    record = await conn.fetchrow(queries.sql["top_jobs_estimate"], queries.schema)
    assert record is not None  # a SELECT without FROM returns its one row
    return JobsEstimate(*record)


async def top_job_live(queries: Queries, conn: Executor) -> list[QueueLive]:
    return [QueueLive(*r) for r in await conn.fetch(queries.sql["top_job_live"])]


async def top_job_finished(
    queries: Queries, conn: Executor, *, since: datetime | None, limit: int = FINISHED_READ_LIMIT
) -> list[QueueFinished]:
    """Per queue, the jobs finished in the last hour and since `since`, at most `limit` of them
    counted, newest first."""
    records = await conn.fetch(queries.sql["top_job_finished"], since, limit)
    return [QueueFinished(*r) for r in records]


async def top_job_finished_sample(
    queries: Queries,
    conn: Executor,
    ranges: Sequence[tuple[datetime, datetime]],
    *,
    limit: int = SAMPLE_RANGE_LIMIT,
) -> list[SampleCount]:
    """Per range `[start, end)`, queue and state, the jobs finished in it (at most `limit` per
    range read, oldest first)."""
    if not ranges:
        return []
    starts, ends = [a for a, _ in ranges], [b for _, b in ranges]
    records = await conn.fetch(queries.sql["top_job_finished_sample"], starts, ends, limit)
    return [SampleCount(r[0] - 1, r[1], JobState(r[2]), r[3], r[4]) for r in records]


async def top_concurrency_key_busiest(
    queries: Queries, conn: Executor, *, limit: int = 10
) -> list[KeyLoad]:
    records = await conn.fetch(queries.sql["top_concurrency_key_busiest"], limit)
    return [key_load(*r) for r in records]


async def top_worker_list(queries: Queries, conn: Executor) -> list[WorkerConnections]:
    return [WorkerConnections(*r) for r in await conn.fetch(queries.sql["top_worker_list"])]


async def top_leader(queries: Queries, conn: Executor) -> Leader | None:
    record = await conn.fetchrow(queries.sql["top_leader"])
    return None if record is None else Leader(*record)
