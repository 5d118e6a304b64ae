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
  (keys stay until pruned); `--quick` uses 1,000 keys;
- full keys: N concurrency keys each at its limit (limit 1, one of its jobs running) with one
  due job waiting on each, and 1,000 due unkeyed jobs; N = 100, 5,000, 50,000, 500,000
  (`--quick`: up to 50,000). These claims take 10 jobs, not 100, and the 500,000-key case is
  timed over 20 claims instead of 50 (each may take seconds); a line gives the ratio of the
  median at 50,000 (and 500,000) keys to the median at 100;
- keys with room: 50,000 keys (`--quick`: 5,000) with a limit of 1 and nothing running, each
  with one job due (every key could run), and each with one job scheduled for tomorrow (no key
  can run yet); claims of 10.

EXPLAIN (ANALYZE, BUFFERS) of the claim in the large scenarios (and at 50,000 full keys) goes to
a file under /tmp/sweepq-bench/ whose path is printed.

    .venv/bin/python benchmarks/claim_depth.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta

import anyio
from _common import (
    Rollback,
    bench_app,
    fmt,
    parse_args,
    print_environment,
    results_path,
    rolled_back_claims,
    table,
)

import sweepq
from sweepq.core.queries import Conn

TASK = "bench.noop"
CLAIMS = 50
LIMIT = 100
WORKER_ID = "bench:claim-depth"
QUEUES = ["default"]
FEW = 10
FULL_KEYS = [100, 5_000, 50_000, 500_000]
FULL_KEYS_QUICK = [100, 5_000, 50_000]
FULL_LIMIT = 10  # jobs per claim in the full-key cases
FULL_UNKEYED = 1_000  # due unkeyed jobs beside the full keys, so each claim has work to do
FULL_SLOW_KEYS = 500_000  # from this many full keys on, time fewer claims
FULL_SLOW_CLAIMS = 20
FULL_EXPLAIN_KEYS = 50_000


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


async def fill_full_keys(conn: Conn, schema: str, n: int) -> None:
    """Add `n` concurrency keys at their limit, each with one job running and one waiting.

    Key `full-<i>` (i = 1..n) has max_running = 1 and running = 1; one of its jobs is running
    (leased to another worker until tomorrow, so the CHECK constraints hold) and one is
    available and due now, so every key has a job waiting that no claim may take. All the
    per-key setup of the full-key scenarios is here: a change to the concurrency_keys schema
    (or a table kept beside it) is made in this function alone. `settle` vacuums and analyzes
    the jobs and concurrency_keys tables afterwards.
    """
    await conn.execute(
        f'INSERT INTO "{schema}".concurrency_keys (key, max_running, running, next_run_at)'
        " SELECT 'full-' || g, 1, 1, now() FROM generate_series(1, $1::integer) AS g",
        n,
    )
    await conn.execute(
        f'INSERT INTO "{schema}".jobs (task, queue, args, max_attempts, concurrency_key,'
        "                              state, attempt, attempted_at, worker_id, lease_expires_at)"
        " SELECT $1, 'default', '{}'::jsonb, 5, 'full-' || g,"
        "        'running', 1, now(), 'bench:other', now() + interval '1 day'"
        " FROM generate_series(1, $2::integer) AS g",
        TASK,
        n,
    )
    await conn.execute(
        f'INSERT INTO "{schema}".jobs (task, queue, args, max_attempts, run_at, concurrency_key)'
        " SELECT $1, 'default', '{}'::jsonb, 5, now(), 'full-' || g"
        " FROM generate_series(1, $2::integer) AS g",
        TASK,
        n,
    )


async def fill_keys_with_room(conn: Conn, schema: str, n: int, *, due: bool) -> None:
    """Add `n` keys (`room-<i>`, limit 1, nothing running), each with one job due now (or
    tomorrow), and the keys' rows as the claims that read their wake-ups leave them."""
    await conn.execute(
        f'INSERT INTO "{schema}".jobs (task, queue, args, max_attempts, run_at, concurrency_key)'
        " SELECT $1, 'default', '{}'::jsonb, 5, now() + $3::interval, 'room-' || g"
        " FROM generate_series(1, $2::integer) AS g",
        TASK,
        n,
        timedelta(0 if due else 1),
    )
    await conn.execute(
        f'INSERT INTO "{schema}".concurrency_keys (key, max_running, next_run_at)'
        f' SELECT concurrency_key, 1, run_at FROM "{schema}".jobs'
        " WHERE concurrency_key LIKE 'room-%'"
    )


async def settle(conn: Conn, schema: str) -> None:
    await conn.execute(f'VACUUM (ANALYZE) "{schema}".jobs')
    await conn.execute(f'VACUUM (ANALYZE) "{schema}".concurrency_keys')


