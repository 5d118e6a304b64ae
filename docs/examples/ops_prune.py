"""Retention: terminal jobs past the cutoff are deleted in batches; live jobs never are."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta

import sweepq


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)

    @app.task(name="send_digest", queue="digests")
    async def send_digest(ctx: sweepq.Context, user: int) -> None:
        return None

    async with app:
        await app.migrate()
        done = await app.enqueue_many([sweepq.JobSpec(send_digest, {"user": n}) for n in range(5)])
        async with sweepq.Worker(app, queues=["digests"]) as worker:
            await worker.run_until_idle()
        waiting = await app.enqueue(send_digest, {"user": 99}, delay=timedelta(hours=1))

        # Pretend three of the five finished a month ago, and the waiting job was created then.
        old = [r.job_id for r in done[:3]]
        jobs = f'"{app.schema}".jobs'
        await app.pool.execute(
            f"UPDATE {jobs} SET finished_at = now() - interval '30 days' WHERE id = any($1)", old
        )
        await app.pool.execute(
            f"UPDATE {jobs} SET created_at = now() - interval '30 days' WHERE id = $1",
            waiting.job_id,
        )

        # What `sweepq prune --older-than 7d` and the maintenance leader's hourly prune run.
        # batch_size=2: three jobs go in two DELETE statements.
        removed = await app.prune(older_than=timedelta(days=7), batch_size=2)
        assert removed["jobs"] == 3  # also: concurrency_keys, cron_schedules, rate_limits, ...

        for result in done[:3]:
            assert await app.get_job(result.job_id) is None  # pruned jobs are gone
        for result in done[3:]:
            job = await app.get_job(result.job_id)
            assert job is not None
            assert job.state is sweepq.JobState.COMPLETED  # finished recently: kept
        job = await app.get_job(waiting.job_id)
        assert job is not None
        assert job.state is sweepq.JobState.AVAILABLE  # live jobs are never pruned


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
