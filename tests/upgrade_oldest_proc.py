"""The application of the data-forward upgrade test, as sweepq of commit 12d7951 runs it:
`PYTHONPATH=<12d7951's src> python upgrade_oldest_proc.py DSN SCHEMA [MODE]`
(see test_upgrade_data.py). Each mode prints `ready <worker id or -> <sweepq.__file__>`.

- `populate` (the default) migrates SCHEMA with that code (core 0001-0002, sweeps 0001),
  creates `items` and `handled`, enqueues jobs of every kind, starts a run of the table sweep
  `up-items`, registers the cron schedule `up-tick`, and works them with a worker that has a
  short lease. It never stops on its own: the test kills it half-way, when the database shows
  every state it wants carried across the upgrade.
- `migrate` only migrates SCHEMA, and exits.
- `late-keyed` enqueues LATE_KEYED jobs with the concurrency key LATE_KEY into a schema that
  today's code has migrated (a rolling deploy from this version, which is not supported), and
  exits.

Handlers record each execution in `handled` (one row per execution: `started_at` when it
starts, `ended_at` when it succeeds), through their own connection. The handlers that must be
running when the worker is killed wait forever here; in today's code (the test) they return.

Only this file's constants and rules (`always_fails`, `retried_once`) are shared with the test:
the script imports nothing else of the tests, since it runs against the old sweepq.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import Any

import anyio

import sweepq
from sweepq.core.ident import ident

# Tasks and the schedule.
RECORD = "up.record"  # completes at once
FAIL = "up.fail"  # always raises; max_attempts 1, so it fails for good at once
HOLD = "up.hold"  # here: runs until the worker is killed
KEYED = "up.keyed"  # concurrency key KEY, limit KEY_LIMIT; here: n >= KEYED_DONE holds forever
TICK = "up.tick"  # the cron schedule's task, every second
CRON = "up-tick"
CRON_EXPRESSION = "* * * * * *"
SWEEP = "up-items"

KEY = "up-key"
KEY_LIMIT = 2
KEYED_JOBS = 8
KEYED_DONE = 3  # keyed jobs n < KEYED_DONE complete before the kill
RECORDS = 5
FAILS = 3
HOLDS = 2
CANCELLED = 2
# Jobs of the queue IDLE, which the old worker does not serve: due now, due a few seconds after
# the upgrade starts, and due in an hour (still waiting when everything else has finished).
IDLE = "idle"
IDLE_NOW = 3
IDLE_SOON = 3
SOON_SECONDS = 6.0
IDLE_LATER = 2
LATER_SECONDS = 3600.0

# The sweep: ITEMS rows, pages of PAGE_SIZE, at most WINDOW leaves outstanding, on its own queue
# and priority (links at PRIORITY + 1).
ITEMS = 40
PAGE_SIZE = 5
WINDOW = 10
LEAF_ATTEMPTS = 2
SWEEP_QUEUE = "sweeps"
SWEEP_PRIORITY = 2
# Items from HOLD_FROM on hold their worker here (the walk stalls on its window, half-way);
# items with i % 7 == 3 always fail (two attempts each); items with i % 5 == 1 ask, on their
# first attempt, to be retried after RETRY_SECONDS: they are waiting for it at the upgrade.
HOLD_FROM = 21
RETRY_SECONDS = 8.0

# `late-keyed`: keyed jobs this code enqueues into a schema that today's code has migrated (a
# rolling deploy from this version, which is not supported).
LATE_KEY = "up-late"
LATE_KEYED = 5

WORKER_OPTIONS: dict[str, Any] = {
    "lease_seconds": 1.5,
    "heartbeat_seconds": 0.5,
    "poll_seconds": 0.1,
    "maintenance_seconds": 0.2,
    "leader_ttl_seconds": 1.0,
    "prune_every": None,
}
CONCURRENCY = 24


def always_fails(item: int) -> bool:
    return item % 7 == 3


def retried_once(item: int) -> bool:
    return item % 5 == 1 and not always_fails(item)


HANDLED = """
    n          bigserial   PRIMARY KEY,
    job_id     bigint      NOT NULL,
    task       text        NOT NULL,
    n_arg      integer,
    item       bigint,
    code       text        NOT NULL,
    worker     text        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at   timestamptz
