"""What closing groups costs: the jobs table's trigger on every enqueue, and the worker's firing.

Enqueue, with the trigger and without it (the same schema, the trigger disabled for the runs
without), in interleaved rounds: `enqueue_many` of 10,000 jobs of one group by COPY in batches
of 500; the same without a group (the trigger still captures the statement's rows); 2,000
sequential `enqueue` calls into one group; the same without a group.

The worker: 10,000 no-op jobs drained by one worker (20 slots) without a group, in one open
group, and in one group closed before the drain (every recorded batch then names the group, and
the worker runs the firing step for it: a read of whether the group has ended, and only once it
has, a lock of its row and a count), in interleaved rounds.

    .venv/bin/python benchmarks/group_close.py [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Awaitable, Callable

import anyio
from _common import Stopwatch, bench_app, count_queries, parse_args, print_environment, table

import sweepq

TASK = "bench.noop"
Measure = Callable[[], Awaitable[float]]


async def noop(ctx: sweepq.Context, n: int) -> None:
    return None


async def trigger(app: sweepq.App, enabled: bool) -> None:
    verb = "ENABLE" if enabled else "DISABLE"
    await app.pool.execute(f'ALTER TABLE "{app.schema}".jobs {verb} TRIGGER jobs_group_admit')


async def empty(app: sweepq.App) -> None:
    await app.pool.execute(f'TRUNCATE "{app.schema}".jobs, "{app.schema}".job_groups')


async def bulk(app: sweepq.App, total: int, batch: int, group: str | None) -> float:
    """jobs/s of `enqueue_many` by `batch` (plain jobs: the COPY path)."""
    await empty(app)
    with Stopwatch() as sw:
        for start in range(0, total, batch):
            size = min(batch, total - start)
            await app.enqueue_many(
                [sweepq.JobSpec(TASK, {"n": i}, group=group) for i in range(size)]
            )
    return total / sw.wall


async def single(app: sweepq.App, total: int, group: str | None) -> float:
    """jobs/s of sequential `enqueue` calls."""
    await empty(app)
    with Stopwatch() as sw:
        for n in range(total):
            await app.enqueue(TASK, {"n": n}, group=group)
    return total / sw.wall


async def drain(app: sweepq.App, total: int, kind: str) -> tuple[float, tuple[int, int]]:
    """jobs/s of one worker draining `total` jobs, and the firing steps it ran: reads of whether
    the group ended, and locks of its row (only once it had)."""
    await empty(app)
    group = None if kind == "no group" else "batch"
    for start in range(0, total, 5_000):
        size = min(5_000, total - start)
        await app.enqueue_many([sweepq.JobSpec(TASK, {"n": i}, group=group) for i in range(size)])
    if kind == "closed group":
        await app.close_group("batch", then=sweepq.JobSpec(TASK, {"n": -1}, queue="elsewhere"))
    await app.pool.execute(f'VACUUM ANALYZE "{app.schema}".jobs')
    calls = count_queries(app.queries)
    async with sweepq.Worker(app, concurrency=20, listen=False, prune_every=None) as worker:
        with Stopwatch() as sw:
            done = await worker.run_until_idle()
    for name in [n for n in vars(app.queries) if n.startswith(("job_", "concurrency_key_"))]:
        delattr(app.queries, name)  # the counting wrappers go: the class's methods are back
    return done / sw.wall, (calls["job_group_ended"], calls["job_group_lock_sealed"])


async def rounds_of(
    rounds: int, variants: dict[str, Callable[[], Awaitable[float]]]
) -> dict[str, list[float]]:
    """Each variant once per round, in the same order every round."""
    found: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            found[name].append(await run())
    return found


async def main(args: argparse.Namespace) -> None:
    copies, singles, drained = (2_000, 400, 2_000) if args.quick else (10_000, 2_000, 10_000)
    await print_environment("group_close: the jobs table's trigger, and firing closed groups")
    async with bench_app("group_close") as app:
        app.task(name=TASK)(noop)

        def with_trigger(
            enabled: bool, run: Callable[[], Awaitable[float]]
        ) -> Callable[[], Awaitable[float]]:
            async def measured() -> float:
                await trigger(app, enabled)
                try:
                    return await run()
                finally:
                    await trigger(app, True)

            return measured

        cases = {
            f"enqueue_many by 500, COPY, one group ({copies:,} jobs)": lambda: bulk(
                app, copies, 500, "g"
            ),
            f"enqueue_many by 500, COPY, no group ({copies:,} jobs)": lambda: bulk(
                app, copies, 500, None
            ),
            f"enqueue, one group ({singles:,} jobs)": lambda: single(app, singles, "g"),
            f"enqueue, no group ({singles:,} jobs)": lambda: single(app, singles, None),
        }
        variants: dict[str, Callable[[], Awaitable[float]]] = {}
        for name, run in cases.items():
            variants[f"{name}|with"] = with_trigger(True, run)
            variants[f"{name}|without"] = with_trigger(False, run)
        enqueued = await rounds_of(args.rounds, variants)

        fired: dict[str, list[tuple[int, int]]] = {}

        def drainer(kind: str) -> Callable[[], Awaitable[float]]:
            async def run() -> float:
                rate, steps = await drain(app, drained, kind)
                fired.setdefault(kind, []).append(steps)
                return rate

            return run

        kinds = ["no group", "open group", "closed group"]
        worked = await rounds_of(args.rounds, {kind: drainer(kind) for kind in kinds})

    rows: list[list[object]] = []
    for name in cases:
        on = statistics.median(enqueued[f"{name}|with"])
        off = statistics.median(enqueued[f"{name}|without"])
        rows.append([name, on, off, f"{on / off:.3f}"])
    table(
        f"enqueue with and without the trigger, jobs/s (median of {args.rounds} rounds)",
        ["figure", "with the trigger", "without", "ratio"],
        rows,
    )
    base = statistics.median(worked["no group"])
    table(
        f"one worker (20 slots) draining {drained:,} no-op jobs, jobs/s (median of {args.rounds})",
        ["jobs", "jobs/s", "min", "max", "ratio to no group", "firing reads / locks per drain"],
        [
            [
                kind,
                statistics.median(worked[kind]),
                min(worked[kind]),
                max(worked[kind]),
                f"{statistics.median(worked[kind]) / base:.3f}",
                "{} / {}".format(*fired[kind][len(fired[kind]) // 2]),
            ]
            for kind in kinds
        ],
    )


def _extra(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per figure")


if __name__ == "__main__":
    anyio.run(main, parse_args(__doc__ or "", _extra))
