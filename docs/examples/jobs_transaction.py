"""Enqueue inside your own transaction: the job commits, or rolls back, with your writes."""

from __future__ import annotations

import asyncio
import os
import sys

import sweepq


class SignupRejected(Exception):
    pass


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)

    @app.task(name="send_welcome_email")
    async def send_welcome_email(ctx: sweepq.Context, to: str) -> None:
        pass

    async with app:
        await app.migrate()

        async with app.pool.acquire() as conn:
            # Rolled back: the job goes with the transaction, so no email for a signup
            # that never happened.
            try:
                async with conn.transaction():
                    # ... your own writes on `conn` (INSERT INTO users ...) ...
                    dropped = await app.enqueue(
                        send_welcome_email, {"to": "a@example.com"}, conn=conn
                    )
                    raise SignupRejected("that email address is taken")
            except SignupRejected:
                pass
            assert await app.get_job(dropped.job_id) is None

            # Committed: the job exists from the commit on, and not before.
            async with conn.transaction():
                # ... your own writes on `conn` ...
                kept = await app.enqueue(send_welcome_email, {"to": "b@example.com"}, conn=conn)
                assert await app.get_job(kept.job_id, conn=conn) is not None  # inside: visible
                assert await app.get_job(kept.job_id) is None  # other connections: not yet
            assert await app.get_job(kept.job_id) is not None

        async with sweepq.Worker(app, queues=["default"], concurrency=2) as worker:
            await worker.run_until_idle()
        job = await app.get_job(kept.job_id)
        assert job is not None
        assert job.state is sweepq.JobState.COMPLETED


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
