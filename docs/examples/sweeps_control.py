"""Per-item isolation and an honest end, the undone items and retrying them after a fix, pause
and resume from the cursor, cancel and resume of a cancelled run, and a nightly start."""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

import sweepq

DOCUMENTS = 1_000
PARSER = {"reads_corrupt_documents": False}  # the fix, deployed after the first run
CALLS: Counter[int] = Counter()  # how many times each document's handler ran


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
    PARSER["reads_corrupt_documents"] = False
    CALLS.clear()

    @app.register_sweep
    class Reindex(sweepq.TableSweep):
        name = "reindex-documents"
        table = f"{schema}.documents"
        key: ClassVar[tuple[str, ...]] = ("id",)
        page_size = 50
        window = 100
        max_attempts = 1  # a corrupt document will not parse on a second try either

        async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
            CALLS[item["id"]] += 1
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
            # The percentage is of the items completed, as the count beside it says.
            assert settled.percent == round(settled.completed / DOCUMENTS * 100, 1)

            # Resume: a new link carries on from the committed cursor, not from the head.
            resumed = await app.resume_sweep(started.run_id)
            assert resumed is not None
            assert (resumed.state, resumed.cursor) == (sweepq.SweepState.RUNNING, settled.cursor)
            run = await wait_for(app, started.run_id, lambda r: r.ended)

            # Ten corrupt documents failed, each in its own job, and the walk went on to the
            # end: 1 % of the items is far under the failure budget. The run is not
            # `completed`, though: ten documents are not indexed, and it says so.
            assert (run.state, run.walked) == (sweepq.SweepState.FAILED, True)
            assert (run.enqueued, run.completed, run.failed) == (DOCUMENTS, 990, 10)
            assert run.failure is not None
            assert run.failure.startswith("the walk reached the end, but of its 1,000 items")
            assert run.failure.endswith(f"`sweepq sweep retry-failed {run.id}` runs them again")

            # Which ones, and why: the item's key, its leaf job, its state and the last error.
            failures = await app.sweep_failures(run.id)
            assert sorted(f.key[0] for f in failures) == list(range(100, DOCUMENTS + 1, 100))
            assert {f.state for f in failures} == {"failed"}
            assert (failures[0].error or "").splitlines()[-1].startswith("ValueError: document")

            # After the fix, run only those ten again: no new pass over the other 990.
            PARSER["reads_corrupt_documents"] = True
            calls = sum(CALLS.values())
            assert await app.retry_sweep_failures(run.id) == 10
            run = await wait_for(app, run.id, lambda r: r.ended)
            assert (run.state, run.failure) == (sweepq.SweepState.COMPLETED, None)
            assert (run.completed, run.failed, run.percent, run.ends) == (DOCUMENTS, 0, 100, 2)
            assert sum(CALLS.values()) == calls + 10

            # Cancel: the run ends now and its outstanding leaves are cancelled.
            second = await app.start_sweep("reindex-documents", {"pass": 2})
            await wait_for(app, second.run_id, lambda r: r.completed >= 100)
            cancelled = await app.cancel_sweep(second.run_id)
            assert cancelled is not None
            assert cancelled.state is sweepq.SweepState.CANCELLED
            assert cancelled.completed + cancelled.failed + cancelled.cancelled == (
                cancelled.enqueued
            )
            worker.stop()

        # Later, another worker: resuming the cancelled run runs its cancelled items again and
        # walks on from its cursor; the items it had completed do not run again.
        again = await app.resume_sweep(second.run_id)
        assert again is not None
        assert (again.state, again.cursor) == (sweepq.SweepState.RUNNING, cancelled.cursor)
        async with sweepq.Worker(app, concurrency=20) as worker, asyncio.TaskGroup() as tg:
            tg.create_task(worker.run())
            second_run = await wait_for(app, second.run_id, lambda r: r.ended)
            worker.stop()
        assert second_run.state is sweepq.SweepState.COMPLETED
        assert (second_run.completed, second_run.ends) == (DOCUMENTS, 2)

        print(f"run {run.id}: {run.completed} indexed after retrying {len(failures)} failed")
        print(f"run {second_run.id}: cancelled at {cancelled.enqueued} items, resumed, completed")


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
