"""Throttling: a sweep that waits while the database is busy with something that matters more,
and says so in its status."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar

import asyncpg

import sweepq
import sweepq.throttle

PRODUCTS = 500


async def nightly_import_running(conn: asyncpg.Connection[Any]) -> timedelta | None:
    """A check of your own: wait while the nightly import is connected (it needs the disks)."""
    importing = await conn.fetchval(
        """SELECT count(*) FROM pg_stat_activity
           WHERE datname = current_database() AND application_name = 'nightly-import'"""
    )
    if importing:
        # A timedelta says how long to wait before looking again; a Wait also says why.
        return sweepq.throttle.Wait(0.5, "the nightly import is running")
    return None  # go on


async def wait_for(
    app: sweepq.App, run_id: int, condition: Callable[[sweepq.SweepRun], bool]
) -> sweepq.SweepRun:
    async with asyncio.timeout(60):
        while True:
            run = await app.sweep_status(run_id)
            assert run is not None
            if condition(run):
                return run
            await asyncio.sleep(0.02)


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)

    @app.register_sweep
    class Reprice(sweepq.TableSweep):
        name = "reprice-products"
        table = f"{schema}.products"
        key: ClassVar[tuple[str, ...]] = ("id",)
        page_size = 100
        # Before each page, in order: the first check that asks for a wait makes the walk
        # wait that long, holding no worker slot, and look again. (With no replica,
        # replica_lag has nothing to wait for.)
        throttle = (sweepq.throttle.replica_lag(5), nightly_import_running)

        async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
            await ctx.app.pool.execute(
                f'UPDATE "{schema}".products SET price_cents = $2 WHERE id = $1',
                item["id"],
                item["cost_cents"] * 2,
            )

    waits: list[sweepq.events.SweepThrottled] = []
    app.observe(lambda e: waits.append(e) if isinstance(e, sweepq.events.SweepThrottled) else None)

    async with app:
        await app.migrate()
        await app.pool.execute(
            f"""CREATE TABLE IF NOT EXISTS "{schema}".products (
                    id bigint PRIMARY KEY, cost_cents bigint NOT NULL, price_cents bigint);
                INSERT INTO "{schema}".products (id, cost_cents)
                SELECT i, i * 10 FROM generate_series(1, {PRODUCTS}) AS i
                ON CONFLICT (id) DO NOTHING;
                UPDATE "{schema}".products SET price_cents = NULL"""
        )
        importer = await asyncpg.connect(
            dsn, server_settings={"application_name": "nightly-import"}
        )
        async with sweepq.Worker(app, concurrency=10) as worker, asyncio.TaskGroup() as tg:
            tg.create_task(worker.run())
            started = await app.start_sweep("reprice-products")

            # While the import runs, the walk waits: nothing is enqueued, and status says why.
            throttled = await wait_for(app, started.run_id, lambda r: r.throttled is not None)
            assert throttled.throttled == "the nightly import is running"
            assert (throttled.hint or "").startswith("throttled: the nightly import is running")
            assert throttled.enqueued == 0

            await importer.close()  # the import is over: the walk goes on by itself
            run = await wait_for(app, started.run_id, lambda r: r.ended)
            worker.stop()

        assert (run.state, run.completed, run.throttled) == (
            sweepq.SweepState.COMPLETED,
            PRODUCTS,
            None,
        )
        assert waits
        assert {(e.run_id, e.reason) for e in waits} == {(run.id, "the nightly import is running")}
        print(f"run {run.id}: {run.completed} repriced after {len(waits)} throttled wait(s)")


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
