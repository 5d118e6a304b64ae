"""Enqueue-to-start latency of an idle worker.

A worker runs in this process with nothing to do; one job is enqueued, and the time from just
before the `enqueue` call to the first line of the handler is recorded; then a short random gap
(10-50 ms) and the next job, 200 times (`--quick`: 20). Printed: p50, p90, p99 and max in ms.

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
    async with bench_app("latency") as app:

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
                before = time.perf_counter()
                await app.enqueue(TASK, {"n": n})
                enqueue_calls.append((time.perf_counter() - before) * 1e3)
                with anyio.fail_after(30):
                    await arrived[n].wait()
                latencies.append((started[n] - before) * 1e3)
                await anyio.sleep(random.uniform(0.01, 0.05))
            tg.cancel_scope.cancel()
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


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--poll-seconds", type=float, default=None, help="the worker's poll interval"
    )
    parser.add_argument(
        "--poll-only", action="store_true", help="Worker(listen=False): no NOTIFY wake-ups"
    )


if __name__ == "__main__":
    anyio.run(main, parse_args(__doc__ or "", options))
