"""Look a job up, retry a failed one with a fresh attempt budget, cancel one that waits."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta

import sweepq


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    feed_is_up = False

    @app.task(name="import_feed", max_attempts=1)
    async def import_feed(ctx: sweepq.Context, url: str) -> None:
        if not feed_is_up:
            raise ConnectionError(f"{url} did not answer")

    async with app:
        await app.migrate()
        async with sweepq.Worker(app, queues=["default"], concurrency=2) as worker:
            feed = {"url": "https://example.com/feed.xml"}

            first = await app.enqueue(import_feed, feed, deadline=timedelta(hours=1))
            await worker.run_until_idle()
            failed = await app.get_job(first.job_id)
            assert failed is not None
            assert failed.state is sweepq.JobState.FAILED
            assert failed.failure_reason == "max_attempts_exceeded"
            assert (failed.attempt, failed.max_attempts) == (1, 1)
            assert failed.errors[-1].kind == "exception"
            assert "did not answer" in failed.errors[-1].error  # the traceback, kept with the job

            # The feed is back. retry() runs the job again now with a fresh budget: attempt starts
            # over, max_attempts is what it was, and the deadline is re-armed for the same duration.
            feed_is_up = True
            retried = await app.retry(first.job_id)
            assert retried is not None
            assert retried.state is sweepq.JobState.AVAILABLE
            assert (retried.attempt, retried.max_attempts, retried.failure_reason) == (0, 1, None)
            assert retried.deadline_at is not None
            assert failed.deadline_at is not None
            assert retried.deadline_at > failed.deadline_at
            await worker.run_until_idle()
            done = await app.get_job(first.job_id)
            assert done is not None
            assert (done.state, done.attempt) == (sweepq.JobState.COMPLETED, 1)
            assert len(done.errors) == 1  # the earlier failure is still on record

            # cancel() ends a job that has not finished; a terminal job is left as it is.
            later = await app.enqueue(import_feed, feed, delay=timedelta(hours=1))
            cancelled = await app.cancel(later.job_id, reason="feed retired")
            assert cancelled is not None
            assert cancelled.state is sweepq.JobState.CANCELLED
            assert cancelled.failure_reason is None  # cancelled is not a failure
            assert cancelled.errors[-1].error == "feed retired"
            again = await app.cancel(first.job_id)
            assert again is not None
            assert again.state is sweepq.JobState.COMPLETED

            assert await app.get_job(10**12) is None  # no such job (or pruned)


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
