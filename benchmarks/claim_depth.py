"""Claim cost against backlog depth: it must stay flat, and jobs behind a full key cost nothing.

Backlogs are inserted directly (`INSERT ... SELECT FROM generate_series` into the schema's jobs
table, then VACUUM ANALYZE). Each claim of 100 is `app.queries.job_claim` inside a transaction
that is rolled back, so the backlog stays the same; the figure is the median over 50 claims.
Claims run on a connection of a worker's own pool, so they are planned as the worker plans them.

Scenarios:
- 1k, 10k, 100k, 1M available unkeyed jobs (`--quick`: 1k and 10k);
- 1M available jobs of which 900k, at the head, are on one concurrency key at its limit
  (limit 1, one of its jobs running); the claim must not walk them;
- 10 due jobs and 1M jobs scheduled for tomorrow (delayed jobs, retries, snoozes);
- 100k available unkeyed jobs and 10,000 concurrency keys without a limit and without jobs
  (keys stay until pruned); `--quick` uses 1,000 keys.

EXPLAIN (ANALYZE, BUFFERS) of the claim in the large scenarios goes to a file under
/tmp/sweepq-bench/ whose path is printed.

    .venv/bin/python benchmarks/claim_depth.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta

import anyio
from _common import bench_app, parse_args, print_environment, results_path, table

import sweepq
from sweepq.core.queries import Conn

TASK = "bench.noop"
CLAIMS = 50
LIMIT = 100
WORKER_ID = "bench:claim-depth"
QUEUES = ["default"]
FEW = 10


class _Rollback(Exception):
    """Raised to roll back a measured claim."""


async def fill(
    conn: Conn, schema: str, count: int, *, key: str | None = None, due: bool = True
) -> None:
    """Add `count` jobs (on concurrency key `key`, if given), due now or due tomorrow."""
    await conn.execute(
        f'INSERT INTO "{schema}".jobs (task, queue, args, max_attempts, run_at, concurrency_key)'
        " SELECT $1, 'default', '{}'::jsonb, 5,"
        "        now() + $4::interval + g * interval '1 microsecond', $3"
        " FROM generate_series(1, $2::bigint) AS g",
        TASK,
        count,
        key,
        timedelta(days=-1 if due else 1),
    )


async def settle(conn: Conn, schema: str) -> None:
    await conn.execute(f'VACUUM (ANALYZE) "{schema}".jobs')
    await conn.execute(f'VACUUM (ANALYZE) "{schema}".concurrency_keys')


async def time_claims(app: sweepq.App, conn: Conn) -> tuple[list[float], int]:
    """Milliseconds of each of CLAIMS rolled-back claims of LIMIT, and jobs the last one got."""
    times: list[float] = []
    got = 0
    for _ in range(CLAIMS):
        try:
            async with conn.transaction():
                started = time.perf_counter()
                claimed = await app.queries.job_claim(conn, QUEUES, LIMIT, WORKER_ID, 30.0)
                times.append((time.perf_counter() - started) * 1e3)
                got = len(claimed)
                raise _Rollback
        except _Rollback:
            pass
    return times, got


async def explain(app: sweepq.App, conn: Conn, label: str, out: list[str]) -> None:
    """Append EXPLAIN (ANALYZE, BUFFERS) of one rolled-back claim to `out`."""
    try:
        async with conn.transaction():
            rows = await conn.fetch(
                "EXPLAIN (ANALYZE, BUFFERS) " + app.queries.sql["job_claim"],
                QUEUES,
                LIMIT,
                WORKER_ID,
                30.0,
            )
            out.append(f"== {label}\n" + "\n".join(r[0] for r in rows) + "\n")
            raise _Rollback
    except _Rollback:
        pass


def row(label: str, times: list[float], got: int, setup: float) -> list[object]:
    return [
        label,
        statistics.median(times),
        min(times),
        max(times),
        got,
        setup,
    ]


async def main(args: argparse.Namespace) -> None:
    depths = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000, 1_000_000]
    idle_keys = 1_000 if args.quick else 10_000
    await print_environment(f"claim depth: claim of {LIMIT}, median of {CLAIMS}, rolled back")
    rows: list[list[object]] = []
    plans: list[str] = []
    async with (
        bench_app("claim_depth") as app,
        # The worker's own pool: its connections carry the settings the worker claims with.
        sweepq.Worker(app) as worker,
        worker.pool.acquire() as conn,
    ):
        schema = app.schema
        have = 0
        for depth in depths:
            started = time.perf_counter()
            await fill(conn, schema, depth - have)
            await settle(conn, schema)
            have = depth
            times, got = await time_claims(app, conn)
            label = f"{depth:,} available"
            rows.append(row(label, times, got, time.perf_counter() - started))
            if depth == depths[-1]:
                await explain(app, conn, label, plans)

        # 1M (or the largest depth) of which 90% sit at the head on a key at its limit.
        total = depths[-1]
        on_key = total * 9 // 10
        started = time.perf_counter()
        await conn.execute(f'TRUNCATE "{schema}".jobs, "{schema}".concurrency_keys')
        await conn.execute(
            f'INSERT INTO "{schema}".concurrency_keys (key, max_running, running)'
            " VALUES ('hot', 1, 1)"
        )
        await fill(conn, schema, on_key, key="hot")
        await fill(conn, schema, total - on_key)
        await conn.execute(
            f"UPDATE \"{schema}\".jobs SET state = 'running', attempt = 1,"
            " attempted_at = now(), worker_id = 'bench:other',"
            " lease_expires_at = now() + interval '1 day'"
            f" WHERE id = (SELECT min(id) FROM \"{schema}\".jobs WHERE concurrency_key = 'hot')"
        )
        await settle(conn, schema)
        times, got = await time_claims(app, conn)
        label = f"{total:,} available, {on_key:,} at the head on a full key"
        rows.append(row(label, times, got, time.perf_counter() - started))
        await explain(app, conn, label, plans)

        # A deep backlog scheduled for later (delayed jobs, retries, snoozes) and a few due
        # jobs, fewer than the claim asks for (as when workers keep up).
        started = time.perf_counter()
        await conn.execute(f'TRUNCATE "{schema}".jobs, "{schema}".concurrency_keys')
        await fill(conn, schema, total, due=False)
        await fill(conn, schema, FEW)
        await settle(conn, schema)
        times, got = await time_claims(app, conn)
        label = f"{FEW} available, {total:,} scheduled for tomorrow"
        rows.append(row(label, times, got, time.perf_counter() - started))
        await explain(app, conn, label, plans)

        # Many keys that carry no limit and no jobs: every claim considers each of them.
        started = time.perf_counter()
        await conn.execute(f'TRUNCATE "{schema}".jobs, "{schema}".concurrency_keys')
        await conn.execute(
            f'INSERT INTO "{schema}".concurrency_keys (key)'
            " SELECT 'customer-' || g FROM generate_series(1, $1::integer) AS g",
            idle_keys,
        )
        unkeyed = min(100_000, total)
        await fill(conn, schema, unkeyed)
        await settle(conn, schema)
        times, got = await time_claims(app, conn)
        label = f"{unkeyed:,} available, {idle_keys:,} idle keys without a limit"
        rows.append(row(label, times, got, time.perf_counter() - started))
        await explain(app, conn, label, plans)

    table(
        f"time per claim of {LIMIT} (ms, {CLAIMS} claims each)",
        ["backlog", "median ms", "min ms", "max ms", "jobs claimed", "setup s"],
        rows,
    )
    path = results_path("claim_plan.txt")
    await anyio.Path(path).write_text("\n".join(plans), encoding="utf-8")
    print(f"EXPLAIN (ANALYZE, BUFFERS) of the claim: {path}")


if __name__ == "__main__":
    anyio.run(main, parse_args(__doc__ or ""))
