"""Cron: two workers, one job per tick, and the schedule's state read back."""

from __future__ import annotations

import asyncio
import os
import sys

import sweepq


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    ran: list[int] = []
    two_ticks_ran = asyncio.Event()

    @app.task(name="refresh_exchange_rates", queue="rates")
    async def refresh_exchange_rates(ctx: sweepq.Context, source: str) -> None:
        ran.append(ctx.job_id)
        if len(ran) == 2:
            two_ticks_ran.set()

    # Every second (six fields, seconds first), so the example is quick; a real schedule would
    # rather be "*/5 * * * *" (every five minutes). Times are UTC.
    app.cron(
        "exchange-rates",
        "* * * * * *",
        refresh_exchange_rates,
        {"source": "ecb"},
        overlap="skip",
    )

    async with app:
        await app.migrate()
        # Two workers, as two processes would be: one of them is elected to enqueue the ticks.
        # A short maintenance interval so that a tick is enqueued within 0.1 s of coming due.
        workers = [
            sweepq.Worker(app, queues=["rates"], maintenance_seconds=0.1, leader_ttl_seconds=1)
            for _ in range(2)
        ]
        async with workers[0], workers[1], asyncio.TaskGroup() as tg:
            for worker in workers:
                tg.create_task(worker.run())
            async with asyncio.timeout(30):
                await two_ticks_ran.wait()
            for worker in workers:
                worker.stop()

        ticks = []
        for job_id in ran:
            job = await app.get_job(job_id)
            assert job is not None
            # Each tick's job is keyed by its tick (so a tick can never enqueue twice), and
            # carries the schedule's identity ("start if not already running").
            assert job.idempotency_scope == "cron"
            assert job.idempotency_key is not None
            name, _, tick = job.idempotency_key.partition("@")
            assert name == "exchange-rates"
            assert job.identity_key == "cron:exchange-rates"
            ticks.append(tick)
        assert len(set(ticks)) == len(ticks)  # two workers, still one job per tick

        [schedule] = [s for s in await app.cron_schedules() if s.name == "exchange-rates"]
        assert schedule.expression == "* * * * * *"
        assert schedule.last_run_at is not None
        assert schedule.last_outcome in ("enqueued", "skipped")
        assert schedule.next_run_at > schedule.last_run_at


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
