"""`sweepq demo`: a real walk over a table of tens of thousands of rows, with the live view."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Annotated

import anyio
import msgspec
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sweepq.core.admin import doctor_job_states
from sweepq.core.enqueue import JobSpec
from sweepq.core.errors import SweepqError
from sweepq.core.jobs import JobState
from sweepq.core.worker import Worker

from .common import fail, live, run, stdout
from .demo_app import DEMO_QUEUE, DEMO_TASK, DemoQueries, build_demo_app

DEMO_SCHEMA = "sweepq_demo"


class DemoSummary(msgspec.Struct, frozen=True):
    rows: int
    seconds: float
    failures: int
    checked: int

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return (
            f"demo: {self.rows:,} rows in {self.seconds:.1f} s, {self.rate:,.0f} items/s, "
            f"{self.failures:,} failures"
        )


def demo(
    dsn: Annotated[
        str | None,
        typer.Option(
            "--dsn",
            show_default=False,
            help="Run on this PostgreSQL [default: start the embedded one].",
        ),
    ] = None,
    schema: Annotated[
        str, typer.Option("--schema", help="The demo's schema (its table and sweepq's).")
    ] = DEMO_SCHEMA,
    rows: Annotated[int, typer.Option("--rows", min=1, help="Rows in the demo table.")] = 50_000,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="The in-process worker's slots.")
    ] = 20,
) -> None:
    """Walk a demo table of --rows rows with a worker in this process, and show it live.

    Without --dsn it starts the embedded PostgreSQL (the `embedded` extra), keeping its data
    under /var/tmp/sweepq/demo (or $SWEEPQ_DATA_DIR), and stops it on exit.
    """
    console = stdout()

    async def go(url: str) -> None:
        summary = await run_demo(
            url, schema=schema, rows=rows, concurrency=concurrency, console=console
        )
        console.print(summary.line(), style="bold")
        if summary.checked != summary.rows:
            console.print(
                f"only {summary.checked:,} of {summary.rows:,} rows were checked", style="red"
            )

    if dsn:
        run(lambda: go(dsn))
        return
    from sweepq.embedded import data_root, embedded_postgres

    console.print(f"starting the embedded PostgreSQL (data under {data_root() / 'demo'}) ...")
    started = time.perf_counter()
    try:
        # KeyboardInterrupt passes through the context manager, which stops the server.
        with embedded_postgres("demo") as url:
            console.print(f"embedded PostgreSQL ready in {time.perf_counter() - started:.1f} s")
            run(lambda: go(url))
    except SweepqError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        console.print("interrupted; the embedded PostgreSQL was stopped")
        raise typer.Exit(130) from None


async def run_demo(
    dsn: str, *, schema: str, rows: int, concurrency: int, console: Console
) -> DemoSummary:
    """Fill the demo table, walk it with an in-process worker while showing progress."""
    app = build_demo_app(dsn, schema, pool_max_size=concurrency + 2)
    queries = DemoQueries(schema)
    async with app:
        await app.migrate()
        await app.prune(older_than=timedelta(0))  # earlier demo runs' jobs
        filled = time.perf_counter()
        await queries.demo_table_reset(app.pool)
        await queries.demo_rows_fill(app.pool, rows)
        await queries.demo_table_analyze(app.pool)
        console.print(
            f"table {schema}.demo_rows: {rows:,} rows in {time.perf_counter() - filled:.1f} s"
        )
        started = time.perf_counter()
        progress = Progress(
            TextColumn("checksum rows"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console,
        )  # fmt: skip
        bar = progress.add_task("rows", total=rows)
        async with Worker(
            app, queues=[DEMO_QUEUE], concurrency=concurrency, poll_seconds=0.2
        ) as worker:
            for start in range(1, rows + 1, 5_000):
                await app.enqueue_many(
                    [
                        JobSpec(DEMO_TASK, {"row_id": i})
                        for i in range(start, min(start + 5_000, rows + 1))
                    ]
                )
            with live(console, progress):
                async with anyio.create_task_group() as tg:

                    async def watch() -> None:
                        while True:
                            states = await doctor_job_states(app.queries, app.pool)
                            done = sum(s.jobs for s in states if s.state.terminal)
                            progress.update(bar, completed=done)
                            await anyio.sleep(0.25)

                    tg.start_soon(watch)
                    await worker.run_until_idle()
                    tg.cancel_scope.cancel()
                progress.update(bar, completed=rows)
        seconds = time.perf_counter() - started
        states = await doctor_job_states(app.queries, app.pool)
        failures = sum(s.jobs for s in states if s.state is JobState.FAILED)
        _, checked = await queries.demo_rows_checked(app.pool)
    return DemoSummary(rows=rows, seconds=seconds, failures=failures, checked=checked)
