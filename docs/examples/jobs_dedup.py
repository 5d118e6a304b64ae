"""Dedup: idempotency keys (once, ever), identity keys (not twice at once), and batches."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta

import sweepq


class WarningsCollector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def sweepq_warnings() -> Iterator[list[str]]:
    """Collect the WARNINGs sweepq logs (to show the one a terminal dedup hit writes)."""
    collector = WarningsCollector()
    logger = logging.getLogger("sweepq")
    logger.addHandler(collector)
    try:
        yield collector.messages
    finally:
        logger.removeHandler(collector)


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)

    @app.task(name="charge_order")
    async def charge_order(ctx: sweepq.Context, order_id: str, cents: int) -> None:
        pass

    @app.task(name="rebuild_search_index")
    async def rebuild_search_index(ctx: sweepq.Context) -> None:
        pass

    order_id = uuid.uuid4().hex  # in an application: the order's primary key
    charge = {"order_id": order_id, "cents": 4_200}
    key = f"charge:{order_id}"

    async with app:
        await app.migrate()
        async with sweepq.Worker(app, queues=["default"], concurrency=4) as worker:
            # idempotency_key: at most one job per (idempotency_scope, key), ever (until pruned).
            first = await app.enqueue(charge_order, charge, idempotency_key=key)
            again = await app.enqueue(charge_order, charge, idempotency_key=key)
            assert first.outcome == "created"
            assert again == sweepq.Enqueued(first.job_id, "existing_active")  # same job, still due

            await worker.run_until_idle()

            # After the job finished, the key still dedups; the outcome says the job is terminal,
            # and a WARNING is logged: nothing will run for this enqueue.
            with sweepq_warnings() as warnings:
                late = await app.enqueue(charge_order, charge, idempotency_key=key)
            assert late == sweepq.Enqueued(first.job_id, "existing_terminal")
            assert any(f"terminal job {first.job_id} " in w for w in warnings)

            # The same key in another scope (here: another tenant's orders) is another job.
            other = await app.enqueue(
                charge_order, charge, idempotency_key=key, idempotency_scope="tenant-b"
            )
            assert other.outcome == "created"
            assert other.job_id != first.job_id

            # identity_key: "start if not already running". One active job per identity...
            rebuild = await app.enqueue(rebuild_search_index, identity_key="search-index")
            also = await app.enqueue(rebuild_search_index, identity_key="search-index")
            assert (rebuild.outcome, also.job_id) == ("created", rebuild.job_id)
            await worker.run_until_idle()
            # ...and once it finished, the next enqueue creates a new job.
            next_rebuild = await app.enqueue(rebuild_search_index, identity_key="search-index")
            assert next_rebuild.outcome == "created"
            assert next_rebuild.job_id != rebuild.job_id
            await worker.run_until_idle()

            # unique_for widens the identity to "no second job created within the window",
            # whatever the first one's state.
            throttled = await app.enqueue(
                rebuild_search_index,
                identity_key="search-index",
                unique_for=timedelta(minutes=10),
            )
            assert throttled == sweepq.Enqueued(next_rebuild.job_id, "existing_terminal")

            # enqueue_many: one round trip; results in input order; dedup applies between the
            # specs of one call too.
            a, b = uuid.uuid4().hex, uuid.uuid4().hex
            batch = await app.enqueue_many(
                [
                    sweepq.JobSpec(charge_order, {"order_id": a, "cents": 100}, idempotency_key=a),
                    sweepq.JobSpec(charge_order, {"order_id": a, "cents": 100}, idempotency_key=a),
                    sweepq.JobSpec(charge_order, {"order_id": b, "cents": 250}, idempotency_key=b),
                ]
            )
            assert [r.outcome for r in batch] == ["created", "existing_active", "created"]
            assert batch[0].job_id == batch[1].job_id
            await worker.run_until_idle()


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
