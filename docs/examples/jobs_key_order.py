"""Ordered keys: one entity's jobs start one at a time, in enqueue order, a retry included."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import sweepq


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    applied: list[str] = []
    failures = {"credit 10": 1}  # the first attempt of this one fails, and is retried

    @app.task(name="apply_entry", retry=sweepq.RetryPolicy(backoff=sweepq.backoff.constant(0.1)))
    async def apply_entry(ctx: sweepq.Context, entry: str) -> None:
        if failures.get(entry, 0) > 0:
            failures[entry] -= 1
            raise RuntimeError("the ledger was busy")
        applied.append(entry)

    async with app:
        await app.migrate()
        # One ledger account: its entries must apply in the order they were enqueued (a new
        # key each run of this example).
        account = f"account-{uuid.uuid4().hex[:8]}"
        await app.set_concurrency_limit(account, 1, ordered=True)
        entries = ["open", "credit 10", "debit 4", "close"]
        await app.enqueue_many(
            [
                sweepq.JobSpec(apply_entry, {"entry": e}, concurrency_key=account, priority=p)
                # Priorities do not reorder an ordered key: enqueue order does.
                for e, p in zip(entries, (0, 0, 9, 9), strict=True)
            ]
        )
        async with sweepq.Worker(app, queues=["default"], concurrency=10) as worker:
            while len(applied) < len(entries):  # the retry is due 0.1 s after its failure
                await worker.run_until_idle()
                await asyncio.sleep(0.05)
        # "credit 10" failed once: its retry held "debit 4" and "close" back until it ended.
        assert applied == entries
        [key] = [k for k in await app.concurrency_keys() if k.key == account]
        assert (key.ordered, key.max_running, key.waiting) == (True, 1, 0)


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
