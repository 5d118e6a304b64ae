"""Define a task, enqueue a job, and run a worker until the queue is empty."""

from __future__ import annotations

import asyncio
import os
import sys

import sweepq


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    sent: list[str] = []

    # The arguments after `ctx` are the job's arguments: enqueue checks them against this
    # signature (names and types) before anything is written.
    @app.task(name="send_welcome_email", queue="email", max_attempts=3)
    async def send_welcome_email(ctx: sweepq.Context, to: str, name: str) -> None:
        sent.append(f"attempt {ctx.attempt}: welcome, {name} <{to}>")

    async with app:  # opens the connection pool; nothing connects before
        await app.migrate()  # creates or upgrades the schema; safe to run on every start

        enqueued = await app.enqueue(send_welcome_email, {"to": "ada@example.com", "name": "Ada"})
        assert enqueued.outcome == "created"

        job = await app.get_job(enqueued.job_id)
        assert job is not None
        assert job.state is sweepq.JobState.AVAILABLE
        assert (job.queue, job.attempt, job.max_attempts) == ("email", 0, 3)

        # A worker claims jobs of its queues into `concurrency` slots and records outcomes.
        async with sweepq.Worker(app, queues=["email"], concurrency=10) as worker:
            await worker.run_until_idle()  # returns once nothing is due and nothing runs

        job = await app.get_job(enqueued.job_id)
        assert job is not None
        assert job.state is sweepq.JobState.COMPLETED
        assert job.attempt == 1
        assert job.finished_at is not None
        assert sent == ["attempt 1: welcome, Ada <ada@example.com>"]


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
