"""What a handler can end an execution with: return, raise, Cancel; and the retry backoff."""

from __future__ import annotations

import asyncio
import os
import sys

import sweepq


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    deleted_customers = {"c-2"}
    mail_server_up = False

    @app.task(name="send_invoice", max_attempts=3)
    async def send_invoice(ctx: sweepq.Context, customer: str) -> None:
        if customer in deleted_customers:
            # Nothing left to do, and nothing went wrong: end the job, not as a failure.
            raise sweepq.Cancel(f"customer {customer} was deleted")
        if not mail_server_up:
            raise ConnectionError("mail server refused the connection")  # a failure: retried

    async with app:
        await app.migrate()
        async with sweepq.Worker(app, queues=["default"], concurrency=4) as worker:
            gone = await app.enqueue(send_invoice, {"customer": "c-2"})
            await worker.run_until_idle()
            job = await app.get_job(gone.job_id)
            assert job is not None
            assert job.state is sweepq.JobState.CANCELLED
            assert job.failure_reason is None
            assert job.errors[-1].kind == "cancelled"

            # An exception spends the attempt and schedules the next one after a backoff
            # (about 1 s after the first failure, doubling each time, at most an hour).
            flaky = await app.enqueue(send_invoice, {"customer": "c-1"})
            await worker.run_until_idle()  # runs attempt 1; the retry is not due yet
            job = await app.get_job(flaky.job_id)
            assert job is not None
            assert (job.state, job.attempt) == (sweepq.JobState.AVAILABLE, 1)
            assert job.errors[-1].kind == "exception"
            assert job.attempted_at is not None
            assert job.run_at > job.attempted_at  # the backoff

            # app.retry on a job that waits for its retry makes it due now.
            mail_server_up = True
            await app.retry(flaky.job_id)
            await worker.run_until_idle()
            job = await app.get_job(flaky.job_id)
            assert job is not None
            assert (job.state, job.attempt) == (sweepq.JobState.COMPLETED, 2)


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
