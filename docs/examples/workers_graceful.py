"""A worker as a service: `run()` in a task group, `stop()` with a grace period, hand-back."""

from __future__ import annotations

import asyncio
import os
import sys

import sweepq


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    rendered: list[int] = []
    all_rendered = asyncio.Event()
    export_started = asyncio.Event()
    export_may_finish = asyncio.Event()

    @app.task(name="render_invoice", queue="invoices")
    async def render_invoice(ctx: sweepq.Context, invoice: int) -> None:
        await asyncio.sleep(0.01)
        rendered.append(invoice)
        if len(rendered) == 10:
            all_rendered.set()

    @app.task(name="export_ledger", queue="invoices")
    async def export_ledger(ctx: sweepq.Context, year: int) -> None:
        export_started.set()
        await export_may_finish.wait()  # longer than the grace period, the first time

    async with app:
        await app.migrate()
        worker = sweepq.Worker(app, queues=["invoices"], concurrency=4, grace_seconds=0.5)
        async with worker, asyncio.TaskGroup() as tg:
            tg.create_task(worker.run())  # claims and runs jobs until stop()

            # An idle worker is woken by a notification as soon as the enqueue commits.
            await app.enqueue_many(
                [sweepq.JobSpec(render_invoice, {"invoice": n}) for n in range(10)]
            )
            async with asyncio.timeout(30):
                await all_rendered.wait()

            export = await app.enqueue(export_ledger, {"year": 2026})
            await export_started.wait()
            # Stop claiming; running jobs get grace_seconds to finish, then they are cancelled
            # and handed back. run() returns once every outcome is recorded.
            worker.stop()

        assert sorted(rendered) == list(range(10))
        job = await app.get_job(export.job_id)
        assert job is not None
        # Handed back, not failed: available again, and the interrupted run was not charged.
        assert (job.state, job.attempt, job.failure_reason) == (
            sweepq.JobState.AVAILABLE,
            0,
            None,
        )
        assert job.errors[-1].kind == "interrupted"

        # The next worker (after a deploy, say) runs it to the end.
        export_may_finish.set()
        async with sweepq.Worker(app, queues=["invoices"]) as next_worker:
            await next_worker.run_until_idle()
        job = await app.get_job(export.job_id)
        assert job is not None
        assert (job.state, job.attempt) == (sweepq.JobState.COMPLETED, 1)


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
