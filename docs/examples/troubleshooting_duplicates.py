"""Duplicate jobs, and duplicate effects: an idempotency key makes one job of a request sent
twice, and an effect recorded under the job's id happens once however often the job runs."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import sweepq

QUEUE = "credits-demo"


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    credits = f'"{schema}".signup_credits'
    done = f'"{schema}".signup_credit_jobs'
    executions = 0

    @app.task(name="grant_signup_credit", queue=QUEUE)
    async def grant_signup_credit(ctx: sweepq.Context, user: str, cents: int) -> None:
        nonlocal executions
        executions += 1
        # At least once: this can run again (a crash before the outcome is recorded, a lapsed
        # lease, a retry). The effect and the record that it happened commit together, so a
        # second execution finds the record and does nothing.
        async with ctx.app.pool.acquire() as conn, conn.transaction():
            first_time = await conn.fetchval(
                f"INSERT INTO {done} (job_id) VALUES ($1) ON CONFLICT DO NOTHING RETURNING job_id",
                ctx.job_id,
            )
            if first_time is None:
                return
            await conn.execute(
                f"INSERT INTO {credits} (user_id, cents) VALUES ($1, $2)", user, cents
            )

    async with app:
        await app.migrate()
        await app.pool.execute(
            f"""CREATE TABLE IF NOT EXISTS {credits} (user_id text, cents int);
                CREATE TABLE IF NOT EXISTS {done} (job_id bigint PRIMARY KEY)"""
        )
        user = uuid.uuid4().hex  # in an application: the new user's id
        args = {"user": user, "cents": 500}

        # The cause: the signup request was sent twice (a client retry, a double click), and
        # each enqueue without a key made a job.
        first = await app.enqueue(grant_signup_credit, args)
        second = await app.enqueue(grant_signup_credit, args)
        assert first.job_id != second.job_id  # two jobs: the credit would be granted twice
        for duplicate in (first, second):
            await app.cancel(duplicate.job_id)

        # The fix: a key that names the work. The second enqueue returns the first job.
        key = f"signup-credit:{user}"
        one = await app.enqueue(grant_signup_credit, args, idempotency_key=key)
        again = await app.enqueue(grant_signup_credit, args, idempotency_key=key)
        assert again == sweepq.Enqueued(one.job_id, "existing_active")

        async with sweepq.Worker(app, queues=[QUEUE]) as worker:
            await worker.run_until_idle()
            await app.retry(one.job_id)  # the job runs a second time, as after a crash
            await worker.run_until_idle()
        assert executions == 2
        granted = await app.pool.fetchval(
            f"SELECT sum(cents) FROM {credits} WHERE user_id = $1", user
        )
        assert granted == 500  # once


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
