"""A TableSweep: declare the table, key and filter; start it once; watch its progress."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, ClassVar

import sweepq

INVOICES = 3_000


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)

    @app.register_sweep
    class RecomputeTotals(sweepq.TableSweep):
        name = "recompute-invoice-totals"
        table = f"{schema}.invoices"  # may be qualified; else found through the search_path
        # The key ends in a unique column (the primary key) and the handler never writes it.
        key: ClassVar[tuple[str, ...]] = ("issued_at", "id")
        # Pasted into the query as is: SQL written here, in code, never built from user input.
        where = "voided_at IS NULL"
        columns = ("subtotal_cents", "tax_cents")  # what each item carries besides the key
        page_size = 200
        window = 1_000

        async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
            # `item` is the row as JSON values: {"issued_at": "2024-...", "id": 7, ...}
            await ctx.app.pool.execute(
                f'UPDATE "{schema}".invoices SET total_cents = $2 WHERE id = $1',
                item["id"],
                item["subtotal_cents"] + item["tax_cents"],
            )

    async with app:
        await app.migrate()
        await app.pool.execute(
            f"""CREATE TABLE IF NOT EXISTS "{schema}".invoices (
                    id bigint PRIMARY KEY, issued_at timestamptz NOT NULL,
                    subtotal_cents bigint NOT NULL, tax_cents bigint NOT NULL,
                    total_cents bigint, voided_at timestamptz);
                INSERT INTO "{schema}".invoices
                    (id, issued_at, subtotal_cents, tax_cents, voided_at)
                SELECT i, timestamptz '2024-01-01' + (i / 3) * interval '1 hour', i * 100, i * 7,
                       CASE WHEN i % 10 = 0 THEN timestamptz '2024-06-01' END
                FROM generate_series(1, {INVOICES}) AS i
                ON CONFLICT (id) DO NOTHING;
                UPDATE "{schema}".invoices SET total_cents = NULL"""
        )

        # Single flight: a second start of the same sweep and params returns the active run.
        started = await app.start_sweep("recompute-invoice-totals", {"reason": "tax fix"})
        again = await app.start_sweep("recompute-invoice-totals", {"reason": "tax fix"})
        assert started.outcome == "started"
        assert again == sweepq.SweepStarted(started.run_id, "already_running")

        async with sweepq.Worker(app, concurrency=20) as worker, asyncio.TaskGroup() as tg:
            tg.create_task(worker.run())
            # Progress is one indexed read: no scan of the jobs, no hot row.
            while True:
                run = await app.sweep_status(started.run_id)
                assert run is not None
                # total is an estimate (total_is_estimate) until the last page is read; rate
                # and eta are None until a few seconds of work were seen.
                total = "?" if run.total is None else f"{run.total:,}"
                percent = "" if run.percent is None else f" {run.percent:.0f}%"
                rate = "?" if run.rate is None else f"{run.rate:,.0f}"
                eta = "?" if run.eta_seconds is None else f"{run.eta_seconds:.1f}s"
                print(
                    f"{run.state:<9} {run.completed:>5,}/{total}{percent} completed, "
                    f"{run.failed} failed, link {run.links + 1}, cursor {run.cursor}, "
                    f"{rate}/s, eta {eta}"
                )
                if run.ended:
                    break
                await asyncio.sleep(0.1)
            worker.stop()

        expected = INVOICES - INVOICES // 10
        assert run.state is sweepq.SweepState.COMPLETED
        assert (run.enqueued, run.completed, run.failed) == (expected, expected, 0)
        totals = await app.pool.fetchrow(
            f"""SELECT count(*) FILTER (WHERE total_cents = subtotal_cents + tax_cents),
                       count(*) FILTER (WHERE total_cents IS NULL)
                FROM "{schema}".invoices"""
        )
        assert totals is not None
        assert tuple(totals) == (expected, INVOICES // 10)  # voided invoices were left alone
        assert await app.list_sweep_runs(active_only=True) == []
        assert (await app.list_sweep_runs(limit=1))[0].id == run.id


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
