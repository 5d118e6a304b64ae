"""Fairness between tenants (concurrency keys): how long small tenants wait behind a big one.

1,000 tenants at equal priority, each a concurrency key without a limit (max_running NULL, as
an enqueue leaves a new key): one big tenant holds 1,000,000 available jobs and 999 small
tenants hold 10 each (`--quick`: 100,000 and 99 x 10). The backlog is inserted directly
(`INSERT ... SELECT FROM generate_series` into the schema's jobs table), the big tenant's jobs
first and older (their run_at a day ago, the small tenants' an hour ago), so that plain FIFO
would starve the small ones. Each key's wake-up is written as an enqueue writes it (one row of
concurrency_wakeups per key, at its earliest run_at) and folded into concurrency_keys by
`concurrency_wakeup_apply` (what a claim does with it), then VACUUM ANALYZE.

Variants:
- keyed: the big tenant's jobs on its own key, beside the 999 small keys;
- unkeyed: the big tenant's jobs without a key (plain jobs), beside the 999 small keys.

One connection of a worker's own pool then claims with `app.queries.job_claim`, 20 jobs a claim
(one worker's 20 slots), each claim committed, until every small tenant has had a job claimed
or a cap on claims (printed) is reached. Claimed jobs are left running under a one-day lease,
never finished: without a limit a key's running count never holds a job back, so finishing them
would change no claim's choice (and would double the statements). For each small tenant the script
records the claim that started its first job (claims until first start, counting from 1) and
the jobs claimed by the claims before that one (jobs claimed before first start).

Printed per variant: the percentiles (min, p50, p90, p99, max) of both over the small tenants;
the share of the first 1,000 claims' jobs that went to the big tenant; how the claims split
into big-tenant-only, mixed and small-only; the median (p90, max) ms per claim, overall and over
the first and last 1,000 claims. Then a flat-cost check: 50 claims of 20, each rolled back, with
100 and with 10,000 keys (no limit) that each have one due job, and the ratio of the medians.

    .venv/bin/python benchmarks/fairness.py [--quick] [--max-claims N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

import anyio
from _common import (
    bench_app,
    fmt,
    parse_args,
    percentile,
    print_environment,
    rolled_back_claims,
    table,
)

import sweepq
from sweepq.core.queries import Conn

TASK = "bench.noop"
QUEUES = ["default"]
WORKER_ID = "bench:fairness"
SLOTS = 20  # jobs per claim: one worker's 20 slots
LEASE = 86_400.0  # claimed jobs stay running for the whole run; nothing rescues them
PER_SMALL = 10
BIG_KEY = "tenant-0"
FIRST_CLAIMS = 1_000  # the window for the big tenant's share and the first/last timings
FLAT_KEYS = [100, 10_000]
FLAT_CLAIMS = 50
SPREAD = ["min", "p50", "p90", "p99", "max"]


async def fill_tenants(conn: Conn, schema: str, big: int, small: int, *, big_keyed: bool) -> None:
    """The big tenant's `big` jobs (on key `tenant-0`, or unkeyed), then `small` tenants'
    `PER_SMALL` jobs each (keys `tenant-1`..), all due; the big tenant's are the oldest."""
    await conn.execute(
        f'INSERT INTO "{schema}".jobs (task, queue, args, max_attempts, run_at, concurrency_key)'
        " SELECT $1, 'default', '{}'::jsonb, 5, now() - interval '1 day'"
        "        + g * interval '1 microsecond', $3"
        " FROM generate_series(1, $2::bigint) AS g",
        TASK,
        big,
        BIG_KEY if big_keyed else None,
    )
    await conn.execute(
        f'INSERT INTO "{schema}".jobs (task, queue, args, max_attempts, run_at, concurrency_key)'
        " SELECT $1, 'default', '{}'::jsonb, 5, now() - interval '1 hour'"
        "        + ((t - 1) * $3 + j) * interval '1 microsecond', 'tenant-' || t"
        " FROM generate_series(1, $2::integer) AS t, generate_series(1, $3::integer) AS j"
        " ORDER BY t, j",
        TASK,
        small,
        PER_SMALL,
    )


async def wake_keys(app: sweepq.App, conn: Conn) -> int:
    """Write one wake-up per key at its earliest run_at (as job_insert does), and fold them into
    concurrency_keys as a claim would; returns the keys woken."""
    await conn.execute(
        f'INSERT INTO "{app.schema}".concurrency_wakeups (key, run_at)'
        f' SELECT concurrency_key, min(run_at) FROM "{app.schema}".jobs'
        " WHERE concurrency_key IS NOT NULL GROUP BY concurrency_key"
    )
    woken = 0
    while folded := await app.queries.concurrency_wakeup_apply(conn, 10_000):
        woken += folded
    return woken


