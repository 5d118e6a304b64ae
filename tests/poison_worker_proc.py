"""A worker process for the tests of jobs that kill their worker:
`python poison_worker_proc.py DSN SCHEMA`.

It prints `ready <worker id>` once its worker runs (concurrency 4, a lease of 1 s, no
maintenance of its own: the test rescues), then works until it dies or gets SIGTERM.

- `poison.exit` records that it started (table `started`, created by the test), then ends its
  process with `os._exit`, a death no `except` can catch, as the OOM killer's or a segfault's;
- `bystander` sleeps `seconds` on its first attempt, then completes;
- `beside_poison` sleeps a minute on its first attempt (so that it runs when the worker dies);
  later attempts complete at once.
"""

from __future__ import annotations

import os
import signal
import sys

import anyio

import sweepq
from sweepq.core.ident import ident


def build(dsn: str, schema: str) -> sweepq.App:
    app = sweepq.App(dsn, schema=schema)
    table = f"{ident(schema)}.started"

    @app.task(name="poison.exit", max_attempts=5)
    async def poison(ctx: sweepq.Context) -> None:
        await ctx.app.pool.execute(f"INSERT INTO {table} (job_id) VALUES ($1)", ctx.job_id)
        await anyio.sleep(0.3)
        os._exit(17)

    @app.task(name="bystander", max_attempts=5)
    async def bystander(ctx: sweepq.Context, seconds: float) -> None:
        if ctx.attempt == 1:
            await anyio.sleep(seconds)

    @app.task(name="beside_poison", max_attempts=5)
    async def beside_poison(ctx: sweepq.Context) -> None:
        if ctx.attempt == 1:
            await anyio.sleep(60)

    return app


async def main(dsn: str, schema: str) -> None:
    app = build(dsn, schema)
    async with app:
        worker = sweepq.Worker(
            app,
            concurrency=4,
            lease_seconds=1.0,
            heartbeat_seconds=0.3,
            poll_seconds=0.05,
            maintenance_seconds=3_600,
            leader_ttl_seconds=7_200,
            prune_every=None,
        )
        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            async with worker, anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                print(f"ready {worker.id}", flush=True)
                async for _ in signals:
                    worker.stop()
                    break


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
