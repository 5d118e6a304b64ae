"""Sweep overhead: a sweep over N rows vs the same N leaf jobs enqueued in bulk.

Three measurements, each on a fresh schema, each worked by one in-process worker with 20 slots
and a no-op handler:

1. sweep: a `TableSweep` over a table of N rows (key `("id",)`, page_size 500, window 5,000),
   from `start_sweep` until the run has ended (every leaf terminal, counters exact);
2. bulk: the same N leaf jobs (same arguments: the run id and the row as a dict) enqueued with
   `enqueue_many` in batches of 10,000, then `run_until_idle()`;
3. bulk, keyed like leaves: as 2, with the idempotency scope and key every leaf carries.

Printed: wall time of each (the best of `--repeat` rounds, run in turn so that load on a shared
machine hits all three alike), items/s, claim statements per 1,000 items (how the worker's
claims batch), the sweep's links and link snoozes, and the ratio of the sweep's wall time to
each bulk run's.

    .venv/bin/python benchmarks/sweep_overhead.py [--quick] [--rows N] [--repeat R]
"""

from __future__ import annotations

import argparse
from typing import Any, ClassVar

import anyio
from _common import (
    Stopwatch,
    bench_app,
    console,
    count_queries,
    parse_args,
    print_environment,
    table,
)

import sweepq
from sweepq.core.ident import ident

CONCURRENCY = 20
ENQUEUE_BATCH = 10_000


class Rows(sweepq.TableSweep):
    name = "bench-rows"
    key: ClassVar[tuple[str, ...]] = ("id",)
    page_size = 500
    window = 5_000

    async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
        return None


async def create_rows(app: sweepq.App, rows: int) -> None:
    await app.pool.execute(
        f"""CREATE TABLE {ident(app.schema)}.rows (
                id bigint PRIMARY KEY, created_at timestamptz NOT NULL, payload text NOT NULL);
            INSERT INTO {ident(app.schema)}.rows
            SELECT i, timestamptz '2024-01-01' + i * interval '1 second', md5(i::text)
            FROM generate_series(1, {int(rows)}) AS i"""
    )
    await app.pool.execute(f"VACUUM ANALYZE {ident(app.schema)}.rows")


class Result:
    def __init__(self, wall: float, claims: int, enqueue: float | None = None) -> None:
        self.wall = wall
        self.claims = claims
        self.enqueue = enqueue


async def run_sweep(rows: int) -> tuple[Result, sweepq.SweepRun, int]:
    async with bench_app("sweep", pool_max_size=20) as app:
        await create_rows(app, rows)
        calls = count_queries(app.queries)

        class Declared(Rows):
            table = f"{app.schema}.rows"

        app.register_sweep(Declared)
        async with sweepq.Worker(app, concurrency=CONCURRENCY) as worker:
            with Stopwatch() as sw:
                started = await app.start_sweep(Declared.name)
                while True:
                    await worker.run_until_idle()
                    run = await app.sweep_status(started.run_id)
                    assert run is not None
                    if run.ended:
                        break
                    await anyio.sleep(0.01)  # a waiting link snoozed; it is due shortly
        snoozes = await app.pool.fetchval(
            f"SELECT coalesce(sum(snoozes), 0) FROM {ident(app.schema)}.jobs"
            " WHERE idempotency_scope LIKE 'sweep-link:%'"
        )
    assert run.state == "completed", run
    assert run.completed == rows, run
    return Result(sw.wall, calls["job_claim"]), run, int(snoozes)


async def run_bulk(rows: int, *, keyed: bool) -> Result:
    """Wall time of enqueue + work, and of the enqueue alone."""
    async with bench_app("sweep_bulk", pool_max_size=20) as app:
        calls = count_queries(app.queries)

        @app.task(name="bench.leaf")
        async def leaf(ctx: sweepq.Context, run: int, item: Any) -> None:
            return None

        items = [
            {"id": i, "created_at": f"2024-01-01T00:00:00+00:00#{i}", "payload": f"{i:032x}"}
            for i in range(1, rows + 1)
        ]
        specs = [
            sweepq.JobSpec(
                leaf,
                {"run": 1, "item": item},
                idempotency_scope="bulk:1" if keyed else "",  # 'sweep:' is the sweeps' own
                idempotency_key=f"[{item['id']}]" if keyed else None,
            )
            for item in items
        ]
        async with sweepq.Worker(app, concurrency=CONCURRENCY) as worker:
            with Stopwatch() as total:
                with Stopwatch() as enqueue:
                    for start in range(0, rows, ENQUEUE_BATCH):
                        await app.enqueue_many(specs[start : start + ENQUEUE_BATCH])
                done = await worker.run_until_idle()
    assert done == rows, done
    return Result(total.wall, calls["job_claim"], enqueue.wall)


async def main(args: argparse.Namespace) -> None:
    rows = args.rows or (10_000 if args.quick else 100_000)
    await print_environment(f"Sweep overhead: a sweep over {rows:,} rows vs {rows:,} bulk jobs")
    sweeps: list[Result] = []
    bulks: list[Result] = []
    keyeds: list[Result] = []
    for round_ in range(1, args.repeat + 1):
        result, run, snoozes = await run_sweep(rows)
        sweeps.append(result)
        bulks.append(await run_bulk(rows, keyed=False))
        keyeds.append(await run_bulk(rows, keyed=True))
        console.print(
            f"round {round_}: sweep {sweeps[-1].wall:.2f} s ({run.links} links, {snoozes} link "
            f"snoozes), bulk {bulks[-1].wall:.2f} s, keyed bulk {keyeds[-1].wall:.2f} s"
        )
    sweep = min(sweeps, key=lambda r: r.wall)
    rows_out = []
    for label, results in (
        ("sweep (TableSweep, page 500, window 5,000)", sweeps),
        ("enqueue_many + run_until_idle", bulks),
        ("the same, keyed like leaves", keyeds),
    ):
        best = min(results, key=lambda r: r.wall)
        rows_out.append([
            label, best.wall, rows / best.wall,
            "-" if best.enqueue is None else best.enqueue,
            1_000 * best.claims / rows, sweep.wall / best.wall,
        ])  # fmt: skip
    table(
        f"{rows:,} no-op items, one worker process, {CONCURRENCY} slots, best of {args.repeat}",
        ["run", "wall s", "items/s", "of which enqueue s", "claims / 1k items", "sweep / this"],
        rows_out,
    )


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=None, help="rows to sweep (default 100,000)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; the best wall time counts")


if __name__ == "__main__":
    anyio.run(main, parse_args(__doc__ or "", options))
