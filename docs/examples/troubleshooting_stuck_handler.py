"""A handler that never returns keeps its job `running`: its worker is alive and renews the
lease. Bound the wait inside the handler, and cancel a job that is stuck already."""

from __future__ import annotations

import asyncio
import os
import sys

import anyio

import sweepq

QUEUE = "reports-demo"


async def the_call_that_hangs() -> None:
    await anyio.sleep_forever()  # a socket without a timeout, a lock never released, ...


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    started, cancelled = anyio.Event(), anyio.Event()

    @app.task(name="export_report_bounded", queue=QUEUE, max_attempts=1)
    async def export_report_bounded(ctx: sweepq.Context, report: int) -> None:
        # The fix: every wait on something outside has a time limit. TimeoutError is an ordinary
        # failure: retried after a backoff, then failed, with the traceback in the job's errors.
        with anyio.fail_after(0.2):
            await the_call_that_hangs()

    @app.task(name="export_report_stuck", queue=QUEUE)
    async def export_report_stuck(ctx: sweepq.Context, report: int) -> None:
        started.set()
        try:
            await the_call_that_hangs()
        except anyio.get_cancelled_exc_class():
            cancelled.set()  # clean up here; let the cancellation propagate
            raise

    async with app:
        await app.migrate()
        async with sweepq.Worker(app, queues=[QUEUE]) as worker:
            bounded = await app.enqueue(export_report_bounded, {"report": 1})
            await worker.run_until_idle()
            job = await app.get_job(bounded.job_id)
            assert job is not None
            assert (job.state, job.failure_reason) == ("failed", "max_attempts_exceeded")
            assert "TimeoutError" in job.errors[-1].error

        # A job already stuck: `sweepq jobs cancel ID` (here app.cancel) ends it, and its worker
        # cancels the handler at its next heartbeat (a third of the lease).
        async with (
            sweepq.Worker(app, queues=[QUEUE], lease_seconds=1.5) as worker,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(worker.run)
            stuck = await app.enqueue(export_report_stuck, {"report": 2})
            with anyio.fail_after(10):
                await started.wait()
                job = await app.cancel(stuck.job_id, reason="stuck: cancelled by ops")
                assert job is not None
                assert job.state is sweepq.JobState.CANCELLED
                await cancelled.wait()  # the handler is cancelled at the next heartbeat
            worker.stop()


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
