"""Getting started: an app with a task and a sweep, a job, a sweep run, and a worker."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, ClassVar

import sweepq

USERS = 300


def build_app(dsn: str, schema: str) -> sweepq.App:
    app = sweepq.App(dsn, schema=schema)

    # A task: an async (or plain) function whose first argument is the job's context.
    @app.task(name="send_welcome_email", max_attempts=3)
    async def send_welcome_email(ctx: sweepq.Context, user_id: int) -> None:
        await asyncio.sleep(0.001)  # call the mail API here

    # A sweep: one job per row of a table, walked page by page from a committed cursor.
    @app.register_sweep
    class RecomputeScores(sweepq.TableSweep):
        name = "recompute-scores"
        table = f"{schema}.members"
        key: ClassVar[tuple[str, ...]] = ("id",)

        async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
            assert self.app is not None
            await self.app.pool.execute(
                f'UPDATE "{schema}".members SET score = length(name) WHERE id = $1', item["id"]
            )

    return app


async def main(dsn: str, schema: str) -> None:
    app = build_app(dsn, schema)
    async with app:
        await app.migrate()  # creates or upgrades sweepq's tables; safe on every start
        await app.pool.execute(
            f"""CREATE TABLE IF NOT EXISTS "{schema}".members (
                    id bigint PRIMARY KEY, name text NOT NULL, score int);
                INSERT INTO "{schema}".members (id, name)
                SELECT i, 'user ' || i FROM generate_series(1, {USERS}) AS i
                ON CONFLICT (id) DO NOTHING"""
        )

        # Enqueue a job, and start a run of the sweep: both only write rows.
        job = await app.enqueue("send_welcome_email", {"user_id": 1})
        run = await app.start_sweep("recompute-scores")

        # A worker does the work; `sweepq worker module:app` runs one in production.
        async with sweepq.Worker(app, concurrency=20) as worker:
            await worker.run_until_idle()

        done = await app.get_job(job.job_id)
        assert done is not None
        assert done.state is sweepq.JobState.COMPLETED
        status = await app.sweep_status(run.run_id)
        assert status is not None
        assert (status.state, status.completed, status.percent) == ("completed", USERS, 100)
        print(f"job {done.id}: {done.state}; sweep run {status.id}: {status.completed} members")


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
