"""Closing a group: no more jobs join it, and one job runs once every job of it has ended."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import sweepq


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    broken = {3}
    reports: list[dict[str, int]] = []

    @app.task(name="import_row", max_attempts=1)
    async def import_row(ctx: sweepq.Context, row: int) -> None:
        if row in broken:
            raise ValueError(f"row {row} does not parse")

    @app.task(name="import_report")
    async def import_report(ctx: sweepq.Context, batch: str) -> None:
        counts = await ctx.app.group_counts(batch)
        reports.append({"completed": counts.completed, "failed": counts.failed})

    async with app:
        await app.migrate()
        batch = f"import-{uuid.uuid4().hex[:8]}"
        rows = [sweepq.JobSpec(import_row, {"row": n}, group=batch) for n in range(10)]
        await app.enqueue_many(rows)

        # Every job of the batch is enqueued: close it. The report runs once they have all ended.
        report = sweepq.JobSpec(import_report, {"batch": batch})
        closure = await app.close_group(batch, then=report)
        assert (closure.fired, closure.then_job) == (False, None)  # ten jobs to go

        # The group takes no more jobs, from any path; nothing of a refused call is written.
        refused: sweepq.GroupClosedError | None = None
        try:
            await app.enqueue(import_row, {"row": 10}, group=batch)
        except sweepq.GroupClosedError as exc:
            refused = exc
        assert refused is not None
        assert refused.group == batch

        async with sweepq.Worker(app, concurrency=4) as worker:
            await worker.run_until_idle()  # the ten rows, then the report
            assert reports == [{"completed": 9, "failed": 1}]

            # Closing it again (a job that closed it, crashed and ran again) changes nothing.
            again = await app.close_group(batch, then=report)
            assert (again.already_closed, again.fired) == (True, True)
            assert again.then_job is not None
            done = await app.wait_for(again.then_job, timeout=10)
            assert done.state is sweepq.JobState.COMPLETED

            # Retried after it fired, the failed row runs again, but the report does not.
            broken.clear()
            assert await app.retry_group_failures(batch) == 1
            await worker.run_until_idle()
            assert len(reports) == 1

            # Reopened, the group takes jobs again, and closing it again reports once more.
            await app.reopen_group(batch)
            await app.enqueue(import_row, {"row": 10}, group=batch)
            await app.close_group(batch, then=report)
            await worker.run_until_idle()
            assert reports[1] == {"completed": 11, "failed": 0}

            # A group with no job left when it is closed fires at once.
            empty = await app.close_group(f"{batch}-empty", then=report)
            assert empty.fired
            assert empty.then_job is not None
            await worker.run_until_idle()
            assert len(reports) == 3


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
