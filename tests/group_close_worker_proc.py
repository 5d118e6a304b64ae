"""A worker process for the kill test of closing groups (tests/test_groups.py):
`python group_close_worker_proc.py DSN SCHEMA QUEUE`.

It prints `ready <worker id>` once its worker runs, then works queue QUEUE until it is killed.
Task `closing.item` records each execution in `handled` (through the handler's own connection,
before it returns), so that the test knows how far the group has got; the `then` jobs of the
test go to a queue this worker does not serve. The test process holds the maintenance role for
the whole test, so that the round that catches what a killed worker left is the test's own.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import anyio

import sweepq
from sweepq.core.app import App as CoreApp
from sweepq.core.ident import ident

ITEM_TASK = "closing.item"
THEN_TASK = "closing.report"
WORKER_OPTIONS: dict[str, Any] = {
    "lease_seconds": 0.5,
    "heartbeat_seconds": 0.15,
    "poll_seconds": 0.02,
    "maintenance_seconds": 0.1,
    "leader_ttl_seconds": 0.3,
    "grace_seconds": 5.0,
    "prune_every": None,
}
CONCURRENCY = 4


def register(app: CoreApp) -> None:
    """The tasks of the test: its items, and the `then` of each group."""

    @app.task(name=ITEM_TASK, max_attempts=20)
    async def item(ctx: sweepq.Context, n: int) -> None:
        await anyio.sleep(0.01)
        await ctx.app.pool.execute(
            f"INSERT INTO {ident(ctx.app.schema)}.handled (job_id) VALUES ($1)", ctx.job_id
        )

    @app.task(name=THEN_TASK)
    async def report(ctx: sweepq.Context, rep: int) -> None:
        return None


async def main(dsn: str, schema: str, queue: str) -> None:
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    app = CoreApp(dsn, schema=schema, pool_max_size=CONCURRENCY + 2)
    register(app)
    async with (
        app,
        sweepq.Worker(app, queues=[queue], concurrency=CONCURRENCY, **WORKER_OPTIONS) as worker,
    ):
        print("ready", worker.id, flush=True)
        await worker.run()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3])
