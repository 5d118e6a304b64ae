"""The failure budget: a dependency breaks half-way, the walk stops instead of failing every
item after it, and one command goes on from there once it is fixed."""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

import sweepq

PAYOUTS = 2_000
BANK = {"calls": 0, "fixed": False}  # the bank's API goes down after its 600th call
PAID: Counter[int] = Counter()  # payouts the bank accepted, per payout


async def wait_for(
    app: sweepq.App, run_id: int, condition: Callable[[sweepq.SweepRun], bool]
) -> sweepq.SweepRun:
    async with asyncio.timeout(60):
        while True:
            run = await app.sweep_status(run_id)
            assert run is not None
            if condition(run):
                return run
            await asyncio.sleep(0.02)


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    BANK.update(calls=0, fixed=False)
    PAID.clear()

    @app.register_sweep
    class SendPayouts(sweepq.TableSweep):
        name = "send-payouts"
        table = f"{schema}.payouts"
        key: ClassVar[tuple[str, ...]] = ("id",)
        page_size = 50
        window = 200
        # The defaults, spelled out: the walk stops once more than 20 % of the recent items
        # failed, measured over the last 200 finished items at least.
        max_failure_rate = 0.2
        failure_sample = 200
        # An item counts as failed once its last attempt failed; one attempt keeps this quick.
        max_attempts = 1

        async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
            BANK["calls"] += 1
            call = BANK["calls"]
            await asyncio.sleep(0.005)
            if call > 600 and not BANK["fixed"]:
                raise ConnectionError("bank API unavailable: 503 Service Unavailable")
            PAID[item["id"]] += 1

    async with app:
        await app.migrate()
        await app.pool.execute(
            f"""CREATE TABLE IF NOT EXISTS "{schema}".payouts (
                    id bigint PRIMARY KEY, cents bigint NOT NULL);
                INSERT INTO "{schema}".payouts
                SELECT i, i * 100 FROM generate_series(1, {PAYOUTS}) AS i
                ON CONFLICT (id) DO NOTHING"""
        )
        async with sweepq.Worker(app, concurrency=20) as worker, asyncio.TaskGroup() as tg:
            tg.create_task(worker.run())
            started = await app.start_sweep("send-payouts")
            stopped = await wait_for(app, started.run_id, lambda r: r.ended)

            # The bank went down: the budget stopped the walk long before the end, and the
            # items in flight were cancelled rather than sent to a bank that refuses them all.
            assert (stopped.state, stopped.walked) == (sweepq.SweepState.FAILED, False)
            assert stopped.completed == 600
            assert stopped.enqueued < PAYOUTS
            assert stopped.failure is not None
            assert "finished items failed" in stopped.failure
            assert "over max_failure_rate=0.2" in stopped.failure
            assert stopped.failure.endswith(
                "the failed and cancelled items again and walks on from there"
            )
            undone = await app.sweep_failures(stopped.id, limit=PAYOUTS)
            assert {f.state for f in undone} <= {"failed", "cancelled"}
            assert len(undone) == stopped.failed + stopped.cancelled

            # Once the bank is back: resume. The failed and cancelled items run again, then
            # the walk goes on from its cursor, with a fresh budget. No payout that went
            # through is sent again.
            BANK["fixed"] = True
            resumed = await app.resume_sweep(stopped.id)
            assert resumed is not None
            assert (resumed.state, resumed.cursor) == (sweepq.SweepState.RUNNING, stopped.cursor)
            run = await wait_for(app, stopped.id, lambda r: r.ended)
            worker.stop()

        assert (run.state, run.walked, run.ends) == (sweepq.SweepState.COMPLETED, True, 2)
        assert (run.enqueued, run.completed, run.failed, run.cancelled) == (PAYOUTS, PAYOUTS, 0, 0)
        assert sorted(PAID) == list(range(1, PAYOUTS + 1))
        assert set(PAID.values()) == {1}  # every payout sent exactly once
        print(f"run {run.id}: stopped at {stopped.enqueued} payouts ({stopped.failure})")
        print(f"run {run.id}: resumed, {run.completed} payouts sent, each once")


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
