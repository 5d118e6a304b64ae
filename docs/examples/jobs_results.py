"""A job's result: what its handler returned, read back with get_job, or waited for."""

from __future__ import annotations

import asyncio
import os
import sys

import anyio

import sweepq


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)

    @app.task(name="measure_image")
    async def measure_image(ctx: sweepq.Context, image_id: int) -> dict[str, int]:
        return {"image_id": image_id, "width": 640, "height": 480}  # JSON: the job's result

    @app.task(name="log_visit")
    async def log_visit(ctx: sweepq.Context, path: str) -> None:
        return None  # None: the job keeps no result

    async with app:
        await app.migrate()
        enqueued = await app.enqueue(measure_image, {"image_id": 7})
        visit = await app.enqueue(log_visit, {"path": "/"})

        async with (
            sweepq.Worker(app, queues=["default"]) as worker,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(worker.run)
            # Woken by a notification when the job ends (no polling); TimeoutError after 30 s.
            job = await app.wait_for(enqueued.job_id, timeout=30)
            assert job.state is sweepq.JobState.COMPLETED
            assert job.result == {"image_id": 7, "width": 640, "height": 480}
            assert (await app.wait_for(visit.job_id, timeout=30)).result is None
            worker.stop()

        # Read back later, from anywhere, until retention removes the job.
        again = await app.get_job(enqueued.job_id)
        assert again is not None
        assert again.result == job.result
        # A job that has ended is returned at once; timeout=0 only looks.
        assert (await app.wait_for(enqueued.job_id, timeout=0)).result == job.result


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
