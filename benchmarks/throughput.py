"""Processing throughput: one worker process, two worker processes, and the SQL alone.

A backlog of no-op jobs is enqueued beforehand with `enqueue_many`; then
`Worker.run_until_idle()` drains it with 20 slots. Printed: jobs/s, the worker process's CPU
seconds (`time.process_time()`, which includes asyncpg's client side), statement calls and
round trips per job; then two worker processes over twice the backlog (combined jobs/s); then,
for reference, the claim and finish statements alone in a loop on one connection.

    .venv/bin/python benchmarks/throughput.py [--quick] [--one-process]
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.synchronize
import time
import uuid

import anyio
import anyio.to_thread
from _common import (
    ServerCpu,
    Stopwatch,
    bench_app,
    count_queries,
    count_round_trips,
    parse_args,
    print_environment,
    table,
)

import sweepq
from sweepq.core.decision import Decision
from sweepq.core.rows import FinishBatch

TASK = "bench.noop"
CONCURRENCY = 20
ENQUEUE_BATCH = 10_000

COMPLETED = Decision(state="completed")


def register(app: sweepq.App) -> None:
    """The no-op task every throughput run drains."""

    async def noop(ctx: sweepq.Context) -> None:
        return None

    app.task(name=TASK)(noop)


async def enqueue(app: sweepq.App, count: int) -> None:
    for start in range(0, count, ENQUEUE_BATCH):
        size = min(ENQUEUE_BATCH, count - start)
        await app.enqueue_many([sweepq.JobSpec(TASK) for _ in range(size)])


async def one_process(app: sweepq.App, jobs: int) -> list[list[object]]:
    await enqueue(app, jobs)
    calls = count_queries(app.queries)
    server = ServerCpu(app)
    with count_round_trips() as trips:
        async with sweepq.Worker(app, concurrency=CONCURRENCY) as worker:
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.sample)
                with Stopwatch() as sw:
                    done = await worker.run_until_idle()
                tg.cancel_scope.cancel()
            server_cpu = server.read()  # before the worker's connections close
    trips["statement"] -= server.statements
    if done != jobs:
        print(f"note: the worker processed {done:,} jobs, not {jobs:,}")
    statements = sum(calls.values())
    rows: list[list[object]] = [
        ["jobs", done],
        ["wall, s", sw.wall],
        ["jobs/s", done / sw.wall],
        ["worker CPU, s (incl. asyncpg client)", sw.cpu],
        ["CPU per job, µs", sw.cpu / done * 1e6],
    ]
    if server_cpu is not None:
        rows += [
            [f"server CPU, s ({len(server.pids)} backends)", server_cpu],
            ["server CPU per job, µs", server_cpu / done * 1e6],
        ]
    rows += [[f"  calls of {name}", n] for name, n in sorted(calls.items())]
    rows += [
        ["statements per job", statements / done],
        ["jobs per claim (mean)", done / max(1, calls["job_claim"])],
        ["jobs per finish batch (mean)", done / max(1, calls["job_finish_many"])],
    ]
    rows += [[f"  round trips: {kind}", n] for kind, n in sorted(trips.items())]
    rows.append(["round trips per job", sum(trips.values()) / done])
    return rows


def child(
    dsn: str,
    schema: str,
    ready: multiprocessing.synchronize.Barrier,
    results: multiprocessing.Queue[tuple[float, float, int, float]],
) -> None:
    """One worker process: open, wait for the sibling, drain, report (start, end, jobs, cpu)."""

    async def main() -> None:
        app = sweepq.App(dsn, schema=schema, pool_max_size=2)
        register(app)
        async with app, sweepq.Worker(app, concurrency=CONCURRENCY) as worker:
            await anyio.to_thread.run_sync(ready.wait)
            started, cpu0 = time.time(), time.process_time()
            done = await worker.run_until_idle()
            results.put((started, time.time(), done, time.process_time() - cpu0))

    anyio.run(main)


async def two_processes(app: sweepq.App, jobs: int) -> list[list[object]]:
    await enqueue(app, jobs)
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Barrier(3)
    results: multiprocessing.Queue[tuple[float, float, int, float]] = ctx.Queue()
    procs = [
        ctx.Process(target=child, args=(app.dsn, app.schema, ready, results)) for _ in range(2)
    ]
    for proc in procs:
        proc.start()
    await anyio.to_thread.run_sync(ready.wait)
    reports = [await anyio.to_thread.run_sync(results.get) for _ in procs]
    for proc in procs:
        await anyio.to_thread.run_sync(proc.join)
    started = min(r[0] for r in reports)
    ended = max(r[1] for r in reports)
    done = sum(r[2] for r in reports)
    rows: list[list[object]] = [["jobs", done], ["wall, s", ended - started]]
    rows += [
        [f"  process {n + 1}: jobs, CPU s", f"{r[2]:,}, {r[3]:.2f}"] for n, r in enumerate(reports)
    ]
    rows.append(["combined jobs/s", done / (ended - started)])
    return rows


async def sql_alone(app: sweepq.App, jobs: int) -> list[list[object]]:
    """The claim (100) and finish statements back to back on one connection, no handlers."""
    await enqueue(app, jobs)
    queries = app.queries
    worker_id = f"bench:{uuid.uuid4().hex[:8]}"
    done = 0
    async with app.pool.acquire() as conn:
        with Stopwatch() as sw:
            while claimed := (
                await queries.job_claim(conn, ["default"], 100, worker_id, 30.0)
            ).jobs:
                out = FinishBatch()
                for job in claimed:
                    out.add(job.token, COMPLETED)
                done += len((await queries.job_finish_many(conn, worker_id, out)).tokens)
    return [
        ["jobs", done],
        ["jobs/s", done / sw.wall],
        ["CPU per job, µs", sw.cpu / done * 1e6],
    ]


async def main(args: argparse.Namespace) -> None:
    jobs = 2_000 if args.quick else 20_000
    await print_environment(f"throughput: no-op jobs, {CONCURRENCY} slots per worker process")
    async with bench_app("throughput") as app:
        register(app)
        rows = await one_process(app, jobs)
        table(f"one worker process, {jobs:,} jobs", ["figure", "value"], rows)
    if args.one_process:
        return
    async with bench_app("throughput") as app:
        register(app)
        rows = await two_processes(app, 2 * jobs)
        table(f"two worker processes, {2 * jobs:,} jobs", ["figure", "value"], rows)
    async with bench_app("throughput") as app:
        register(app)
        rows = await sql_alone(app, jobs)
        table(
            f"reference: job_claim(100) + job_finish_many on one connection, {jobs:,} jobs",
            ["figure", "value"],
            rows,
        )


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--one-process", action="store_true", help="only the one-process run (for profiling)"
    )


if __name__ == "__main__":
    anyio.run(main, parse_args(__doc__ or "", options))
