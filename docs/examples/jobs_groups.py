"""A job group: run these jobs and tell me when they are all done; retry the failed ones."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import sweepq


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    broken = {3, 7}

    @app.task(name="import_row", max_attempts=1)
    async def import_row(ctx: sweepq.Context, row: int) -> None:
        if row in broken:
            raise ValueError(f"row {row} does not parse")

    async with app:
        await app.migrate()
        group = f"import-{uuid.uuid4().hex[:8]}"  # one name per batch of work
        await app.enqueue_many(
            [sweepq.JobSpec(import_row, {"row": n}, group=group) for n in range(10)]
        )
        counts = await app.group_counts(group)
        assert (counts.available, counts.outstanding) == (10, 10)

        async with sweepq.Worker(app, queues=["default"], concurrency=4) as worker:
            await worker.run_until_idle()
            counts = await app.group_counts(group)
            assert counts.outstanding == 0  # all done...
            assert (counts.completed, counts.failed) == (8, 2)  # ...two of them failed

            # The parser is fixed: run the group's failed jobs again, each with a fresh budget.
            broken.clear()
            assert await app.retry_group_failures(group) == 2
            await worker.run_until_idle()
            assert await app.group_counts(group) == sweepq.GroupCounts(completed=10)

        # Jobs not started yet can be cancelled as a group (running ones too, if asked).
        later = f"{group}-later"
        await app.enqueue_many(
            [sweepq.JobSpec(import_row, {"row": n}, group=later, delay=3600) for n in range(5)]
        )
        assert await app.cancel_group(later, reason="batch abandoned") == 5
        assert await app.group_outstanding([group, later]) == {group: 0, later: 0}


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
