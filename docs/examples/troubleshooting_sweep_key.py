"""A sweep keyed on a column its handler writes never ends by itself: sweepq fails the run the
first time an item comes round again. Keyed on a column nobody writes, the same sweep finishes."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, ClassVar

import anyio

import sweepq

QUEUE = "sweep-key-demo"
ACCOUNTS = 300


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    accounts = f'"{schema}".plan_accounts'

    async def upgrade(ctx: sweepq.Context, item: dict[str, Any]) -> None:
        # Writing the row sets updated_at = now(): the row moves past every row not walked yet.
        await ctx.app.pool.execute(
            f"UPDATE {accounts} SET plan = 'pro', updated_at = now() WHERE id = $1", item["id"]
        )

    @app.register_sweep
    class UpgradeByUpdatedAt(sweepq.TableSweep):
        name = "upgrade-plans-by-updated-at"
        table = f"{schema}.plan_accounts"
        key: ClassVar[tuple[str, ...]] = ("updated_at", "id")  # WRONG: the handler writes it
        queue = QUEUE
        page_size = 50

        async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
            await upgrade(ctx, item)

    @app.register_sweep
    class UpgradeById(UpgradeByUpdatedAt):
        name = "upgrade-plans-by-id"
        key: ClassVar[tuple[str, ...]] = ("id",)  # RIGHT: nothing writes the primary key

    async def run_to_the_end(name: str) -> sweepq.SweepRun:
        started = await app.start_sweep(name)
        async with (
            sweepq.Worker(app, queues=[QUEUE], concurrency=10) as worker,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(worker.run)
            ended: sweepq.SweepRun | None = None
            with anyio.fail_after(30):
                while ended is None:
                    run = await app.sweep_status(started.run_id)
                    assert run is not None
                    ended = run if run.ended else None
                    await anyio.sleep(0.05)
            worker.stop()
        assert ended is not None
        return ended

    async with app:
        await app.migrate()
        await app.pool.execute(
            f"""CREATE TABLE IF NOT EXISTS {accounts} (
                    id bigint PRIMARY KEY, plan text NOT NULL, updated_at timestamptz NOT NULL);
                TRUNCATE {accounts};
                INSERT INTO {accounts}
                SELECT i, 'free', timestamptz '2024-01-01' + i * interval '1 minute'
                FROM generate_series(1, {ACCOUNTS}) AS i"""
        )

        looping = await run_to_the_end("upgrade-plans-by-updated-at")
        assert looping.state is sweepq.SweepState.FAILED
        assert looping.failure is not None
        assert "a second time in run" in looping.failure
        assert "the walk is re-serving its own work" in looping.failure
        print(looping.failure)

        fixed = await run_to_the_end("upgrade-plans-by-id")
        assert fixed.state is sweepq.SweepState.COMPLETED
        assert (fixed.enqueued, fixed.completed) == (ACCOUNTS, ACCOUNTS)  # each row once


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
