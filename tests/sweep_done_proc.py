"""A worker process for the on_complete tests (`python sweep_done_proc.py DSN SCHEMA`): it works
the `notify` sweep, whose on_complete records each call in `notified`, until it is killed.

It prints `ready <worker id>` once its worker runs; its lease is short (1 s) so that what it
held when killed is rescued quickly by the next worker.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

import sweepq
from sweep_worker_proc import WORKER_OPTIONS, ItemsSweep, items_sweep
from sweepq.core.ident import ident
from sweepq.sweeps.app import App


class Notifying(ItemsSweep):
    """ItemsSweep whose on_complete upserts (run, end) into `notified`, counting its calls."""

    async def on_complete(self, ctx: sweepq.Context, run: sweepq.SweepRun) -> None:
        assert self.app is not None
        await self.app.pool.execute(
            f"""INSERT INTO {ident(self.app.schema)}.notified AS n
                    (run_id, ends, state, completed, failed, cancelled, job_id)
                VALUES ($1, $2, $3, $4, $5, $6, $7)
                ON CONFLICT (run_id, ends) DO UPDATE SET calls = n.calls + 1""",
            run.id, run.ends, str(run.state), run.completed, run.failed, run.cancelled,
            ctx.job_id,
        )  # fmt: skip


def notify_sweep(schema: str, **settings: Any) -> type[Notifying]:
    """The sweep both the process and the tests register."""
    sweep = items_sweep(schema, page_size=10, window=20, **settings)
    return type("Notify", (Notifying, sweep), {})


NOTIFIED = """CREATE TABLE IF NOT EXISTS {schema}.notified (
    run_id bigint NOT NULL, ends integer NOT NULL, state text NOT NULL,
    completed bigint NOT NULL, failed bigint NOT NULL, cancelled bigint NOT NULL,
    job_id bigint NOT NULL, calls integer NOT NULL DEFAULT 1, PRIMARY KEY (run_id, ends))"""


async def main(dsn: str, schema: str) -> None:
    app = App(dsn, schema=schema)
    app.register_sweep(notify_sweep(schema))
    async with app, sweepq.Worker(app, concurrency=8, **WORKER_OPTIONS) as worker:
        print("ready", worker.id, flush=True)
        await worker.run()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
