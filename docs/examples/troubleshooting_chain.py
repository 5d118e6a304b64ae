"""A chain of jobs, each enqueuing the next: the key that ends it at link one, and the one that
does not."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import sweepq

QUEUE = "chain-demo"  # a queue of its own: this worker runs only these jobs
LINKS = 5


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    ran: list[int] = []
    successors: list[sweepq.Enqueued] = []

    @app.task(name="walk_broken", queue=QUEUE)
    async def walk_broken(ctx: sweepq.Context, walk: str, position: int) -> None:
        ran.append(position)
        if position < LINKS:
            # WRONG: one identity for the whole walk. This job is the active job of that
            # identity until it returns, so its successor is deduplicated against it.
            successor = await ctx.app.enqueue(
                walk_broken, {"walk": walk, "position": position + 1}, identity_key=walk
            )
            assert successor == sweepq.Enqueued(ctx.job_id, "existing_active")  # itself
            successors.append(successor)

    @app.task(name="walk_fixed", queue=QUEUE)
    async def walk_fixed(ctx: sweepq.Context, walk: str, position: int) -> None:
        ran.append(position)
        if position < LINKS:
            # RIGHT: dedup by position. Only a second enqueue of the *same* link collides (this
            # link running again after a crash), never the successor with its running parent.
            await ctx.app.enqueue(
                walk_fixed,
                {"walk": walk, "position": position + 1},
                idempotency_key=f"{walk}:{position + 1}",
            )

    async with app:
        await app.migrate()
        async with sweepq.Worker(app, queues=[QUEUE]) as worker:
            walk = f"walk:{uuid.uuid4().hex}"  # in an application: what the walk is over
            await app.enqueue(walk_broken, {"walk": walk, "position": 1}, identity_key=walk)
            await worker.run_until_idle()
            assert ran == [1]  # the chain stopped at link one, and nothing failed
            assert [s.outcome for s in successors] == ["existing_active"]

            ran.clear()
            first = await app.enqueue(
                walk_fixed, {"walk": walk, "position": 1}, idempotency_key=f"{walk}:1"
            )
            await worker.run_until_idle()
            assert ran == [1, 2, 3, 4, 5]  # every link ran

            # The same link enqueued again (a retried request, a link run twice) makes nothing.
            again = await app.enqueue(
                walk_fixed, {"walk": walk, "position": 1}, idempotency_key=f"{walk}:1"
            )
            assert again == sweepq.Enqueued(first.job_id, "existing_terminal")


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
