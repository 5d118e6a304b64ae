"""What observers cost: one worker draining no-op jobs with no observer, with one that counts
events, and with the OpenTelemetry observer (if the `otel` extra is installed), in interleaved
rounds so that the machine's drift falls on every variant alike.

    .venv/bin/python benchmarks/observers.py [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from collections.abc import Callable

from _common import Stopwatch, bench_app, parse_args, print_environment, table

import sweepq
from sweepq.events import Event

TASK = "bench.noop"
CONCURRENCY = 20


def counting() -> Callable[[Event], None]:
    seen: Counter[str] = Counter()

    def observe(event: Event) -> None:
        seen[type(event).__name__] += 1

    return observe


def otel() -> Callable[[Event], None] | None:
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.trace import TracerProvider

        from sweepq.contrib.otel import OtelObserver
    except ImportError:
        return None
    return OtelObserver(tracer_provider=TracerProvider(), meter_provider=MeterProvider())


async def drain(app: sweepq.App, jobs: int, observer: Callable[[Event], None] | None) -> float:
    await app.enqueue_many([sweepq.JobSpec(TASK) for _ in range(jobs)])
    if observer is not None:
        app.observe(observer)
    try:
        async with sweepq.Worker(app, concurrency=CONCURRENCY) as worker:
            with Stopwatch() as sw:
                done = await worker.run_until_idle()
    finally:
        if observer is not None:
            app.unobserve(observer)
    assert done == jobs, (done, jobs)
    return done / sw.wall


async def main(args: argparse.Namespace) -> None:
    await print_environment("observers: throughput with and without them")
    jobs = 2_000 if args.quick else 10_000
    variants: dict[str, Callable[[], Callable[[Event], None] | None]] = {
        "none": lambda: None,
        "counting observer": counting,
    }
    if otel() is not None:
        variants["OpenTelemetry observer"] = otel
    rates: dict[str, list[float]] = {name: [] for name in variants}
    async with bench_app("observers") as app:

        async def noop(ctx: sweepq.Context) -> None:
            return None

        app.task(name=TASK)(noop)
        for _ in range(args.rounds):
            for name, make in variants.items():
                rates[name].append(await drain(app, jobs, make()))
    base = statistics.median(rates["none"])
    table(
        f"{jobs:,} no-op jobs, {CONCURRENCY} slots, median of {args.rounds} interleaved rounds",
        ["observers", "jobs/s (median)", "min", "max", "ratio to none"],
        [
            [name, statistics.median(r), min(r), max(r), statistics.median(r) / base]
            for name, r in rates.items()
        ],
    )


if __name__ == "__main__":
    import anyio

    def extra(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")

    anyio.run(main, parse_args(__doc__ or "", extra))
