"""What each page reads: one snapshot per page, from the core's and the sweeps' own reads.

Live jobs come from their partial indexes, finished jobs from the index over them within the
last hour and at most `FINISHED_READ_LIMIT` of them, totals from the planner's estimate: no
page counts the jobs table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime

import msgspec

from sweepq.core import admin, browse
from sweepq.core.queries import Conn
from sweepq.core.queues import QueuePause, pauses
from sweepq.sweeps.app import App
from sweepq.sweeps.naming import link_scope
from sweepq.sweeps.runs import SweepRun

OVERVIEW_RUNS = 6
OVERVIEW_KEYS = 8
RUNS_PAGE = 50
KEYS_PAGE = 50
BUSIEST_KEYS = 15
KEY_COUNT_CAP = 10_000  # a key's waiting jobs are counted up to this many
RUN_FAILURES = 20  # a run's undone items shown on its page
RUN_LINKS = 8  # a run's newest links shown on its page


class QueueRow(msgspec.Struct, frozen=True, kw_only=True):
    queue: str
    due: int
    scheduled: int
    running: int
    oldest_due_seconds: float | None
    failed_last_hour: int
    completed_last_minute: int
    at_least: bool  # the finished jobs read were capped: these two are lower bounds
    pause: QueuePause | None = None  # since when and why it is paused, if it is


class Overview(msgspec.Struct, frozen=True, kw_only=True):
    at: datetime
    jobs_estimate: int | None
    queues: list[QueueRow]
    series: browse.FinishedSeries
    keys: list[admin.KeyLoad]
    workers: list[admin.WorkerConnections]
    leader: admin.Leader | None
    runs: list[SweepRun]
    more_runs: bool


@asynccontextmanager
async def snapshot(app: App) -> AsyncIterator[Conn]:
    """A connection in a read-only repeatable-read transaction: a page's figures are of one
    moment."""
    async with (
        app.connection() as conn,
        conn.transaction(isolation="repeatable_read", readonly=True),
    ):
        yield conn


async def queue_rows(app: App, conn: Conn) -> list[QueueRow]:
    """Per queue: live jobs, and failed (last hour) and completed (last minute) jobs."""
    queries = app.queries
    live = {q.queue: q for q in await admin.top_job_live(queries, conn)}
    limit = admin.FINISHED_READ_LIMIT
    finished = await admin.top_job_finished(queries, conn, since=None, limit=limit)
    capped = bool(finished) and finished[0].cut is not None
    done = {f.queue: f for f in finished}
    rows = []
    for name in sorted(live.keys() | done.keys()):
        q = live.get(name)
        f = done.get(name)
        rows.append(
            QueueRow(
                queue=name,
                due=q.due if q else 0,
                scheduled=q.scheduled if q else 0,
                running=q.running if q else 0,
                oldest_due_seconds=q.oldest_due_seconds if q else None,
                failed_last_hour=f.failed_last_hour if f else 0,
                completed_last_minute=f.completed_last_minute if f else 0,
                at_least=capped,
            )
        )
    return rows


async def with_pauses(app: App, conn: Conn, rows: list[QueueRow]) -> list[QueueRow]:
    """The queue rows with their pauses, and a row for each paused queue without live jobs."""
    paused = {p.queue: p for p in await pauses(app.queries, conn)}
    if not paused:
        return rows
    by_name = {r.queue: msgspec.structs.replace(r, pause=paused.get(r.queue)) for r in rows}
    for name, pause in paused.items():
        by_name.setdefault(name, QueueRow(
            queue=name, due=0, scheduled=0, running=0, oldest_due_seconds=None,
            failed_last_hour=0, completed_last_minute=0, at_least=False, pause=pause,
        ))  # fmt: skip
    return [by_name[name] for name in sorted(by_name)]


async def overview(app: App) -> Overview:
    queries = app.queries
    async with snapshot(app) as conn:
        clock = await admin.top_jobs_estimate(queries, conn)
        queues = await with_pauses(app, conn, await queue_rows(app, conn))
        series = await browse.job_finished_per_minute(queries, conn)
        keys = await admin.top_concurrency_key_busiest(queries, conn, limit=OVERVIEW_KEYS)
        workers = await admin.top_worker_list(queries, conn)
        leader = await admin.top_leader(queries, conn)
        runs = await app.list_sweep_runs(OVERVIEW_RUNS + 1, active_only=True, conn=conn)
    return Overview(
        at=clock.at,
        jobs_estimate=clock.jobs,
        queues=queues,
        series=series,
        keys=keys,
        workers=workers,
        leader=leader,
        runs=runs[:OVERVIEW_RUNS],
        more_runs=len(runs) > OVERVIEW_RUNS,
    )


class Queues(msgspec.Struct, frozen=True, kw_only=True):
    at: datetime
    jobs_estimate: int | None
    queues: list[QueueRow]


async def queues(app: App) -> Queues:
    async with snapshot(app) as conn:
        clock = await admin.top_jobs_estimate(app.queries, conn)
        rows = await with_pauses(app, conn, await queue_rows(app, conn))
    return Queues(at=clock.at, jobs_estimate=clock.jobs, queues=rows)


class JobsListing(msgspec.Struct, frozen=True, kw_only=True):
    at: datetime
    jobs_estimate: int | None
    page: browse.JobPage


async def jobs(
    app: App, job_filter: browse.JobFilter, *, before: int | None, limit: int = 50
) -> JobsListing:
    async with snapshot(app) as conn:
        clock = await admin.top_jobs_estimate(app.queries, conn)
        page = await browse.job_browse(
            app.queries, conn, job_filter, before=before, limit=limit, scan=browse.PAGE_SCAN
        )
    return JobsListing(at=clock.at, jobs_estimate=clock.jobs, page=page)


class Keys(msgspec.Struct, frozen=True, kw_only=True):
    busiest: list[admin.KeyLoad]
    page: list[browse.KeyRow]
    after: str | None
    next_after: str | None
    cap: int


async def keys(app: App, *, after: str | None) -> Keys:
    queries = app.queries
    async with snapshot(app) as conn:
        busiest = await admin.top_concurrency_key_busiest(queries, conn, limit=BUSIEST_KEYS)
        page = await browse.concurrency_key_page(
            queries, conn, after=after, limit=KEYS_PAGE + 1, cap=KEY_COUNT_CAP
        )
    return Keys(
        busiest=busiest,
        page=page[:KEYS_PAGE],
        after=after,
        next_after=page[KEYS_PAGE - 1].key if len(page) > KEYS_PAGE else None,
        cap=KEY_COUNT_CAP,
    )


async def run_links(app: App, run_id: int) -> list[browse.BrowseRow]:
    """A sweep run's newest links (each a job of the run's link scope), newest first."""
    async with app.connection() as conn:
        return await browse.job_list_by_scope(
            app.queries, conn, link_scope(run_id), limit=RUN_LINKS
        )