async def settle(conn: Conn, schema: str) -> None:
    await conn.execute(f'VACUUM (ANALYZE) "{schema}".jobs')
    await conn.execute(f'VACUUM (ANALYZE) "{schema}".concurrency_keys')


async def reset(conn: Conn, schema: str) -> None:
    await conn.execute(
        f'TRUNCATE "{schema}".jobs, "{schema}".concurrency_keys, "{schema}".concurrency_wakeups'
    )


class Run:
    """What the claims of one variant did."""

    def __init__(self, small_jobs: dict[int, str]) -> None:
        self.small_jobs = small_jobs  # job id -> small tenant's key
        self.tenants = len(set(small_jobs.values()))
        self.first_claim: dict[str, int] = {}
        self.jobs_before: dict[str, int] = {}
        self.times: list[float] = []
        self.claimed = 0
        self.big_early = 0  # the big tenant's jobs among the first FIRST_CLAIMS claims' jobs
        self.jobs_early = 0
        self.kinds = {"big only": 0, "mixed": 0, "small only": 0, "empty": 0}
        self.small_per_mixed: list[int] = []

    def record(self, n: int, ids: Sequence[int], ms: float) -> None:
        self.times.append(ms)
        keys = [self.small_jobs.get(i) for i in ids]
        big = sum(k is None for k in keys)
        for key in keys:
            if key is not None and key not in self.first_claim:
                self.first_claim[key] = n
                self.jobs_before[key] = self.claimed
        if n <= FIRST_CLAIMS:
            self.big_early += big
            self.jobs_early += len(ids)
        if not ids:
            self.kinds["empty"] += 1
        elif big == len(ids):
            self.kinds["big only"] += 1
        elif big == 0:
            self.kinds["small only"] += 1
        else:
            self.kinds["mixed"] += 1
        self.claimed += len(ids)

    @property
    def done(self) -> bool:
        return len(self.first_claim) == self.tenants


async def claim_until_fair(
    app: sweepq.App, conn: Conn, small_jobs: dict[int, str], cap: int
) -> Run:
    """Claim `SLOTS` at a time, committed, until every small tenant started or `cap` claims."""
    run = Run(small_jobs)
    for n in range(1, cap + 1):
        started = time.perf_counter()
        batch = await app.queries.job_claim(conn, QUEUES, SLOTS, WORKER_ID, LEASE)
        run.record(n, [job.id for job in batch.jobs], (time.perf_counter() - started) * 1e3)
        if run.done or (not batch.jobs and not batch.woke):
            break
    return run


async def flat_claims(
    app: sweepq.App, conn: Conn, setup: Conn, keys: int, *, spent: bool
) -> tuple[list[float], int]:
    """Rolled-back claims beside `keys` keys without a limit, one due job each; `spent`: their
    rate is spent for this hour (one start of one allowed), beside SLOTS due unkeyed jobs, so
    what is measured is what each claim reads of the keys it cannot start."""
    schema, unkeyed = app.schema, SLOTS if spent else 0
    await reset(setup, schema)
    await setup.execute(
        f'INSERT INTO "{schema}".jobs (task, queue, args, max_attempts, run_at,'
        "                             concurrency_key)"
        " SELECT $1, 'default', '{}'::jsonb, 5, now() - interval '1 hour'"
        "        + g * interval '1 microsecond', CASE WHEN g > $3 THEN 'flat-' || g END"
        " FROM generate_series(1, $2::integer + $3) AS g",
        TASK,
        keys,
        unkeyed,
    )
    await wake_keys(app, setup)
    if spent:
        await setup.execute(
            f'UPDATE "{schema}".concurrency_keys SET rate_count = 1,'
            " rate_period = interval '1 hour', rate_window = date_trunc('hour', now()),"
            " rate_starts = 1, next_run_at = date_trunc('hour', now()) + interval '1 hour'"
        )
    await settle(setup, schema)
    return await rolled_back_claims(
        app, conn, limit=SLOTS, claims=FLAT_CLAIMS, worker_id=WORKER_ID, queues=QUEUES
    )


def spread(values: Sequence[float]) -> list[object]:
    """min, p50, p90, p99, max of `values` (dashes when empty)."""
    if not values:
        return ["-"] * 5
    ordered = sorted(values)
    return [ordered[0], *(percentile(ordered, q) for q in (50, 90, 99)), ordered[-1]]


