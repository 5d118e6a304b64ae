"""Snooze: check again later without spending an attempt; a deadline ends the waiting."""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from datetime import timedelta

import sweepq

# In production a snooze is seconds or minutes; the example uses milliseconds to run quickly.
CHECK_AGAIN = timedelta(milliseconds=30)


async def run_until_finished(worker: sweepq.Worker, app: sweepq.App, job_id: int) -> sweepq.Job:
    """Work until the job is terminal (a snoozed job is due again after its delay)."""
    async with asyncio.timeout(30):
        while True:
            await worker.run_until_idle()
            job = await app.get_job(job_id)
            assert job is not None
            if job.state.terminal:
                return job
            await asyncio.sleep(0.01)


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    checks: Counter[str] = Counter()

    @app.task(name="publish_export", max_attempts=5)
    async def publish_export(ctx: sweepq.Context, export_id: str, ready_after: int) -> None:
        checks[export_id] += 1
        if checks[export_id] <= ready_after:
            raise sweepq.Snooze(CHECK_AGAIN)  # not ready yet: not a failure, not an attempt
        # ... publish the export ...

    async with app:
        await app.migrate()
        async with sweepq.Worker(app, queues=["default"], concurrency=4) as worker:
            # Ready on the fourth look: three snoozes, then one execution that succeeds.
            ready = await app.enqueue(
                publish_export, {"export_id": "e1", "ready_after": 3}, deadline=timedelta(minutes=5)
            )
            job = await run_until_finished(worker, app, ready.job_id)
            assert job.state is sweepq.JobState.COMPLETED
            assert (job.attempt, job.snoozes, job.max_attempts) == (1, 3, 5)
            assert job.errors == []  # a snooze is not an error

            # Never ready. Snoozing spends no attempt, so max_attempts can never end this job;
            # its deadline does: at the deadline it fails `deadline_exceeded`, having spent no
            # attempt at all.
            never = await app.enqueue(
                publish_export,
                {"export_id": "e2", "ready_after": 1_000_000},
                deadline=timedelta(milliseconds=300),
            )
            job = await run_until_finished(worker, app, never.job_id)
            assert job.state is sweepq.JobState.FAILED
            assert job.failure_reason == "deadline_exceeded"
            assert job.attempt == 0
            assert job.snoozes >= 1
            assert job.max_attempts == 5  # the queue never changes it


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
