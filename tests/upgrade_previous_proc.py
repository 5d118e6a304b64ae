"""The application of the rolling-upgrade test, as sweepq 0.1.0 runs it:
`PYTHONPATH=<0.1.0's src> python upgrade_previous_proc.py MODE DSN SCHEMA`
(see test_upgrade_rolling.py). Each prints `ready <worker id or -> <sweepq.__file__>`.

- `setup` migrates SCHEMA with that code, creates `items`, `handled` and `gate`, sets the limit
  of the concurrency key KEY, starts a run of the table sweep `roll-items`, and exits.
- `worker` works the default queue until SIGTERM, which stops it gracefully (running jobs end).
- `enqueuer` enqueues in rounds until SIGTERM, then finishes its round, prints
  `enqueued <jobs>` and exits. Each round enqueues a plain job, a job with the concurrency key
  KEY, and a job with KEY through the SQL function `{schema}.enqueue(task, args, options)`; the
  jobs are numbered by their `n` argument, which is unique.
- `enqueue-round` enqueues one such round (jobs 1, 2 and 3) and exits.

Handlers record each execution in `handled` (`started_at` when it starts, `ended_at` when it
ends). The sweep's items past OPEN_ITEMS wait until `gate` has a row, which the test inserts once
it has migrated the schema: the walk is half-way, with leaves running, across the migration.

The test shares this file's constants and `register` (today's code registers the same tasks and
sweep); the script imports nothing of the tests, since it runs against the old sweepq.
"""

from __future__ import annotations

import json
import signal
import sys
from typing import Any

import anyio

import sweepq
from sweepq.core.ident import ident

PLAIN = "roll.plain"
KEYED = "roll.keyed"
SWEEP = "roll-items"
KEY = "roll-key"
KEY_LIMIT = 2
KEYED_SECONDS = 0.05
ROUND_SECONDS = 0.05
ITEMS = 30
OPEN_ITEMS = 6  # items that run before the gate opens
PAGE_SIZE = 2
WINDOW = 4
CONCURRENCY = 10

WORKER_OPTIONS: dict[str, Any] = {
    "lease_seconds": 2.0,
    "heartbeat_seconds": 0.5,
    "poll_seconds": 0.1,
    "maintenance_seconds": 0.2,
    "leader_ttl_seconds": 1.0,
    "grace_seconds": 10.0,
    "prune_every": None,
}

HANDLED = """
    n          bigserial   PRIMARY KEY,
    job_id     bigint      NOT NULL,
    task       text        NOT NULL,
    code       text        NOT NULL,
    worker     text        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at   timestamptz
"""

CODE = "0.1.0"


async def started(ctx: sweepq.Context, code: str) -> int:
    """Record that an execution started; returns its row (pass it to `ended`)."""
    return int(
        await ctx.app.pool.fetchval(
            f"INSERT INTO {ident(ctx.app.schema)}.handled (job_id, task, code, worker)"
            " VALUES ($1, $2, $3, $4) RETURNING n",
            ctx.job_id,
            ctx.task,
            code,
            ctx.worker_id,
        )
    )


async def ended(ctx: sweepq.Context, row: int) -> None:
    await ctx.app.pool.execute(
        f"UPDATE {ident(ctx.app.schema)}.handled SET ended_at = clock_timestamp() WHERE n = $1",
        row,
    )


async def gate_open(ctx: sweepq.Context) -> None:
    gate = f"SELECT EXISTS (SELECT FROM {ident(ctx.app.schema)}.gate)"
    while not await ctx.app.pool.fetchval(gate):
        await anyio.sleep(0.02)


def register(app: sweepq.App, schema: str, code: str) -> None:
    """The tasks and the sweep; `code` names the version in `handled`. Today's code (the test)
    registers the same."""

    async def plain(ctx: sweepq.Context, n: int) -> None:
        await ended(ctx, await started(ctx, code))

    async def keyed(ctx: sweepq.Context, n: int, via: str = "python") -> None:
        row = await started(ctx, code)
        await anyio.sleep(KEYED_SECONDS)
        await ended(ctx, row)

    app.task(name=PLAIN)(plain)
    app.task(name=KEYED)(keyed)

    class Items(sweepq.TableSweep):
        name = SWEEP
        table = f"{schema}.items"
        key = ("id",)
        page_size = PAGE_SIZE
        window = WINDOW

        async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
            row = await started(ctx, code)
            if int(item["id"]) > OPEN_ITEMS:
                await gate_open(ctx)
            await ended(ctx, row)

    app.register_sweep(Items)


async def setup(app: sweepq.App) -> None:
    quoted = ident(app.schema)
    await app.migrate()
    await app.pool.execute(f"CREATE TABLE {quoted}.items (id bigint PRIMARY KEY)")
    await app.pool.execute(f"INSERT INTO {quoted}.items SELECT generate_series(1, $1::int)", ITEMS)
    await app.pool.execute(f"CREATE TABLE {quoted}.handled ({HANDLED})")
    await app.pool.execute(f"CREATE TABLE {quoted}.gate (opened_at timestamptz)")
    await app.set_concurrency_limit(KEY, KEY_LIMIT)
    await app.start_sweep(SWEEP)
    print("ready", "-", sweepq.__file__, flush=True)


async def work(app: sweepq.App) -> None:
    async with (
        sweepq.Worker(app, concurrency=CONCURRENCY, **WORKER_OPTIONS) as worker,
        anyio.create_task_group() as tg,
    ):

        async def stop_on_sigterm() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    worker.stop()

        tg.start_soon(stop_on_sigterm)
        print("ready", worker.id, sweepq.__file__, flush=True)
        await worker.run()
        tg.cancel_scope.cancel()


async def enqueue(app: sweepq.App) -> None:
    stopping = anyio.Event()
    n = 0
    async with anyio.create_task_group() as tg:

        async def stop_on_sigterm() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    stopping.set()
                    return

        tg.start_soon(stop_on_sigterm)
        print("ready", "-", sweepq.__file__, flush=True)
        while not stopping.is_set():
            n = await enqueue_round(app, n)
            with anyio.move_on_after(ROUND_SECONDS):
                await stopping.wait()
        tg.cancel_scope.cancel()
    print("enqueued", n, flush=True)


async def enqueue_round(app: sweepq.App, n: int) -> int:
    """Enqueue jobs n + 1, n + 2 and n + 3 (plain, keyed, keyed through the SQL function);
    returns the last number used."""
    await app.enqueue(PLAIN, {"n": n + 1})
    await app.enqueue(KEYED, {"n": n + 2}, concurrency_key=KEY)
    await app.pool.fetchval(
        f"SELECT job_id FROM {ident(app.schema)}.enqueue($1, $2::jsonb, $3::jsonb)",
        KEYED,
        json.dumps({"n": n + 3, "via": "sql"}),
        json.dumps({"concurrency_key": KEY}),
    )
    return n + 3


async def main(mode: str, dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema, pool_max_size=CONCURRENCY + 4)
    register(app, schema, CODE)
    async with app:
        if mode == "setup":
            await setup(app)
        elif mode == "worker":
            await work(app)
        elif mode == "enqueuer":
            await enqueue(app)
        elif mode == "enqueue-round":
            await enqueue_round(app, 0)
            print("ready", "-", sweepq.__file__, flush=True)
        else:
            raise SystemExit(f"unknown mode {mode!r}: setup, worker, enqueuer or enqueue-round")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3])
