"""A worker process for the fault tests that kill, stop and resume workers:
`python fault_worker_proc.py jobs|sweep|pause DSN SCHEMA`.

It prints `ready <worker id>` once its worker runs, then works until it is killed, or until
SIGTERM, which stops the worker (running jobs finish within the grace period) and exits 0.
Warnings of the worker (e.g. an outcome that was not recorded) go to stderr.

Every handler records each execution in `handled` (a bigserial `n` orders the rows) with the
worker that ran it, through the handler's own connection, before it returns: a second row of a
job is a second execution, and its first row names the worker that ran it first. `handled` is
UNLOGGED: a commit to it waits for no WAL flush, so recording costs the handler little, and its
rows survive the worker being killed (only a crash of the server would empty it).

- `jobs`: task `fault.record` sleeps `delay` seconds (so that kills land mid-execution), records
  the execution and returns.
- `sweep`: `RecordingItems` over `<schema>.items` (see sweep_worker_proc.create_items), whose
  handler records the row it handled.
- `pause`: task `fault.pause` records that it started, then waits (shielded from cancellation,
  as a handler that ignores it would) until the file `go` exists, prints `finished <job id>`
  and returns: its outcome is always offered, whatever its worker learned meanwhile.
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any

import anyio

import sweepq
from sweep_worker_proc import ItemsSweep
from sweepq.core.app import App as CoreApp
from sweepq.core.ident import ident
from sweepq.sweeps.app import App

# Short enough that rescues come quickly, long enough (10 heartbeats) that a live worker on a
# loaded 2-core machine keeps its leases: at 1 s, stalls lost the leases of live workers.
WORKER_OPTIONS: dict[str, Any] = {
    "lease_seconds": 3.0,
    "heartbeat_seconds": 0.3,
    "poll_seconds": 0.1,
    "maintenance_seconds": 0.2,
    "leader_ttl_seconds": 1.0,
    "grace_seconds": 5.0,
}
CONCURRENCY = 10
RECORD_TASK = "fault.record"
PAUSE_TASK = "fault.pause"
# Attempts are charged by every rescue; a job can be held by several killed workers in a row.
MAX_ATTEMPTS = 20


async def create_handled(app: CoreApp) -> None:
    """`handled`: one row per execution, in the order they were recorded (jobs and pause)."""
    await app.pool.execute(
        f"""CREATE UNLOGGED TABLE {ident(app.schema)}.handled (
            n      bigserial PRIMARY KEY,
            job_id bigint    NOT NULL,
            worker text      NOT NULL,
            at     timestamptz NOT NULL DEFAULT clock_timestamp())"""
    )


async def extend_handled(app: CoreApp) -> None:
    """Give the sweep tests' `handled (item_id, at)` (see `create_items`) the same columns."""
    await app.pool.execute(
        f"""ALTER TABLE {ident(app.schema)}.handled SET UNLOGGED;
            ALTER TABLE {ident(app.schema)}.handled
            ADD COLUMN n      bigserial PRIMARY KEY,
            ADD COLUMN job_id bigint NOT NULL,
            ADD COLUMN worker text   NOT NULL,
            ALTER COLUMN at SET DEFAULT clock_timestamp()"""
    )


async def record(app: CoreApp, ctx: sweepq.Context, item_id: int | None = None) -> None:
    if item_id is None:
        await app.pool.execute(
            f"INSERT INTO {ident(app.schema)}.handled (job_id, worker) VALUES ($1, $2)",
            ctx.job_id,
            ctx.worker_id,
        )
    else:
        await app.pool.execute(
            f"INSERT INTO {ident(app.schema)}.handled (job_id, worker, item_id)"
            " VALUES ($1, $2, $3)",
            ctx.job_id,
            ctx.worker_id,
            item_id,
        )


def register_record(app: CoreApp) -> sweepq.Task:
    @app.task(name=RECORD_TASK, max_attempts=MAX_ATTEMPTS)
    async def record_task(ctx: sweepq.Context, delay: float) -> None:
        await anyio.sleep(delay)
        await record(ctx.app, ctx)

    return record_task


def register_pause(app: CoreApp) -> sweepq.Task:
    @app.task(name=PAUSE_TASK, max_attempts=MAX_ATTEMPTS)
    async def pause(ctx: sweepq.Context, go: str) -> None:
        await record(ctx.app, ctx)
        with anyio.CancelScope(shield=True):
            while not await anyio.Path(go).exists():
                await anyio.sleep(0.02)
        print("finished", ctx.job_id, flush=True)

    return pause


class RecordingItems(ItemsSweep):
    """An ItemsSweep whose handler records (row, leaf job, worker) and returns."""

    page_size = 500
    window = 5_000

    async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
        assert self.app is not None
        await record(self.app, ctx, item["id"])


def kill_sweep(schema: str) -> type[RecordingItems]:
    """The sweep over `<schema>.items` that the worker works (the test registers it too)."""

    class Items(RecordingItems):
        table = f"{schema}.items"

    return Items


async def main(kind: str, dsn: str, schema: str) -> None:
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    # Fewer connections than slots: a handler waits for one, and a fleet of three (with the
    # other tests running beside it) stays within the shared server's 100 connections.
    app = App(dsn, schema=schema, pool_max_size=6)
    if kind == "jobs":
        register_record(app)
    elif kind == "sweep":
        app.register_sweep(kill_sweep(schema))
    elif kind == "pause":
        register_pause(app)
    else:
        raise SystemExit(f"unknown kind {kind!r}: jobs, sweep or pause")
    async with (
        app,
        sweepq.Worker(app, concurrency=CONCURRENCY, **WORKER_OPTIONS) as worker,
        anyio.create_task_group() as tg,
    ):

        async def stop_on_sigterm() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    worker.stop()

        tg.start_soon(stop_on_sigterm)
        print("ready", worker.id, flush=True)
        await worker.run()
        tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3])
