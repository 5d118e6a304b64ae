"""Concurrency limits: at most N jobs of a key run at once; the others wait, writing nothing."""

from __future__ import annotations

import asyncio
import os
import sys

import sweepq


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    running = peak = 0

    @app.task(name="call_payments_api")
    async def call_payments_api(ctx: sweepq.Context, invoice: int) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)  # the call to the API
        running -= 1

    async with app:
        await app.migrate()
        async with sweepq.Worker(app, queues=["default"], concurrency=10) as worker:
            # The partner allows two calls in flight, whatever the number of workers and slots.
            await app.set_concurrency_limit("payments-api", 2)

            results = await app.enqueue_many(
                [
                    sweepq.JobSpec(
                        call_payments_api, {"invoice": n}, concurrency_key="payments-api"
                    )
                    for n in range(12)
                ]
            )
            await worker.run_until_idle()

            assert peak <= 2  # 10 free slots, yet never more than the key's limit at once
            for result in results:
                job = await app.get_job(result.job_id)
                assert job is not None
                assert job.state is sweepq.JobState.COMPLETED
                # Waiting for the key was not an execution: no attempt spent, no snooze counted.
                assert (job.attempt, job.snoozes, job.errors) == (1, 0, [])

            # A limit of 0 pauses the key: its jobs stay `available`, untouched, until it reopens.
            await app.set_concurrency_limit("payments-api", 0)
            paused = await app.enqueue(
                call_payments_api, {"invoice": 99}, concurrency_key="payments-api"
            )
            assert await worker.run_until_idle() == 0
            job = await app.get_job(paused.job_id)
            assert job is not None
            assert (job.state, job.attempt, job.snoozes) == (sweepq.JobState.AVAILABLE, 0, 0)
            [key] = [k for k in await app.concurrency_keys() if k.key == "payments-api"]
            assert (key.max_running, key.running, key.waiting) == (0, 0, 1)

            await app.set_concurrency_limit("payments-api", None)  # None: no limit
            assert await worker.run_until_idle() == 1


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
