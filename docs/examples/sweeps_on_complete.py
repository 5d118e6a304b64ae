"""A job when a run ends: `on_complete` tells of each end of a run, once, with the run as it
ended, here as a report row per end."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, ClassVar

import sweepq

ACCOUNTS = 300


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    billing = {"up": False}  # account 150's invoices fail until the billing API is back

    @app.register_sweep
    class CloseMonth(sweepq.TableSweep):
        name = "close-month"
        table = f"{schema}.accounts"
        key: ClassVar[tuple[str, ...]] = ("id",)
        max_attempts = 1

        async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
            if item["id"] == 150 and not billing["up"]:
                raise ConnectionError("billing API unavailable")

        async def on_complete(self, ctx: sweepq.Context, run: sweepq.SweepRun) -> None:
            # A job of its own, once per end of the run: (run.id, run.ends) is a key for an
            # idempotent write, since a handler may run again after a crash.
            assert self.app is not None
            await self.app.pool.execute(
                f"""INSERT INTO "{schema}".reports (run_id, ends, state, completed, failed)
                    VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING""",
                run.id, run.ends, str(run.state), run.completed, run.failed,
            )  # fmt: skip

    async with app:
        await app.migrate()
        await app.pool.execute(
            f"""CREATE TABLE IF NOT EXISTS "{schema}".accounts (id bigint PRIMARY KEY);
                INSERT INTO "{schema}".accounts SELECT generate_series(1, {ACCOUNTS})
                ON CONFLICT DO NOTHING;
                DROP TABLE IF EXISTS "{schema}".reports;
                CREATE TABLE "{schema}".reports (
                    run_id bigint, ends int, state text, completed bigint, failed bigint,
                    PRIMARY KEY (run_id, ends))"""
        )
        reports = f'SELECT ends, state, completed, failed FROM "{schema}".reports ORDER BY ends'

        async def reported(count: int) -> list[tuple[Any, ...]]:
            async with asyncio.timeout(60):
                # Rows another job writes: polled, there is nothing in this process to wait on.
                while len(rows := await app.pool.fetch(reports)) < count:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
            return [tuple(r) for r in rows]

        async with sweepq.Worker(app, concurrency=10) as worker, asyncio.TaskGroup() as tg:
            tg.create_task(worker.run())
            run = await app.start_sweep("close-month")

            # The run ends failed (one account is undone): on_complete is told so.
            assert await reported(1) == [(1, "failed", ACCOUNTS - 1, 1)]

            # Once billing is back, the failed item runs again; the run's next end is told too.
            billing["up"] = True
            assert await app.retry_sweep_failures(run.run_id) == 1
            assert await reported(2) == [
                (1, "failed", ACCOUNTS - 1, 1),
                (2, "completed", ACCOUNTS, 0),
            ]
            worker.stop()
        print("reports:", await app.pool.fetch(reports))


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
