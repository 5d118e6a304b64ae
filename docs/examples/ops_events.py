"""Observers: a function of one event, told of every execution and of every sweep run's end."""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter

import sweepq
from sweepq.events import Event, JobClaimed, JobFinished


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)

    @app.task(name="ping_partner", queue="partners", max_attempts=1)
    async def ping_partner(ctx: sweepq.Context, partner: str) -> None:
        if partner == "globex":
            raise TimeoutError("globex did not answer in 5 s")

    outcomes: Counter[str] = Counter()
    waited: list[float] = []

    @app.observe  # runs in the worker's event loop, in line with the work: count and return
    def record(event: Event) -> None:
        if isinstance(event, JobClaimed):
            waited.append(event.waited)  # seconds from due to claim
        elif isinstance(event, JobFinished) and event.task == "ping_partner":
            outcomes[event.outcome] += 1
            if event.error:
                print(f"job {event.job_id} {event.outcome} ({event.failure_reason}): {event.error}")

    async with app:
        await app.migrate()
        partners = ["acme", "globex", "initech"]
        await app.enqueue_many([sweepq.JobSpec(ping_partner, {"partner": p}) for p in partners])
        async with sweepq.Worker(app, queues=["partners"]) as worker:
            await worker.run_until_idle()

    # Three executions, each heard when its outcome was decided; globex's failed for good.
    assert outcomes == {"completed": 2, "failed": 1}
    assert len(waited) == 3
    assert all(0 <= w < 60 for w in waited)
    app.unobserve(record)


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
