"""A rate limit shared by two tasks: the wait holds the job's slot and writes nothing."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import sweepq


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    calls: list[float] = []

    @app.task(name="sync_customer", queue="crm")
    async def sync_customer(ctx: sweepq.Context, customer: int) -> None:
        # Waits here, in this job's slot, until the shared budget allows the next call.
        await ctx.rate_limit("crm-api", per_second=10)
        calls.append(time.monotonic())  # the call to the partner's API

    @app.task(name="sync_deal", queue="crm")
    async def sync_deal(ctx: sweepq.Context, deal: int) -> None:
        await ctx.rate_limit("crm-api", per_second=10)  # same key: one budget for both tasks
        calls.append(time.monotonic())

    async with app:
        await app.migrate()
        results = await app.enqueue_many(
            [sweepq.JobSpec(sync_customer, {"customer": n}) for n in range(4)]
            + [sweepq.JobSpec(sync_deal, {"deal": n}) for n in range(4)]
        )
        # Eight slots: all eight jobs start at once, and the limiter spaces their calls.
        async with sweepq.Worker(app, queues=["crm"], concurrency=8) as worker:
            await worker.run_until_idle()

        # Eight grants at 10 per second span at least seven intervals of 100 ms on the
        # database's clock; here each call is timed when its handler resumes, which a busy
        # machine may delay, so the check leaves the first call 0.2 s of lateness.
        assert len(calls) == 8
        assert max(calls) - min(calls) >= 7 / 10 - 0.2
        for result in results:
            job = await app.get_job(result.job_id)
            assert job is not None
            # Waiting was not a retry and not a snooze: one execution, nothing recorded.
            assert (job.state, job.attempt, job.snoozes, job.errors) == (
                sweepq.JobState.COMPLETED,
                1,
                0,
                [],
            )
        # One row per key, updated once per grant; the waits wrote nothing.
        rows = await app.pool.fetchval(
            f'SELECT count(*) FROM "{app.schema}".rate_limits WHERE key = $1', "crm-api"
        )
        assert rows == 1


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
