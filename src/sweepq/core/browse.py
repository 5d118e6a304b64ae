"""Browsing jobs a page at a time, by any filter, and acting on the jobs a filter matches.

One typed wrapper per statement of `core/sql/browse.sql`, and the bounded batch actions the
web dashboard runs (`retry_matching`, `cancel_matching`). Every read walks an index from a
keyset cursor and stops after a bounded number of entries: a page costs the same on a table of
millions of jobs as on an empty one.

Which index a listing walks depends on its filter: available and running jobs are read from
their partial indexes, and a group's (a sweep run's) failed or cancelled jobs from the group's
index: all of them can be reached, however old. Any other listing walks the primary key from
its cursor, newest first, through at most `scan` jobs, and says how far it got, so that the
next page goes on from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import msgspec

from .admin import JobRow
from .app import App
from .jobs import JobId, JobState
from .queries import Executor, Queries

PAGE_SCAN = 50_000
"""Jobs a page of a listing walks at most (below its cursor, newest first)."""

BATCH_SCAN = 100_000
"""Jobs a batch action walks at most to find the jobs its filter matches."""

BATCH_LIMIT = 1_000
"""Jobs one batch action changes at most; the rest wait for the next batch."""

RETRYABLE = (JobState.FAILED, JobState.CANCELLED)
CANCELLABLE = (JobState.AVAILABLE, JobState.RUNNING)


class JobFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which jobs a listing or a batch action covers; None matches any."""

    state: JobState | None = None
    queue: str | None = None
    task: str | None = None
    concurrency_key: str | None = None
    group: str | None = None
    since: datetime | None = None  # created at or after
    until: datetime | None = None  # created before


# One line of a listing: the job without its arguments, and its last error only; the same line
# `sweepq jobs list` shows.
BrowseRow = JobRow


class JobPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of a listing, and where the next one starts.

    Attributes:
        rows: the jobs, newest first.
        next_before: the cursor of the next page (ids below it), or None at the end.
        scanned: jobs walked past to fill the page when it was cut short by the walk's bound
            (None when the page was read from a partial index or filled before the bound).
    """

    rows: list[BrowseRow]
    next_before: int | None
    scanned: int | None = None


class MinuteCounts(msgspec.Struct, frozen=True):
    minute: datetime
    completed: int
    failed: int


class FinishedSeries(msgspec.Struct, frozen=True, kw_only=True):
    """Completed and failed jobs per minute of the last hour (minutes without any left out).

    `cut` is set when only part of the hour was read (the newest `limit` finished jobs): the
    minutes before it are unknown, not empty.
    """

    minutes: list[MinuteCounts]
    cut: datetime | None


class KeyRow(msgspec.Struct, frozen=True):
    """A concurrency key: its limit, its running counter, and its available jobs (due now,
    scheduled later), each counted up to a cap."""

    key: str
    max_running: int | None
    running: int
    due: int
    scheduled: int


def _filters(f: JobFilter) -> tuple[object, ...]:
    return (f.queue, f.task, f.concurrency_key, f.group, f.since, f.until)


async def job_browse(
    queries: Queries,
    conn: Executor,
    job_filter: JobFilter,
    *,
    before: int | None = None,
    limit: int = 50,
    scan: int = PAGE_SCAN,
    states: Sequence[JobState] | None = None,
) -> JobPage:
    """A page of up to `limit` jobs below id `before` that match, newest first.

    `states` narrows the filter's state to any of these (a batch action's). Available or
    running jobs alone are read from their partial index, a group's failed or cancelled jobs
    from the group's index; any other listing walks at most `scan` jobs below `before`.
    """
    wanted = _states(job_filter.state, states)
    if wanted is not None and len(wanted) == 0:
        return JobPage(rows=[], next_before=None)
    if wanted is not None and set(wanted) <= set(CANCELLABLE):
        rows = []
        for state in wanted:  # each from its partial index; merged newest first
            name = f"job_browse_{state}"
            records = await conn.fetch(queries.sql[name], before, *_filters(job_filter), limit)
            rows += [msgspec.convert(dict(r), BrowseRow) for r in records]
        rows = sorted(rows, key=lambda row: row.id, reverse=True)[:limit]
        return JobPage(rows=rows, next_before=rows[-1].id if len(rows) == limit else None)
    if job_filter.group is not None and wanted is not None and set(wanted) <= set(RETRYABLE):
        records = await conn.fetch(
            queries.sql["job_browse_group"],
            job_filter.group,
            [str(s) for s in wanted],
            before,
            job_filter.queue,
            job_filter.task,
            job_filter.concurrency_key,
            job_filter.since,
            job_filter.until,
            limit,
        )
        rows = [msgspec.convert(dict(r), BrowseRow) for r in records]
        return JobPage(rows=rows, next_before=rows[-1].id if len(rows) == limit else None)
    records = await conn.fetch(
        queries.sql["job_browse"],
        before,
        scan,
        None if wanted is None else [str(s) for s in wanted],
        *_filters(job_filter),
        limit,
    )
    rows = [msgspec.convert(dict(r), BrowseRow) for r in records]
    if len(rows) == limit:
        return JobPage(rows=rows, next_before=rows[-1].id)
    reach = await conn.fetchrow(queries.sql["job_browse_reach"], before, scan)
    assert reach is not None  # an aggregate always returns its one row
    scanned, lowest = reach
    # A walk that stopped at its bound has more below it; one that ran out reached the end.
    return JobPage(rows=rows, next_before=lowest if scanned == scan else None, scanned=scanned)


def _states(state: JobState | None, states: Sequence[JobState] | None) -> list[JobState] | None:
    if states is None:
        return None if state is None else [state]
    return [s for s in states if state is None or s == state]


async def job_finished_per_minute(
    queries: Queries, conn: Executor, *, limit: int = 20_000
) -> FinishedSeries:
    """Completed and failed jobs per minute over the last hour, from at most `limit` of the
    newest finished jobs."""
    records = await conn.fetch(queries.sql["job_finished_per_minute"], limit)
    cut = None
    if records and records[0]["read"] >= limit:
        oldest, first = records[0]["oldest"], records[0]["first_in_hour"]
        cut = oldest if first is None or first < oldest else None
    return FinishedSeries(
        minutes=[MinuteCounts(r["minute"], r["completed"], r["failed"]) for r in records],
        cut=cut,
    )


async def job_list_by_scope(
    queries: Queries, conn: Executor, scope: str, *, limit: int = 10
) -> list[BrowseRow]:
    """The `limit` newest jobs of an idempotency scope, newest first."""
    records = await conn.fetch(queries.sql["job_list_by_scope"], scope, limit)
    return [msgspec.convert(dict(r), BrowseRow) for r in records]


async def concurrency_key_page(
    queries: Queries, conn: Executor, *, after: str | None, limit: int = 50, cap: int = 10_000
) -> list[KeyRow]:
    """Up to `limit` concurrency keys after `after`, by name, their jobs counted up to `cap`."""
    records = await conn.fetch(queries.sql["concurrency_key_page"], after, limit, cap)
    return [KeyRow(*r) for r in records]


# batch actions ------------------------------------------------------------------------------


async def matching(
    app: App,
    job_filter: JobFilter,
    states: Sequence[JobState],
    *,
    limit: int = BATCH_LIMIT,
    scan: int = BATCH_SCAN,
) -> list[JobId]:
    """The ids of up to `limit` jobs in `states` that the filter matches, newest first (among
    the `scan` newest jobs, unless they are available or running)."""
    async with app.connection() as conn:
        page = await job_browse(
            app.queries, conn, job_filter, limit=limit, scan=scan, states=states
        )
    return [row.id for row in page.rows]


async def retry_matching(
    app: App, job_filter: JobFilter, *, limit: int = BATCH_LIMIT, scan: int = BATCH_SCAN
) -> list[JobId]:
    """Retry the failed and cancelled jobs the filter matches, up to `limit` of them.

    Each job is retried by `app.retry` (the layers take part, as for one job): a job that
    changed meanwhile is left as it is. Returns the ids of the jobs that were retried.
    """
    retried: list[JobId] = []
    for job_id in await matching(app, job_filter, RETRYABLE, limit=limit, scan=scan):
        job = await app.retry(job_id)
        if job is not None and not job.state.terminal:
            retried.append(job_id)
    return retried


async def cancel_matching(
    app: App,
    job_filter: JobFilter,
    *,
    reason: str = "cancelled",
    limit: int = BATCH_LIMIT,
    scan: int = BATCH_SCAN,
) -> list[JobId]:
    """Cancel the available and running jobs the filter matches, up to `limit` of them.

    Each job is cancelled by `app.cancel` (a running job's worker is fenced out); one that
    ended meanwhile is left as it is. Returns the ids of the jobs that were cancelled.
    """
    cancelled: list[JobId] = []
    for job_id in await matching(app, job_filter, CANCELLABLE, limit=limit, scan=scan):
        job = await app.cancel(job_id, reason=reason)
        if job is not None and job.state == JobState.CANCELLED:
            cancelled.append(job_id)
    return cancelled
