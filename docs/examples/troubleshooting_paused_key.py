"""Jobs that wait forever on a concurrency key: how to see it, how to let them run, and the
deadline that ends a wait that should not last."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta

import sweepq

QUEUE = "crm-demo"
KEY = "crm-api"


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)

    @app.task(name="sync_crm", queue=QUEUE)
    async def sync_crm(ctx: sweepq.Context, account: int) -> None:
        pass

    async with app:
        await app.migrate()
        async with sweepq.Worker(app, queues=[QUEUE]) as worker:
            await app.set_concurrency_limit(KEY, 0)  # paused, by a script or an incident
            waiting = await app.enqueue(sync_crm, {"account": 1}, concurrency_key=KEY)
            assert await worker.run_until_idle() == 0  # a free worker, and nothing runs

            # What `sweepq doctor` reads: the key's limit, and what waits for it.
            [key] = [k for k in await app.concurrency_keys() if k.key == KEY]
            assert (key.max_running, key.running, key.waiting) == (0, 0, 1)
            job = await app.get_job(waiting.job_id)
            assert job is not None
            # Waiting is not an execution: no attempt, no snooze, no error.
            assert (job.state, job.attempt, job.snoozes, job.errors) == ("available", 0, 0, [])

            # The fix: give the key room again (or None: no limit).
            await app.set_concurrency_limit(KEY, 4)
            assert await worker.run_until_idle() == 1
            job = await app.get_job(waiting.job_id)
            assert job is not None
            assert job.state is sweepq.JobState.COMPLETED

            # A job that may wait on a key needs a deadline: the wait then ends, as a failure
            # that says why, instead of never.
            await app.set_concurrency_limit(KEY, 0)
            bounded = await app.enqueue(
                sync_crm,
                {"account": 2},
                concurrency_key=KEY,
                deadline=timedelta(seconds=0.5),
            )
            await asyncio.sleep(0.6)
            await worker.run_until_idle()  # (the maintenance leader does this in a service)
            job = await app.get_job(bounded.job_id)
            assert job is not None
            assert (job.state, job.failure_reason) == ("failed", "deadline_exceeded")
            await app.set_concurrency_limit(KEY, None)


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
