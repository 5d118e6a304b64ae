"""A worker process for the runtime tests: `python runtime_proc.py DSN SCHEMA [GRACE]`.

Prints `ready <worker id>` once running; SIGTERM/SIGINT stop it gracefully (a second one at
once). Its `slow` task sleeps for a minute, so a stop during it must hand the job back.
"""

from __future__ import annotations

import signal
import sys

import anyio

import sweepq


def build(dsn: str, schema: str) -> sweepq.App:
    app = sweepq.App(dsn, schema=schema)

    @app.task(name="slow")
    async def slow(ctx: sweepq.Context) -> None:
        await anyio.sleep(60)

    @app.task(name="noop")
    async def noop(ctx: sweepq.Context) -> None:
        return None

    return app


async def main(dsn: str, schema: str, grace: float) -> None:
    app = build(dsn, schema)
    async with (
        app,
        sweepq.Worker(
            app,
            concurrency=4,
            lease_seconds=1.5,
            heartbeat_seconds=0.3,
            poll_seconds=0.2,
            grace_seconds=grace,
            maintenance_seconds=0.2,
            leader_ttl_seconds=1.0,
        ) as worker,
    ):
        print("ready", worker.id, flush=True)
        async with anyio.create_task_group() as tg:

            async def on_signals() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for _ in signals:
                        worker.stop()

            tg.start_soon(on_signals)
            await worker.run()
            tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 0.5)
