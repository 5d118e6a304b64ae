"""Enqueue-to-start latency of an idle worker.

A worker runs in this process with nothing to do; one job is enqueued, and the time from just
before the `enqueue` call to the first line of the handler is recorded; then a short random gap
(10-50 ms) and the next job, 200 times (`--quick`: 20). Printed: p50, p90, p99 and max in ms,
and where the time goes: when the notification reached a listener in this process (relative to
the enqueue call's return), when the worker's claim started and ended, and the handler's start.

The worker is built with the public API only (`Worker(app, concurrency=..., poll_seconds=...)`);
`--poll-seconds` overrides the worker's default poll interval; `--poll-only` turns NOTIFY
wake-ups off (`listen=False`) to show what polling alone gives.

    .venv/bin/python benchmarks/latency.py [--quick] [--poll-seconds S] [--poll-only]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import anyio
import asyncpg
from _common import bench_app, parse_args, percentile, print_environment, table

import sweepq

TASK = "bench.mark"
CONCURRENCY = 10


async def main(args: argparse.Namespace) -> None:
    samples = 20 if args.quick else 200
    options: dict[str, Any] = {}
    if args.poll_seconds is not None:
        options["poll_seconds"] = args.poll_seconds
    if args.poll_only:
        options["listen"] = False
    await print_environment(f"latency: enqueue to handler start, idle worker, {samples} jobs")
    started: dict[int, float] = {}
    arrived: dict[int, anyio.Event] = {}
    latencies: list[float] = []
    enqueue_calls: list[float] = []
    heard: list[float] = []  # when each notification reached our own listener
    claims: list[tuple[float, float]] = []  # (start, end) of claims that returned jobs
    steps: dict[str, list[float]] = {
        "the notification, after the enqueue call returned": [],
        "from the notification to the claim's start": [],
        "the claim (a write: its commit waits for the WAL flush)": [],
        "from the claim's answer to the handler's first line": [],
    }
    async with bench_app("latency") as app:
        claim = app.queries.job_claim

        async def timed_claim(*a: Any, **k: Any) -> Any:
            start = time.perf_counter()
            batch = await claim(*a, **k)
            if batch.jobs:
                claims.append((start, time.perf_counter()))
            return batch

        app.queries.job_claim = timed_claim  # type: ignore[method-assign]
        listener = await asyncpg.connect(app.dsn)
        await listener.add_listener(
            app.queries.channel, lambda *_: heard.append(time.perf_counter())
        )

        async def mark(ctx: sweepq.Context, n: int) -> None:
            started[n] = time.perf_counter()
            arrived[n].set()

        app.task(name=TASK)(mark)
        worker = sweepq.Worker(app, concurrency=CONCURRENCY, **options)
        async with worker, anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            await anyio.sleep(0.5)  # past start-up: the worker is idle from here on
            for n in range(samples):
                arrived[n] = anyio.Event()
                heard.clear()
                claims.clear()
                before = time.perf_counter()
                await app.enqueue(TASK, {"n": n})
                returned = time.perf_counter()
                enqueue_calls.append((returned - before) * 1e3)
                with anyio.fail_after(30):
                    await arrived[n].wait()
                latencies.append((started[n] - before) * 1e3)
                if heard and len(claims) == 1:  # woken by this job's notification, one claim
                    (claim_start, claim_end), note = claims[0], heard[0]
                    for name, value in zip(steps, (
                        note - returned, claim_start - note, claim_end - claim_start,
                        started[n] - claim_end,
                    ), strict=True):  # fmt: skip
                        steps[name].append(value * 1e3)
                await anyio.sleep(random.uniform(0.01, 0.05))
            tg.cancel_scope.cancel()
        await listener.close()
    table(
        f"enqueue-to-start latency, ms (worker poll_seconds={worker.poll_seconds:g}"
        f"{', NOTIFY off' if args.poll_only else ''})",
        ["figure", "p50", "p90", "p99", "max", "mean"],
        [
            [
                "enqueue call to handler start",
                percentile(latencies, 50),
                percentile(latencies, 90),
                percentile(latencies, 99),
                max(latencies),
                statistics.fmean(latencies),
            ],
            [
                "the enqueue call alone",
                percentile(enqueue_calls, 50),
                percentile(enqueue_calls, 90),
                percentile(enqueue_calls, 99),
                max(enqueue_calls),
                statistics.fmean(enqueue_calls),
            ],
        ],
    )
    counted = len(next(iter(steps.values())))
    table(
        f"where the time goes, ms ({counted} of {samples} jobs: those woken by their own "
        "notification with one claim)",
        ["step", "p50", "p90", "mean"],
        [
            [name, percentile(values, 50), percentile(values, 90), statistics.fmean(values)]
            for name, values in steps.items()
            if values
        ],
    )


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--poll-seconds", type=float, default=None, help="the worker's poll interval"
    )
    parser.add_argument(
        "--poll-only", action="store_true", help="Worker(listen=False): no NOTIFY wake-ups"
    )


if __name__ == "__main__":
    anyio.run(main, parse_args(__doc__ or "", options))
