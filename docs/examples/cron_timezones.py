"""Cron in a time zone: a nightly job at 02:30 in Paris, ticks keyed in UTC, a bad zone refused."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import time
from zoneinfo import ZoneInfo

import sweepq

PARIS = ZoneInfo("Europe/Paris")


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    polled: list[int] = []
    ticked = asyncio.Event()

    @app.task(name="send_paris_report", queue="paris")
    async def send_paris_report(ctx: sweepq.Context) -> None: ...

    @app.task(name="poll_paris_feed", queue="paris")
    async def poll_paris_feed(ctx: sweepq.Context) -> None:
        polled.append(ctx.job_id)
        ticked.set()

    # 02:30 on the clocks of Paris: 01:30 UTC in winter, 00:30 UTC in summer.
    app.cron("paris-nightly-report", "30 2 * * *", send_paris_report, tz="Europe/Paris")
    # Every second (six fields, seconds first), so that the example sees a tick at once.
    app.cron("paris-feed", "* * * * * *", poll_paris_feed, tz="Europe/Paris")

    # A zone is checked when the schedule is registered, as the expression is.
    refused = None
    try:
        app.cron("paris-typo", "30 2 * * *", send_paris_report, tz="Europe/Pariss")
    except sweepq.InvalidJobOptionError as exc:
        refused = exc
    assert refused is not None
    assert "'Europe/Pariss' is not a time zone (did you mean 'Europe/Paris'?)" in str(refused)
    assert "paris-typo" not in app.crons

    async with app:
        await app.migrate()
        worker = sweepq.Worker(app, queues=["paris"], maintenance_seconds=0.1)
        async with worker, asyncio.TaskGroup() as tg:
            tg.create_task(worker.run())
            async with asyncio.timeout(30):
                await ticked.wait()
            worker.stop()

        # A tick is an instant, keyed in UTC whatever the zone.
        job = await app.get_job(polled[0])
        assert job is not None
        assert job.idempotency_key is not None
        assert job.idempotency_key.startswith("paris-feed@")
        assert job.idempotency_key.endswith("+00:00")

        schedules = {s.name: s for s in await app.cron_schedules()}
        nightly = schedules["paris-nightly-report"]
        assert nightly.tz == "Europe/Paris"
        # next_run_at is UTC; on the clocks of Paris it reads 02:30 (or 03:00, on the night in
        # March when they jump from 02:00 to 03:00 and 02:30 does not exist).
        in_paris = nightly.next_run_at.astimezone(PARIS)
        assert in_paris.time() in (time(2, 30), time(3, 0))
        print(f"next report: {in_paris:%Y-%m-%d %H:%M %Z}, {nightly.next_run_at:%H:%M} UTC")


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
