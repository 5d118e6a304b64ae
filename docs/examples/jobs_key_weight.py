"""Weights: a key of weight 3 gets three turns for one of a key of weight 1."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections import Counter

import sweepq


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    started: list[str] = []

    @app.task(name="render_report")
    async def render_report(ctx: sweepq.Context, tenant: str) -> None:
        started.append(tenant)

    async with app:
        await app.migrate()
        run = uuid.uuid4().hex[:8]  # keys of this run of the example
        paid, free = f"paid-{run}", f"free-{run}"
        # A paid tenant's key takes three turns in a row; no limit on how many run at once.
        await app.set_concurrency_limit(paid, None, weight=3)
        await app.enqueue_many(
            [
                sweepq.JobSpec(render_report, {"tenant": key}, concurrency_key=key)
                for key in (free, paid)
                for _ in range(40)
            ]
        )
        # Five slots: each claim takes up to five jobs of one key, and keys take turns.
        async with sweepq.Worker(app, queues=["default"], concurrency=5) as worker:
            await worker.run_until_idle()
        first = Counter(started[:40])
        assert first[paid] >= 24, first  # about three quarters of the first forty starts
        assert Counter(started) == {paid: 40, free: 40}


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
