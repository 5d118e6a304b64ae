"""Retention at scale: pruning millions of finished jobs while workers process steady traffic.

5,000,000 finished jobs (`--jobs`; `--quick` 300,000), all finished 8 to 15 days ago, are
inserted with `generate_series` (98 % completed, 2 % failed), then VACUUM ANALYZE. Two worker
processes (`--workers`, 20 slots each, their maintenance's pruning off) then work a steady
stream of no-op jobs that this process enqueues at `--rate` jobs/s (default 1,000) with
`enqueue_many` every 50 ms. Three windows follow: traffic alone (`--window` seconds), traffic
while `app.prune(older_than=7 days)` runs (the maintenance leader's call, in batches of 5,000),
and traffic alone again. Printed: the prune's rows/s beside the traffic's rate; per window, the
jobs completed per second and the pickup latency (a job's `attempted_at - created_at`, both by
the database clock) at p50, p99 and max; the jobs table and each of its indexes before the
prune, after it, and after a VACUUM (the space autovacuum would make reusable; whether
autovacuum is on, and what it did during the run, from `pg_stat_user_tables`).
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import datetime, timedelta
from typing import Any

import anyio
import asyncpg
from _common import (
    NOOP_TASK,
    ProcessLink,
    SpawnedProcesses,
    bench_app,
    console,
    parse_args,
    print_environment,
    register_noop,
    table,
)

import sweepq

OLDER_THAN_DAYS = 7
ENQUEUE_EVERY = 0.05  # seconds between two enqueue_many calls of the steady traffic


def worker_process(link: ProcessLink, dsn: str, schema: str) -> None:
    """A worker of 20 slots, started with the others, stopped when the parent is done."""
    anyio.run(_work, link, dsn, schema)


async def _work(link: ProcessLink, dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema, pool_max_size=2)
    register_noop(app)
    async with app, sweepq.Worker(app, concurrency=20, prune_every=None) as worker:
        await link.ready(os.getpid())
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            await anyio.to_thread.run_sync(link.done.wait)
            worker.stop()
        await link.report(worker.processed)


async def fill(app: sweepq.App, count: int) -> float:
    """Insert `count` finished jobs, oldest first, in batches; the seconds it took."""
    started = time.perf_counter()
    batch = 500_000
    for start in range(0, count, batch):
        await app.pool.execute(
            f'INSERT INTO "{app.schema}".jobs (task, queue, args, max_attempts, state, attempt,'
            "  claims, created_at, run_at, attempted_at, finished_at, failure_reason)"
            " SELECT $1, 'default', '{}'::jsonb, 1,"
            "        (CASE WHEN g % 50 = 0 THEN 'failed' ELSE 'completed' END)::"
            f'"{app.schema}".job_state, 1, 1, t, t, t, t,'
            "        CASE WHEN g % 50 = 0 THEN 'error' END"
            " FROM generate_series($2::bigint, $3::bigint) AS g,"
            "      LATERAL (SELECT now() - interval '15 days'"
            "               + (g::float8 / $4) * interval '7 days' AS t) AS at",
            NOOP_TASK,
            start + 1,
            min(start + batch, count),
            float(count),
        )
    await app.pool.execute(f'VACUUM ANALYZE "{app.schema}".jobs')
    return time.perf_counter() - started


async def sizes(app: sweepq.App) -> dict[str, int]:
    """Bytes of the jobs table (heap) and of each of its indexes."""
    rows = await app.pool.fetch(
        "SELECT 'jobs (heap)' AS name, pg_relation_size(c.oid) AS bytes"
        " FROM pg_class c WHERE c.oid = $1::regclass"
        " UNION ALL"
        " SELECT i.indexrelid::regclass::text, pg_relation_size(i.indexrelid)"
        " FROM pg_index i WHERE i.indrelid = $1::regclass",
        f'"{app.schema}".jobs',
    )
    return {r["name"].rpartition(".")[2]: r["bytes"] for r in rows}


async def table_stats(app: sweepq.App) -> dict[str, Any]:
    row = await app.pool.fetchrow(
        "SELECT n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count, last_autovacuum"
        " FROM pg_stat_user_tables WHERE relid = $1::regclass",
        f'"{app.schema}".jobs',
    )
    return dict(row) if row else {}


async def traffic(app: sweepq.App, rate: int, stop: anyio.Event) -> int:
    """Enqueue `rate` no-op jobs per second until `stop`; the jobs enqueued."""
    per_call = max(1, round(rate * ENQUEUE_EVERY))
    sent = 0
    started = time.perf_counter()
    while not stop.is_set():
        await app.enqueue_many([sweepq.JobSpec(NOOP_TASK) for _ in range(per_call)])
        sent += per_call
        ahead = sent / rate - (time.perf_counter() - started)
        if ahead > 0:
            with anyio.move_on_after(ahead):
                await stop.wait()
    return sent


async def window_figures(
    app: sweepq.App, start: datetime, end: datetime
) -> tuple[float, float, float, float, int]:
    """Completed per second, and pickup latency p50 / p99 / max in ms, of the jobs created in
    [start, end); and how many were created."""
    rows = await app.pool.fetch(
        f"SELECT extract(epoch FROM attempted_at - created_at) * 1000 AS ms, state::text"
        f' FROM "{app.schema}".jobs'
        " WHERE created_at >= $1 AND created_at < $2 AND task = $3",
        start,
        end,
        NOOP_TASK,
    )
    picked = sorted(float(r["ms"]) for r in rows if r["ms"] is not None)
    done = await app.pool.fetchval(
        f'SELECT count(*) FROM "{app.schema}".jobs'
        " WHERE finished_at >= $1 AND finished_at < $2 AND state = 'completed'",
        start,
        end,
    )
    seconds = (end - start).total_seconds()
    if not picked:
        return done / seconds, float("nan"), float("nan"), float("nan"), len(rows)
    p99 = picked[min(len(picked) - 1, int(len(picked) * 0.99))]
    return done / seconds, statistics.median(picked), p99, picked[-1], len(rows)


async def clock(app: sweepq.App) -> datetime:
    moment: datetime = await app.pool.fetchval("SELECT clock_timestamp()")
    return moment


async def main() -> None:
    def options(parser: Any) -> None:
        parser.add_argument("--jobs", type=int, default=None, help="finished jobs to prune")
        parser.add_argument("--rate", type=int, default=1_000, help="traffic, jobs/s")
        parser.add_argument("--workers", type=int, default=2, help="worker processes")
        parser.add_argument("--window", type=float, default=None, help="seconds per window")

    args = parse_args(__doc__.splitlines()[0], options)
    count = args.jobs or (300_000 if args.quick else 5_000_000)
    window = args.window or (5.0 if args.quick else 15.0)
    await print_environment("retention: pruning finished jobs under steady traffic")
    async with bench_app("retention") as app:
        register_noop(app)
        autovacuum = await app.pool.fetchval("SHOW autovacuum")
        filled = await fill(app, count)
        console.print(
            f"{count:,} finished jobs inserted in {filled:.1f} s; traffic {args.rate:,} jobs/s,"
            f" {args.workers} worker processes of 20 slots; windows of {window:.0f} s;"
            f" autovacuum={autovacuum}"
        )
        before, stats_before = await sizes(app), await table_stats(app)
        async with SpawnedProcesses(args.workers, worker_process, app.dsn, app.schema) as procs:
            await procs.hellos()
            procs.start()
            stop = anyio.Event()
            marks: dict[str, datetime] = {}
            pruned: dict[str, Any] = {}
            async with anyio.create_task_group() as tg:
                tg.start_soon(traffic, app, args.rate, stop)
                await anyio.sleep(2.0)  # the workers settle on the stream
                marks["quiet"] = await clock(app)
                await anyio.sleep(window)
                marks["prune"] = await clock(app)
                t0 = time.perf_counter()
                removed = await app.prune(older_than=timedelta(days=OLDER_THAN_DAYS))
                pruned["seconds"] = time.perf_counter() - t0
                pruned["jobs"] = removed["jobs"]
                marks["after"] = await clock(app)
                await anyio.sleep(window)
                marks["end"] = await clock(app)
                stop.set()
            procs.release()
            processed = await procs.results()
        after, stats_after = await sizes(app), await table_stats(app)
        await app.pool.execute(f'VACUUM "{app.schema}".jobs')
        vacuumed = await sizes(app)

        rate = pruned["jobs"] / pruned["seconds"] if pruned["seconds"] else 0.0
        console.print(
            f"prune: {pruned['jobs']:,} jobs in {pruned['seconds']:.1f} s, {rate:,.0f} jobs/s:"
            f" {rate / args.rate:.1f}x the traffic's {args.rate:,} jobs/s"
            f" (workers processed {sum(processed):,} jobs in all)"
        )
        rows = []
        for name, start, end in (
            ("traffic alone", marks["quiet"], marks["prune"]),
            ("during the prune", marks["prune"], marks["after"]),
            ("after the prune", marks["after"], marks["end"]),
        ):
            done, p50, p99, worst, created = await window_figures(app, start, end)
            seconds = (end - start).total_seconds()
            rows.append([name, seconds, created, done, p50, p99, worst])
        table(
            "the workers' pickup (created -> attempted, by the database clock)",
            ["window", "seconds", "jobs created", "completed/s", "p50 ms", "p99 ms", "max ms"],
            rows,
        )
        table(
            "the jobs table, MB",
            ["relation", "before", "after the prune", "after VACUUM"],
            [
                [name, before[name] / 1e6, after.get(name, 0) / 1e6, vacuumed.get(name, 0) / 1e6]
                for name in before
            ],
        )
        table(
            "pg_stat_user_tables for jobs",
            ["", "before", "after the prune"],
            [[key, stats_before.get(key), stats_after.get(key)] for key in stats_before],
        )


if __name__ == "__main__":
    try:
        anyio.run(main)
    except asyncpg.PostgresError as exc:
        console.print(f"[red]database error: {exc}[/red]")
        raise SystemExit(1) from exc
