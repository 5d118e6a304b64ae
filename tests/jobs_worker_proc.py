"""A worker process for tests that kill it: `python jobs_worker_proc.py DSN SCHEMA`.

It serves task `block`, whose handler never returns, with a short lease so that a killed
process's job lapses quickly.
"""

from __future__ import annotations

import sys

import anyio

import sweepq


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema, pool_max_size=2)

    @app.task(name="block")
    async def block(ctx: sweepq.Context) -> None:
        await anyio.sleep_forever()

    async with app:
        worker = sweepq.Worker(
            app, concurrency=1, lease_seconds=1.0, heartbeat_seconds=0.3, poll_seconds=0.1
        )
        async with worker:
            await worker.run()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
