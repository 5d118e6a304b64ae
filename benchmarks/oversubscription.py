"""Writes at oversubscription: a job that may not run must cost nothing while it waits.

Jobs on one concurrency key with limit 1 (each sleeps 10 ms) are worked for a fixed time by a
worker with 20 slots (20x oversubscription), and, as the control, by a worker with 1 slot (1x).
For each run: completed jobs, claims that found the key full ("waits"), rows written per table
(`pg_stat_user_tables` n_tup_ins/upd/del deltas, read after the worker's connections closed and
flushed their statistics) and table + index size growth (`pg_total_relation_size`). If waiting
costs nothing, rows and bytes per completed job are the same at 20x as at 1x.

    .venv/bin/python benchmarks/oversubscription.py [--quick]
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable
from typing import Any, NamedTuple

import anyio
from _common import bench_app, parse_args, print_environment, table

import sweepq
from sweepq.core.rows import ClaimBatch

TASK = "bench.limited"
SLEEP = 0.01
BACKLOG = 5_000


async def table_stats(app: sweepq.App) -> dict[str, tuple[int, int, int, int]]:
    """Per table of the schema: (inserted, updated, deleted, total bytes), as last flushed."""
    async with app.pool.acquire() as conn:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        records = await conn.fetch(
            "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del, pg_total_relation_size(relid)"
            " FROM pg_stat_user_tables WHERE schemaname = $1 AND relname <> 'schema_migrations'",
            app.schema,
        )
    return {r[0]: (r[1], r[2], r[3], r[4]) for r in records}


async def flushed_stats(app: sweepq.App) -> dict[str, tuple[int, int, int, int]]:
    """Statistics once every backend that wrote has reported (idle backends flush within ~1 s)."""
    await anyio.sleep(1.5)
    return await table_stats(app)


class Run(NamedTuple):
    slots: int
    completed: int
    claims: int
    waits: int
    rows: dict[str, tuple[int, int, int]]
    bytes: int
    key_running: int

    def other_rows(self) -> str:
        """Rows written to the schema's other tables (e.g. the maintenance leader's lease)."""
        written = {
            name: ins + upd + dele
            for name, (ins, upd, dele) in sorted(self.rows.items())
            if name not in ("jobs", "concurrency_keys")
        }
        return ", ".join(f"{name} {n}" for name, n in written.items() if n) or "0"

    @property
    def rows_per_job(self) -> float:
        return sum(sum(r) for r in self.rows.values()) / max(1, self.completed)


async def run(app: sweepq.App, slots: int, seconds: float, key: str) -> Run:
    queries = app.queries
    claims: Counter[str] = Counter()
    claim = queries.job_claim

    async def counted(*args: Any, **kwargs: Any) -> ClaimBatch:
        got = await claim(*args, **kwargs)
        claims["claims"] += 1
        if not got.jobs:
            claims["waits"] += 1
        return got

    setattr(queries, "job_claim", counted)  # noqa: B010  # count claims on this instance
    before = await flushed_stats(app)
    worker = sweepq.Worker(app, concurrency=slots)
    async with worker, anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await anyio.sleep(seconds)
        worker.stop()  # running jobs finish (10 ms) and are recorded
    delattr(queries, "job_claim")  # back to the class's method
    after = await flushed_stats(app)
    completed = await app.pool.fetchval(
        f"SELECT count(*) FROM \"{app.schema}\".jobs WHERE state = 'completed'"
    )
    await app.pool.execute(f"DELETE FROM \"{app.schema}\".jobs WHERE state = 'completed'")
    delta = {
        name: tuple(a - b for a, b in zip(after[name], before.get(name, (0, 0, 0, 0)), strict=True))
        for name in after
    }
    keys = {k.key: k.running for k in await app.concurrency_keys()}
    return Run(
        slots=slots,
        completed=completed,
        claims=claims["claims"],
        waits=claims["waits"],
        rows={name: (d[0], d[1], d[2]) for name, d in delta.items()},
        bytes=sum(d[3] for d in delta.values()),
        key_running=keys[key],
    )


def _triple(values: tuple[int, int, int] | None) -> str:
    return "/".join(str(n) for n in values or (0, 0, 0))


async def main(args: argparse.Namespace) -> None:
    seconds = 3.0 if args.quick else 10.0
    await print_environment(
        f"oversubscription: one key at limit 1, jobs sleep {SLEEP * 1e3:.0f} ms, {seconds:g} s each"
    )
    runs: list[Run] = []
    async with bench_app("oversubscription") as app:

        async def limited(ctx: sweepq.Context) -> None:
            await anyio.sleep(SLEEP)

        app.task(name=TASK)(limited)
        for slots in (20, 1):
            key = f"bench-{slots}x"
            await app.set_concurrency_limit(key, 1)
            await app.enqueue_many(
                [sweepq.JobSpec(TASK, concurrency_key=key) for _ in range(BACKLOG)]
            )
            runs.append(await run(app, slots, seconds, key))
            await app.pool.execute(f'TRUNCATE "{app.schema}".jobs')
    figures: list[tuple[str, Callable[[Run], object]]] = [
        ("completed jobs", lambda r: r.completed),
        ("claims", lambda r: r.claims),
        ("waits (claims that found the key full)", lambda r: r.waits),
        ("jobs rows ins/upd/del", lambda r: _triple(r.rows.get("jobs"))),
        ("concurrency_keys rows ins/upd/del", lambda r: _triple(r.rows.get("concurrency_keys"))),
        ("rows of other tables", Run.other_rows),
        ("rows per completed job", lambda r: r.rows_per_job),
        ("bytes per completed job (tables + indexes)", lambda r: r.bytes / max(1, r.completed)),
        ("the key's running count after stop", lambda r: r.key_running),
    ]
    table(
        f"writes at oversubscription ({seconds:g} s per run)",
        ["figure", *(f"{r.slots} slot(s), limit 1: {r.slots}x" for r in runs)],
        [[label, *(get(r) for r in runs)] for label, get in figures],
    )
    over, control = runs
    extra = over.rows_per_job * over.completed - control.rows_per_job * over.completed
    print(
        f"rows written per wait (rows at {over.slots}x beyond {control.rows_per_job:.2f} per "
        f"completed job, over {over.waits:,} waits): {extra / max(1, over.waits):.3f}"
    )


if __name__ == "__main__":
    anyio.run(main, parse_args(__doc__ or ""))
