"""Enqueue throughput: bulk (`enqueue_many`) and single (`enqueue`), next to PostgreSQL alone.

Bulk: 100,000 no-op jobs in `enqueue_many` batches of 1,000 and of 10,000. Single: sequential
`enqueue` calls for 5 s or 5,000 jobs, whichever comes first. For reference, what PostgreSQL
does alone through asyncpg: COPY of the same number of rows into a bare table (bulk), and one
plain INSERT per commit into a bare table (single). The jobs table is emptied between runs.

Then where the time of one `enqueue_many` of 1,000 plain jobs goes, per job: building the
specs, checking them, reserving ids, the COPY (and its client CPU), the commit; and COPY of the
same rows into the jobs table against a copy of it without indexes, which is what bounds bulk.

    .venv/bin/python benchmarks/enqueue.py [--quick]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio
from _common import (
    Stopwatch,
    bench_app,
    count_round_trips,
    parse_args,
    print_environment,
    table,
)

import sweepq
from sweepq.core import enqueue as _enqueue

TASK = "bench.noop"
ARGS = '{"n": 1}'


async def noop(ctx: sweepq.Context, n: int) -> None:
    return None


async def bulk(app: sweepq.App, total: int, batch: int) -> tuple[float, float, float]:
    """jobs/s, client CPU µs per job and round trips per call of `enqueue_many` by `batch`."""
    await app.pool.execute(f'TRUNCATE "{app.schema}".jobs')
    with count_round_trips() as trips, Stopwatch() as sw:
        for start in range(0, total, batch):
            size = min(batch, total - start)
            await app.enqueue_many([sweepq.JobSpec(TASK, {"n": i}) for i in range(size)])
    calls = -(-total // batch)
    return total / sw.wall, sw.cpu / total * 1e6, sum(trips.values()) / calls


async def single(app: sweepq.App, seconds: float, most: int) -> tuple[float, float, float, int]:
    """jobs/s, client CPU µs per job, round trips per call, and jobs of sequential `enqueue`."""
    await app.pool.execute(f'TRUNCATE "{app.schema}".jobs')
    done = 0
    deadline = time.perf_counter() + seconds
    with count_round_trips() as trips, Stopwatch() as sw:
        while done < most and time.perf_counter() < deadline:
            await app.enqueue(TASK, {"n": done})
            done += 1
    return done / sw.wall, sw.cpu / done * 1e6, sum(trips.values()) / done, done


async def reference_copy(app: sweepq.App, total: int) -> tuple[float, float]:
    """jobs/s and client CPU µs per job of COPY of `total` rows into a bare table."""
    async with app.pool.acquire() as conn:
        await conn.execute(
            f'CREATE TABLE "{app.schema}".bare (id bigserial PRIMARY KEY, task text, args jsonb)'
        )
        rows = [(TASK, ARGS)] * total
        with Stopwatch() as sw:
            await conn.copy_records_to_table(
                "bare", schema_name=app.schema, columns=["task", "args"], records=rows
            )
        await conn.execute(f'DROP TABLE "{app.schema}".bare')
    return total / sw.wall, sw.cpu / total * 1e6


async def reference_insert(app: sweepq.App, seconds: float, most: int) -> tuple[float, float]:
    """jobs/s and client CPU µs per job of one plain INSERT per commit into a bare table."""
    async with app.pool.acquire() as conn:
        await conn.execute(
            f'CREATE TABLE "{app.schema}".bare (id bigserial PRIMARY KEY, task text, args jsonb)'
        )
        insert = f'INSERT INTO "{app.schema}".bare (task, args) VALUES ($1, $2::jsonb)'
        done = 0
        deadline = time.perf_counter() + seconds
        with Stopwatch() as sw:
            while done < most and time.perf_counter() < deadline:
                await conn.execute(insert, TASK, ARGS)
                done += 1
        await conn.execute(f'DROP TABLE "{app.schema}".bare')
    return done / sw.wall, sw.cpu / done * 1e6


async def breakdown(app: sweepq.App, calls: int) -> dict[str, float]:
    """µs per job of each step of `enqueue_many` by 1,000 plain jobs (the COPY path), and of a
    COPY of the same rows into a copy of the jobs table without its indexes."""
    spent = dict.fromkeys(
        ["building 1,000 JobSpecs", "checking them", "reserving ids", "the COPY",
         "of which client CPU", "the commit", "COPY without indexes"], 0.0,
    )  # fmt: skip
    schema, queries = app.schema, app.queries
    copied: list[Any] = []
    marks: dict[str, float] = {}
    reserve, copy = queries.job_reserve, queries.job_copy

    async def timed_reserve(*a: Any, **k: Any) -> Any:
        marks["reserve"] = time.perf_counter()
        try:
            return await reserve(*a, **k)
        finally:
            marks["reserved"] = time.perf_counter()

    async def timed_copy(conn: Any, columns: Any, records: Any) -> None:
        copied[:] = [columns, records]
        cpu = time.process_time()
        await copy(conn, columns, records)
        marks["copy cpu"] = time.process_time() - cpu
        marks["copied"] = time.perf_counter()

    queries.job_reserve = timed_reserve  # type: ignore[method-assign]
    queries.job_copy = timed_copy  # type: ignore[method-assign]
    await app.pool.execute(
        f'CREATE TABLE "{schema}".bare_jobs (LIKE "{schema}".jobs INCLUDING DEFAULTS)'
    )
    try:
        async with app.pool.acquire() as conn:
            for _ in range(calls):
                await conn.execute(f'TRUNCATE "{schema}".jobs, "{schema}".bare_jobs')
                t0 = time.perf_counter()
                specs = [sweepq.JobSpec(TASK, {"n": i}) for i in range(1_000)]
                t1 = time.perf_counter()
                rows = _enqueue.build_rows(specs, app.get_task)
                t2 = time.perf_counter()
                async with conn.transaction():
                    await _enqueue.insert(queries, conn, rows)
                t3 = time.perf_counter()
                await conn.copy_records_to_table(
                    "bare_jobs", schema_name=schema, columns=copied[0], records=copied[1]
                )
                t4 = time.perf_counter()
                steps = (
                    t1 - t0, t2 - t1, marks["reserved"] - marks["reserve"],
                    marks["copied"] - marks["reserved"], marks["copy cpu"], t3 - marks["copied"],
                    t4 - t3,
                )  # fmt: skip
                for name, value in zip(spent, steps, strict=True):
                    spent[name] += value
    finally:
        queries.job_reserve, queries.job_copy = reserve, copy  # type: ignore[method-assign]
        await app.pool.execute(f'DROP TABLE "{schema}".bare_jobs')
    return {name: value / calls / 1_000 * 1e6 for name, value in spent.items()}


async def main(args: argparse.Namespace) -> None:
    total = 10_000 if args.quick else 100_000
    seconds, most = (1.0, 1_000) if args.quick else (5.0, 5_000)
    await print_environment("enqueue: no-op jobs with one int argument")
    async with bench_app("enqueue") as app:
        app.task(name=TASK)(noop)
        copy = await reference_copy(app, total)
        by_1k = await bulk(app, total, 1_000)
        by_10k = await bulk(app, total, 10_000)
        one_by_one = await reference_insert(app, seconds, most)
        *one, single_jobs = await single(app, seconds, most)
        steps = await breakdown(app, 5 if args.quick else 30)
    rows: list[list[object]] = []
    for label, (rate, cpu, trips), (alone, alone_cpu) in [
        (f"bulk, enqueue_many x1,000 ({total:,} jobs)", by_1k, copy),
        (f"bulk, enqueue_many x10,000 ({total:,} jobs)", by_10k, copy),
        (f"single, enqueue ({single_jobs:,} jobs)", one, one_by_one),
    ]:
        rows.append([label, rate, cpu, trips, alone, alone_cpu, f"{rate / alone:.2f}"])
    columns = ["figure", "sweepq jobs/s", "client CPU µs/job", "round trips/call"]
    alone_columns = ["PostgreSQL alone jobs/s", "its client CPU µs/job", "ratio"]
    table("enqueue", [*columns, *alone_columns], rows)
    print("PostgreSQL alone: bulk = COPY into a bare table; single = one INSERT per commit.")
    table(
        "one enqueue_many of 1,000 plain jobs, µs per job",
        ["step", "µs per job"],
        [[name, value] for name, value in steps.items()],
    )


if __name__ == "__main__":
    anyio.run(main, parse_args(__doc__ or ""))
