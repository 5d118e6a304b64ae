"""Per-item isolation, pause and resume from the cursor, the failed items and retrying them
after a fix, cancel, and a nightly start."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from typing import Any, ClassVar

import sweepq

DOCUMENTS = 1_000
PARSER = {"reads_corrupt_documents": False}  # the fix, deployed halfway through


async def wait_for(
    app: sweepq.App, run_id: int, condition: Callable[[sweepq.SweepRun], bool]
) -> sweepq.SweepRun:
    async with asyncio.timeout(60):
        while True:
            run = await app.sweep_status(run_id)
            assert run is not None
            if condition(run):
                return run
            await asyncio.sleep(0.02)


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)

    @app.register_sweep
    class Reindex(sweepq.TableSweep):
        name = "reindex-documents"
        table = f"{schema}.documents"
        key: ClassVar[tuple[str, ...]] = ("id",)
        page_size = 50
        window = 100
        max_failures = 20  # more failures than this fail the run on purpose
        max_attempts = 1  # a corrupt document will not parse on a second try either

        async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
            await asyncio.sleep(0.01)  # the work of indexing one document
            if item["body"].startswith("%corrupt") and not PARSER["reads_corrupt_documents"]:
                raise ValueError(f"document {item['id']} does not parse")

    # Start a run every night at 03:00 UTC, unless the previous one is still going.
    nightly = app.cron("nightly-reindex", "0 3 * * *", sweep="reindex-documents")
    assert nightly.task == "sweepq.sweep.reindex-documents.start"

    async with app:
        await app.migrate()
        await app.pool.execute(
            f"""CREATE TABLE IF NOT EXISTS "{schema}".documents (
                    id bigint PRIMARY KEY, body text NOT NULL);
                INSERT INTO "{schema}".documents
                SELECT i, CASE WHEN i % 100 = 0 THEN '%corrupt' ELSE 'text ' || i END
                FROM generate_series(1, {DOCUMENTS}) AS i
                ON CONFLICT (id) DO NOTHING"""
        )
        async with sweepq.Worker(app, concurrency=20) as worker, asyncio.TaskGroup() as tg:
            tg.create_task(worker.run())

            started = await app.start_sweep("reindex-documents")
            await wait_for(app, started.run_id, lambda r: r.links >= 2)

            # Pause: the link at work ends; leaves already enqueued (at most `window`) finish.
            paused = await app.pause_sweep(started.run_id)
            assert paused is not None
            assert paused.state is sweepq.SweepState.PAUSED
            settled = await wait_for(app, started.run_id, lambda r: r.outstanding == 0)
            assert settled.enqueued < DOCUMENTS

            # Resume: a new link carries on from the committed cursor, not from the head.
            await app.resume_sweep(started.run_id)
            run = await wait_for(app, started.run_id, lambda r: r.ended)

            # Ten corrupt documents failed, each in its own job; the other 990 were indexed.
            assert run.state is sweepq.SweepState.COMPLETED
            assert (run.enqueued, run.completed, run.failed) == (DOCUMENTS, 990, 10)
            assert run.links == DOCUMENTS // 50 + 1

            # Which ones, and why: the item's key, its leaf job and the last error.
            failures = await app.sweep_failures(run.id)
            assert sorted(f.key[0] for f in failures) == list(range(100, DOCUMENTS + 1, 100))
            assert (failures[0].error or "").splitlines()[-1].startswith("ValueError: document")

            # After the fix, run only those ten again: no new pass over the other 990.
            PARSER["reads_corrupt_documents"] = True
            assert await app.retry_sweep_failures(run.id) == 10
            run = await wait_for(app, run.id, lambda r: r.ended)
            assert (run.state, run.completed, run.failed) == (sweepq.SweepState.COMPLETED, 1000, 0)

            # Cancel: the run ends now and its outstanding leaves are cancelled.
            second = await app.start_sweep("reindex-documents", {"pass": 2})
            await wait_for(app, second.run_id, lambda r: r.enqueued > 0)
            cancelled = await app.cancel_sweep(second.run_id)
            assert cancelled is not None
            assert cancelled.state is sweepq.SweepState.CANCELLED
            assert (
                cancelled.completed + cancelled.failed + cancelled.cancelled == cancelled.enqueued
            )
            worker.stop()

        print(f"run {run.id}: {run.completed} indexed, {run.failed} failed after the retry")
        print(f"run {cancelled.id}: {cancelled.state} after {cancelled.enqueued} items")


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
