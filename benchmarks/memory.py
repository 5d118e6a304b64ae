"""Worker memory: resident set size with 100 slots busy.

A worker with 100 slots drains 1,000 jobs that each sleep 0.5 s (`--quick`: 300 jobs), so all
100 slots stay busy for about 5 s. VmRSS of this process (from /proc/self/status) is read before
the worker starts, sampled every 50 ms while it runs (the peak is kept), and read after it
stopped; VmHWM is the kernel's high-water mark for the whole process lifetime.

    .venv/bin/python benchmarks/memory.py [--quick]
"""

from __future__ import annotations

import argparse
import gc

import anyio
from _common import Stopwatch, bench_app, parse_args, print_environment, table, vm_kib

import sweepq

TASK = "bench.sleep"
SLOTS = 100
SLEEP = 0.5


async def main(args: argparse.Namespace) -> None:
    jobs = 300 if args.quick else 1_000
    await print_environment(f"memory: {SLOTS} slots busy with jobs that sleep {SLEEP:g} s")
    busy_peak = 0
    samples: list[int] = []
    async with bench_app("memory") as app:

        async def sleep(ctx: sweepq.Context, n: int) -> None:
            nonlocal busy_peak
            running.add(n)
            busy_peak = max(busy_peak, len(running))
            try:
                await anyio.sleep(SLEEP)
            finally:
                running.discard(n)

        running: set[int] = set()
        app.task(name=TASK)(sleep)
        await app.enqueue_many([sweepq.JobSpec(TASK, {"n": n}) for n in range(jobs)])
        gc.collect()
        before = vm_kib()

        async def sample() -> None:
            while True:
                samples.append(vm_kib())
                await anyio.sleep(0.05)

        async with sweepq.Worker(app, concurrency=SLOTS) as worker:
            entered = vm_kib()
            async with anyio.create_task_group() as tg:
                tg.start_soon(sample)
                with Stopwatch() as sw:
                    done = await worker.run_until_idle()
                tg.cancel_scope.cancel()
        gc.collect()
        after = vm_kib()
    peak = max(samples)
    per_slot = (peak - entered) / SLOTS
    table(
        f"worker RSS (KiB), {done:,} jobs in {sw.wall:.1f} s, at most {busy_peak} running at once",
        ["figure", "KiB", "MiB"],
        [
            ["before the worker (app open, jobs enqueued)", before, before / 1024],
            ["worker entered (its pool open), idle", entered, entered / 1024],
            [f"peak while {SLOTS} slots busy (sampled)", peak, peak / 1024],
            ["after the worker stopped", after, after / 1024],
            ["peak - before", peak - before, (peak - before) / 1024],
            ["per busy slot: (peak - entered) / slots", per_slot, per_slot / 1024],
            ["VmHWM (process high-water mark)", vm_kib("VmHWM"), vm_kib("VmHWM") / 1024],
        ],
    )  # fmt: skip


if __name__ == "__main__":
    anyio.run(main, parse_args(__doc__ or ""))