async def time_claims(
    app: sweepq.App, conn: Conn, *, limit: int = LIMIT, claims: int = CLAIMS
) -> tuple[list[float], int]:
    """Milliseconds of each of `claims` rolled-back claims of `limit`, and jobs the last one got."""
    return await rolled_back_claims(
        app, conn, limit=limit, claims=claims, worker_id=WORKER_ID, queues=QUEUES
    )


async def explain(
    app: sweepq.App, conn: Conn, label: str, out: list[str], *, limit: int = LIMIT
) -> None:
    """Append EXPLAIN (ANALYZE, BUFFERS) of one rolled-back claim of `limit` to `out`."""
    try:
        async with conn.transaction():
            rows = await conn.fetch(
                "EXPLAIN (ANALYZE, BUFFERS) " + app.queries.sql["job_claim"],
                QUEUES,
                limit,
                WORKER_ID,
                30.0,
                True,
            )
            out.append(f"== {label}\n" + "\n".join(r[0] for r in rows) + "\n")
            raise Rollback
    except Rollback:
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
    full_keys = FULL_KEYS_QUICK if args.quick else FULL_KEYS
    await print_environment(
        f"claim depth: claim of {LIMIT} ({FULL_LIMIT} beside full keys), median of {CLAIMS},"
        " rolled back"
    )
    rows: list[list[object]] = []
    full_rows: list[list[object]] = []
    full_medians: dict[int, float] = {}
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
            f'INSERT INTO "{schema}".concurrency_keys (key, max_running, running, next_run_at)'
            " VALUES ('hot', 1, 1, now() - interval '1 day')"
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

        # Many keys at their limit, each with a job waiting: none of those jobs may be claimed,
        # and the unkeyed due jobs beside them are what each claim gets.
        for n in full_keys:
            started = time.perf_counter()
            await conn.execute(f'TRUNCATE "{schema}".jobs, "{schema}".concurrency_keys')
            await fill_full_keys(conn, schema, n)
            await fill(conn, schema, FULL_UNKEYED)
            await settle(conn, schema)
            # Setup alone: at many full keys the claims themselves take seconds.
            setup = time.perf_counter() - started
            claims = FULL_SLOW_CLAIMS if n >= FULL_SLOW_KEYS else CLAIMS
            times, got = await time_claims(app, conn, limit=FULL_LIMIT, claims=claims)
            full_medians[n] = statistics.median(times)
            label = f"{n:,} full keys, {FULL_UNKEYED:,} unkeyed available"
            full_rows.append([*row(label, times, got, setup), claims])
            if n == FULL_EXPLAIN_KEYS:
                await explain(app, conn, label, plans, limit=FULL_LIMIT)

        # Many keys with room: each has a job due (a claim takes the first ten keys' jobs, in
        # the order their jobs became due), or each has only a job scheduled for tomorrow.
        room = 5_000 if args.quick else 50_000
        for due in (True, False):
            started = time.perf_counter()
            await conn.execute(f'TRUNCATE "{schema}".jobs, "{schema}".concurrency_keys')
            await fill_keys_with_room(conn, schema, room, due=due)
            await fill(conn, schema, FULL_UNKEYED)
            await settle(conn, schema)
            setup = time.perf_counter() - started
            times, got = await time_claims(app, conn, limit=FULL_LIMIT)
            what = "a job due" if due else "a job due tomorrow"
            label = f"{room:,} keys with room, each with {what}"
            full_rows.append([*row(label, times, got, setup), CLAIMS])
            if due:
                await explain(app, conn, label, plans, limit=FULL_LIMIT)

    table(
        f"time per claim of {LIMIT} (ms, {CLAIMS} claims each)",
        ["backlog", "median ms", "min ms", "max ms", "jobs claimed", "setup s"],
        rows,
    )
    slow = [n for n in full_keys if n >= FULL_SLOW_KEYS]
    fewer = f"; {FULL_SLOW_CLAIMS} at {slow[0]:,} keys, each may take seconds" if slow else ""
    table(
        f"time per claim of {FULL_LIMIT} beside N full keys (ms, {CLAIMS} claims each{fewer})",
        ["backlog", "median ms", "min ms", "max ms", "jobs claimed", "setup s", "claims"],
        full_rows,
    )
    base = full_medians[full_keys[0]]
    ratios = ", ".join(
        f"{n:,} / {full_keys[0]:,}: {fmt(full_medians[n] / base)}x"
        for n in (50_000, 500_000)
        if n in full_medians
    )
    print(f"full keys, median claim time relative to {full_keys[0]:,} keys: {ratios}")
    path = results_path("claim_plan.txt")
    await anyio.Path(path).write_text("\n".join(plans), encoding="utf-8")
    print(f"EXPLAIN (ANALYZE, BUFFERS) of the claim: {path}")


if __name__ == "__main__":
    anyio.run(main, parse_args(__doc__ or ""))