"""

CODE = "12d7951"


async def started(ctx: sweepq.Context, *, n: int | None = None, item: int | None = None) -> int:
    """Record that an execution started; returns its row (pass it to `ended`)."""
    return int(
        await ctx.app.pool.fetchval(
            f"INSERT INTO {ident(ctx.app.schema)}.handled (job_id, task, n_arg, item, code, worker)"
            " VALUES ($1, $2, $3, $4, $5, $6) RETURNING n",
            ctx.job_id,
            ctx.task,
            n,
            item,
            CODE,
            ctx.worker_id,
        )
    )


async def ended(ctx: sweepq.Context, row: int) -> None:
    await ctx.app.pool.execute(
        f"UPDATE {ident(ctx.app.schema)}.handled SET ended_at = clock_timestamp() WHERE n = $1",
        row,
    )


async def forever() -> None:
    await anyio.sleep_forever()


def register(app: sweepq.App, schema: str) -> None:
    @app.task(name=RECORD)
    async def record(ctx: sweepq.Context, n: int) -> None:
        await ended(ctx, await started(ctx, n=n))

    @app.task(name=FAIL, max_attempts=1)
    async def fail(ctx: sweepq.Context, n: int) -> None:
        await started(ctx, n=n)
        raise RuntimeError(f"job {n} fails")

    @app.task(name=HOLD)
    async def hold(ctx: sweepq.Context, n: int) -> None:
        await started(ctx, n=n)
        await forever()

    @app.task(name=KEYED)
    async def keyed(ctx: sweepq.Context, n: int) -> None:
        row = await started(ctx, n=n)
        if n >= KEYED_DONE:
            await forever()
        await anyio.sleep(0.05)
        await ended(ctx, row)

    @app.task(name=TICK)
    async def tick(ctx: sweepq.Context) -> None:
        return None

    class Items(sweepq.TableSweep):
        name = SWEEP
        table = f"{schema}.items"
        key = ("id",)
        page_size = PAGE_SIZE
        window = WINDOW
        max_attempts = LEAF_ATTEMPTS
        queue = SWEEP_QUEUE
        priority = SWEEP_PRIORITY

        async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
            i = int(item["id"])
            row = await started(ctx, item=i)
            if i >= HOLD_FROM:
                await forever()
            if always_fails(i):
                raise RuntimeError(f"item {i} always fails")
            if retried_once(i) and ctx.attempt == 1:
                raise sweepq.RetryAfter(timedelta(seconds=RETRY_SECONDS))
            await ended(ctx, row)

    app.register_sweep(Items)
    app.cron(CRON, CRON_EXPRESSION, TICK)


async def populate(app: sweepq.App, schema: str) -> None:
    quoted = ident(schema)
    await app.pool.execute(
        f"CREATE TABLE {quoted}.items (id bigint PRIMARY KEY, name text NOT NULL)"
    )
    await app.pool.execute(
        f"INSERT INTO {quoted}.items SELECT i, 'item ' || i FROM generate_series(1, $1::int) AS i",
        ITEMS,
    )
    await app.pool.execute(f"CREATE TABLE {quoted}.handled ({HANDLED})")
    await app.set_concurrency_limit(KEY, KEY_LIMIT)
    n = 0
    for _ in range(RECORDS):
        await app.enqueue(RECORD, {"n": (n := n + 1)})
    for _ in range(FAILS):
        await app.enqueue(FAIL, {"n": (n := n + 1)})
    for _ in range(HOLDS):
        await app.enqueue(HOLD, {"n": (n := n + 1)})
    for _ in range(CANCELLED):
        job = await app.enqueue(RECORD, {"n": (n := n + 1)}, queue=IDLE)
        await app.cancel(job.job_id)
    for _ in range(IDLE_NOW):
        await app.enqueue(RECORD, {"n": (n := n + 1)}, queue=IDLE)
    for _ in range(IDLE_SOON):
        await app.enqueue(RECORD, {"n": (n := n + 1)}, queue=IDLE, delay=SOON_SECONDS)
    for _ in range(IDLE_LATER):
        await app.enqueue(RECORD, {"n": (n := n + 1)}, queue=IDLE, delay=LATER_SECONDS)
    for k in range(KEYED_JOBS):
        await app.enqueue(KEYED, {"n": k}, concurrency_key=KEY)
    await app.start_sweep(SWEEP)


async def main(dsn: str, schema: str, mode: str = "populate") -> None:
    app = sweepq.App(dsn, schema=schema, pool_max_size=CONCURRENCY + 6)
    register(app, schema)
    async with app:
        if mode == "late-keyed":
            for n in range(LATE_KEYED):
                await app.enqueue(KEYED, {"n": n}, concurrency_key=LATE_KEY)
            print("ready", "-", sweepq.__file__, flush=True)
            return
        await app.migrate()
        if mode == "migrate":
            print("ready", "-", sweepq.__file__, flush=True)
            return
        await populate(app, schema)
        async with sweepq.Worker(
            app, queues=["default", SWEEP_QUEUE], concurrency=CONCURRENCY, **WORKER_OPTIONS
        ) as worker:
            print("ready", worker.id, sweepq.__file__, flush=True)
            await worker.run()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], (sys.argv[3:] or ["populate"])[0])
