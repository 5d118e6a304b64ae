"""A worker process for the concurrency-admission soak (test_fault_admission.py):
`python admission_worker_proc.py DSN SCHEMA`.

It prints `ready <worker id>` once its worker runs, then `executed <n>` every half second (the
executions its handlers started so far), and works until it is killed, or until SIGTERM, which
stops the worker (running jobs finish within the grace period) and exits 0.

Its one task, `admission.work`, is the soak's mix of executions: it may first wait for a grant of
the shared rate limit (blocking, its slot held), then sleeps a few milliseconds, then ends as its
arguments say: success, a failure (retried after a short backoff until its attempts run out), a
snooze, or a `RetryAfter` that charges no attempt. The worker uses short leases, prunes its
history every second and keeps nothing finished longer than a second, as the soak needs.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
from datetime import timedelta
from typing import Any

import anyio

import sweepq

SLOTS = 20
QUEUES = ("default", "bulk")
TASK = "admission.work"
MAX_ATTEMPTS = 3
RATE_KEY = "admission.api"
# SWEEPQ_SOAK_RATE: grants per second of the shared rate limit (the lower, the longer jobs wait).
RATE_PER_SECOND = float(os.environ.get("SWEEPQ_SOAK_RATE", "40"))
WORKER_OPTIONS: dict[str, Any] = {
    "queues": QUEUES,
    "concurrency": SLOTS,
    "lease_seconds": 1.0,
    "heartbeat_seconds": 0.3,
    "poll_seconds": 0.1,
    "maintenance_seconds": 0.2,
    "leader_ttl_seconds": 1.0,
    "grace_seconds": 2.0,
    # SWEEPQ_SOAK_PRUNE_EVERY / SWEEPQ_SOAK_PRUNE_OLDER_THAN (seconds): the history the jobs
    # table keeps, and so the sizes its plans are chosen for.
    "prune_every": timedelta(seconds=float(os.environ.get("SWEEPQ_SOAK_PRUNE_EVERY", "1"))),
    "prune_older_than": timedelta(
        seconds=float(os.environ.get("SWEEPQ_SOAK_PRUNE_OLDER_THAN", "1"))
    ),
}


REPORT_SECONDS = 0.5
executed = 0


class Failed(Exception):
    """What a job told to fail raises."""


def register(app: sweepq.App) -> sweepq.Task:
    @app.task(
        name=TASK,
        max_attempts=MAX_ATTEMPTS,
        retry=sweepq.RetryPolicy(backoff=lambda attempt, error: random.uniform(0.05, 0.3)),
    )
    async def work(ctx: sweepq.Context, ms: int, end: str, rate: bool) -> None:
        global executed
        executed += 1
        if rate:
            await ctx.rate_limit(RATE_KEY, per_second=RATE_PER_SECOND)
        await anyio.sleep(ms / 1000)
        if end == "fail":
            raise Failed(f"job {ctx.job_id} fails attempt {ctx.attempt}")
        if end == "snooze" and ctx.snoozes < 2:
            raise sweepq.Snooze(random.uniform(0.0, 0.2))
        if end == "later" and ctx.snoozes < 2:
            raise sweepq.RetryAfter(random.uniform(0.0, 0.2), consume_budget=False)

    return work


async def main(dsn: str, schema: str) -> None:
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    app = sweepq.App(dsn, schema=schema, pool_max_size=8)
    register(app)
    async with (
        app,
        sweepq.Worker(app, **WORKER_OPTIONS) as worker,
        anyio.create_task_group() as tg,
    ):

        async def stop_on_sigterm() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    worker.stop()

        async def report() -> None:
            while True:
                await anyio.sleep(REPORT_SECONDS)
                print("executed", executed, flush=True)

        tg.start_soon(stop_on_sigterm)
        print("ready", worker.id, flush=True)
        tg.start_soon(report)
        await worker.run()
        tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