async def main(args: argparse.Namespace) -> None:
    big = 100_000 if args.quick else 1_000_000
    small = 99 if args.quick else 999
    # Enough for FIFO to drain the whole backlog and then start every small tenant.
    cap = args.max_claims or (big // SLOTS + small + 1_000)
    await print_environment(
        f"fairness: 1 tenant with {big:,} jobs and {small:,} tenants with {PER_SMALL} each, keys"
        f" without a limit, equal priority; claims of {SLOTS}, committed, claimed jobs left"
        f" running; at most {cap:,} claims"
    )
    variants = [
        ("keyed", f"big tenant on key {BIG_KEY!r}", True),
        ("unkeyed", "big tenant's jobs unkeyed", False),
    ]
    runs: list[tuple[str, Run, float]] = []
    flat: list[list[object]] = []
    flat_medians: dict[int, float] = {}
    rated_medians: dict[int, float] = {}
    async with (
        bench_app("fairness") as app,
        # The worker's own pool: its connections carry the settings the worker claims with.
        sweepq.Worker(app) as worker,
        worker.pool.acquire() as conn,
        app.pool.acquire() as setup,
    ):
        schema = app.schema
        for name, label, big_keyed in variants:
            started = time.perf_counter()
            await reset(setup, schema)
            await fill_tenants(setup, schema, big, small, big_keyed=big_keyed)
            await wake_keys(app, setup)
            await settle(setup, schema)
            rows = await setup.fetch(
                f'SELECT id, concurrency_key FROM "{schema}".jobs'
                " WHERE concurrency_key IS NOT NULL AND concurrency_key <> $1",
                BIG_KEY,
            )
            small_jobs = {int(r[0]): str(r[1]) for r in rows}
            setup_s = time.perf_counter() - started
            print(f"{name}: {label}; setup {fmt(setup_s)} s, claiming ...", flush=True)
            run = await claim_until_fair(app, conn, small_jobs, cap)
            runs.append((f"{name} ({label})", run, setup_s))

        for spent in (False, True):
            for keys in FLAT_KEYS:
                times, got = await flat_claims(app, conn, setup, keys, spent=spent)
                (rated_medians if spent else flat_medians)[keys] = statistics.median(times)
                what = "with their rate spent" if spent else "one due job each"
                flat.append([f"{keys:,} keys, {what}", *spread(times)[:3], max(times), got])

    for label, run, setup_s in runs:
        firsts = sorted(run.first_claim.values())
        before = sorted(run.jobs_before.values())
        waiting = run.tenants - len(firsts)
        capped = f", cap of {cap:,} claims reached" if waiting and len(run.times) >= cap else ""
        print(
            f"{label}: {len(run.times):,} claims, {run.claimed:,} jobs claimed;"
            f" {len(firsts):,} of {run.tenants:,} small tenants started{capped}"
        )
        table(
            "",
            ["small tenants, until first start", *SPREAD],
            [
                ["claims (the one that starts it, from 1)", *spread(firsts)],
                ["jobs claimed before it (earlier claims)", *spread(before)],
            ],
        )
        early = min(FIRST_CLAIMS, len(run.times))
        share = run.big_early / run.jobs_early * 100 if run.jobs_early else 0.0
        print(
            f"  first {early:,} claims: {run.jobs_early:,} jobs, {fmt(share)} % to the big tenant;"
            f" claims {', '.join(f'{k} {v:,}' for k, v in run.kinds.items())};"
            f" setup {fmt(setup_s)} s"
        )
        head, tail = run.times[:FIRST_CLAIMS], run.times[-FIRST_CLAIMS:]
        print(
            f"  ms per claim: median {fmt(statistics.median(run.times))},"
            f" p90 {fmt(percentile(sorted(run.times), 90))}, max {fmt(max(run.times))};"
            f" median of the first {len(head):,} {fmt(statistics.median(head))},"
            f" of the last {len(tail):,} {fmt(statistics.median(tail))}"
        )
    table(
        f"claim of {SLOTS} with N keys without a limit, one due job each, or with their rate spent"
        f" (ms, {FLAT_CLAIMS} claims, rolled back)",
        ["backlog", "min ms", "median ms", "p90 ms", "max ms", "jobs claimed"],
        flat,
    )
    ratio = flat_medians[FLAT_KEYS[-1]] / flat_medians[FLAT_KEYS[0]]
    print(f"median at {FLAT_KEYS[-1]:,} keys / at {FLAT_KEYS[0]:,} keys: {fmt(ratio)}x")
    ratio = rated_medians[FLAT_KEYS[-1]] / rated_medians[FLAT_KEYS[0]]
    print(
        f"with their rate spent: median at {FLAT_KEYS[-1]:,} keys / at {FLAT_KEYS[0]:,} keys:"
        f" {fmt(ratio)}x"
    )


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-claims",
        type=int,
        default=None,
        help="stop a variant after this many claims (default: enough to drain the big tenant)",
    )


if __name__ == "__main__":
    anyio.run(main, parse_args(__doc__ or "", options))
