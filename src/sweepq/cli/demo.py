"""`sweepq demo`: a real walk over a table of tens of thousands of rows, with the live view."""

from __future__ import annotations

import time
from typing import Annotated

import anyio
import msgspec
import typer
from rich.console import Console

from sweepq.core.errors import SweepqError
from sweepq.core.worker import Worker

from .common import CommandError, fail, live, run, stdout
from .demo_app import DEMO_QUEUE, DEMO_SWEEP, DEMO_TABLE, DemoQueries, build_demo_app
from .sweep import watch_runs

DEMO_SCHEMA = "sweepq_demo"


class DemoSummary(msgspec.Struct, frozen=True, kw_only=True):
    rows: int  # items the run finished (completed or failed)
    seconds: float  # from the run's start to its end, by the database clock
    failures: int
    checked: int  # rows of the table that carry a checksum afterwards
    state: str

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
            help="Run on this PostgreSQL (default: start the embedded one).",
        ),
    ] = None,
    schema: Annotated[
        str,
        typer.Option(
            "--schema",
            help="The demo's own schema, dropped and built again on each run (its table and "
            "sweepq's); a schema without the demo's table is refused.",
        ),
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
        if summary.state != "completed":
            console.print(f"the run ended {summary.state}", style="red")
        if summary.checked != rows:
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
    """Fill the demo table, then walk it with a sweep and an in-process worker, shown live."""
    app = build_demo_app(dsn, schema, pool_max_size=concurrency + 2)
    queries = DemoQueries(schema)
    async with app:
        # A clean slate each time: the demo's schema (its table, sweepq's tables, earlier runs)
        # is dropped and built again, and only ever a schema that holds the demo's table.
        exists, is_demo = await queries.demo_schema_state(app.pool)
        if exists and not is_demo:
            raise CommandError(
                f"schema {schema!r} exists and is not a demo schema (it has no {DEMO_TABLE} "
                "table); the demo drops its schema on start, so pick another --schema"
            )
        await queries.demo_schema_drop(app.pool)
        await app.migrate()
        filled = time.perf_counter()
        await queries.demo_table_create(app.pool)
        await queries.demo_rows_fill(app.pool, rows)
        await queries.demo_table_analyze(app.pool)
        console.print(
            f"table {schema}.{DEMO_TABLE}: {rows:,} rows in {time.perf_counter() - filled:.1f} s"
        )
        async with (
            Worker(app, queues=[DEMO_QUEUE], concurrency=concurrency, poll_seconds=0.2) as worker,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(worker.run)
            started = await app.start_sweep(DEMO_SWEEP)
            console.print(
                f"sweep {DEMO_SWEEP!r}: run {started.run_id}, a worker of {concurrency} slots "
                "in this process"
            )
            with live(console) as show:
                ended = await watch_runs(app, started.run_id, show)
            worker.stop()
        _, checked = await queries.demo_rows_checked(app.pool)
    final = ended[0]
    return DemoSummary(
        rows=final.completed + final.failed,
        seconds=final.elapsed_seconds,
        failures=final.failed,
        checked=checked,
        state=str(final.state),
    )
