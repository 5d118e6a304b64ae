"""`sweepq demo`: a real walk over a table of tens of thousands of rows, with the live view."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Annotated

import anyio
import msgspec
import typer
from rich.console import Console

from sweepq.core.dsn import check_dsn, redact
from sweepq.core.errors import SweepqError
from sweepq.core.ident import ident
from sweepq.core.queries import Conn
from sweepq.core.units import format_bytes
from sweepq.core.worker import Worker
from sweepq.sweeps.app import App

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
    schema_bytes: int  # the demo schema's tables, indexes and TOAST at the end
    dropped: bool  # the demo schema was dropped at the end

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
            "sweepq's); a schema without the demo's table is refused. A second demo on the "
            "same schema waits for the first; give it another to run beside it.",
        ),
    ] = DEMO_SCHEMA,
    rows: Annotated[int, typer.Option("--rows", min=1, help="Rows in the demo table.")] = 50_000,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="The in-process worker's slots.")
    ] = 20,
    keep: Annotated[
        bool,
        typer.Option(
            "--keep",
            help="Keep the demo's data afterwards (the embedded server's folder; with --dsn, "
            "the demo schema) to look at it; by default it is removed on exit.",
        ),
    ] = False,
    clean: Annotated[
        bool,
        typer.Option("--clean", help="Only remove the data a demo run with --keep left, and exit."),
    ] = False,
) -> None:
    """Walk a demo table of --rows rows with a worker in this process, and show it live.

    Without --dsn it starts the embedded PostgreSQL (the `embedded` extra), with its data in
    /var/tmp/sweepq/demo (or under $SWEEPQ_DATA_DIR), and stops it on exit. Demos started at
    once share that server; one on a schema in use waits for the other to end.
    """
    console = stdout()
    try:
        ident(schema, what="--schema")
        dsn = dsn and check_dsn(dsn, "--dsn")
    except SweepqError as exc:
        fail(str(exc))
    if clean:
        _clean(dsn, schema, console)
        return
    if dsn:
        summary = run(lambda: _demo(dsn, schema, rows, concurrency, console, drop=not keep))
        where = f"schema {schema} on {redact(dsn)}, {format_bytes(summary.schema_bytes)}"
        if summary.dropped:
            console.print(f"data: {where}; dropped (pass --keep to keep it)")
        else:
            named = "" if schema == DEMO_SCHEMA else f" --schema {schema}"
            console.print(
                f"data: {where}; kept (remove it: sweepq demo --clean --dsn ...{named})",
                soft_wrap=True,
            )
        raise typer.Exit(_exit_code(summary, rows))
    from sweepq.embedded import data_root, embedded_server

    console.print(f"starting the embedded PostgreSQL (data in {data_root() / EMBEDDED}) ...")
    started = time.perf_counter()
    try:
        # KeyboardInterrupt passes through the context manager, which stops the server.
        with embedded_server(EMBEDDED, keep=keep) as server:
            console.print(f"embedded PostgreSQL ready in {time.perf_counter() - started:.1f} s")
            summary = run(lambda: _demo(server.url, schema, rows, concurrency, console, drop=False))
            size = server.size()
    except SweepqError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        console.print("interrupted; the embedded PostgreSQL was stopped")
        raise typer.Exit(130) from None
    where = f"data: {server.pgdata}, {format_bytes(size)}"
    if server.removed:
        console.print(f"{where}; removed (pass --keep to keep it)")
    elif keep:
        console.print(f"{where}; kept (remove it: sweepq demo --clean)")
    else:
        console.print(f"{where}; kept while another demo uses the server")
    raise typer.Exit(_exit_code(summary, rows))


def _exit_code(summary: DemoSummary, rows: int) -> int:
    """0 when the run completed and checked every row, else 1 (as `sweep status --watch`)."""
    return 0 if summary.state == "completed" and summary.checked == rows else 1


EMBEDDED = "demo"  # the embedded server's data folder under the data root


async def _demo(
    dsn: str, schema: str, rows: int, concurrency: int, console: Console, *, drop: bool
) -> DemoSummary:
    summary = await run_demo(
        dsn, schema=schema, rows=rows, concurrency=concurrency, console=console, drop=drop
    )
    console.print(summary.line(), style="bold")
    if summary.state != "completed":
        console.print(f"the run ended {summary.state}", style="red")
    if summary.checked != rows:
        console.print(
            f"only {summary.checked:,} of {summary.rows:,} rows were checked", style="red"
        )
    return summary


def _clean(dsn: str | None, schema: str, console: Console) -> None:
    """Remove what a demo run with --keep left: the embedded server's folder, or (with --dsn)
    the demo schema."""
    if dsn:
        dropped = run(lambda: clean_schema(dsn, schema))
        console.print(
            f"dropped schema {schema} ({format_bytes(dropped)})"
            if dropped is not None
            else f"no schema {schema}: nothing to remove"
        )
        return
    from sweepq.embedded import data_root, folder_size, remove_data

    folder = data_root() / EMBEDDED
    size = folder_size(folder)
    try:
        removed = remove_data(EMBEDDED)
    except SweepqError as exc:
        fail(str(exc))
    console.print(
        f"removed {removed} ({format_bytes(size)})"
        if removed is not None
        else f"no demo data in {folder}: nothing to remove"
    )


@contextlib.asynccontextmanager
async def demo_schema_lock(app: App, queries: DemoQueries, console: Console) -> AsyncIterator[Conn]:
    """Hold the lock of the demo's schema (a session lock on a connection of its own) while the
    block runs: a second demo on the schema waits here for the first to end."""
    async with app.pool.acquire() as conn:
        if not await queries.demo_lock_try(conn):
            console.print(
                f"another sweepq demo is running in schema {queries.schema}; waiting for it to "
                "end (or pass --schema NAME to run beside it) ..."
            )
            await queries.demo_lock_wait(conn)
        yield conn


async def _check_demo_schema(queries: DemoQueries, conn: Conn) -> bool:
    """Whether the schema exists; refuse one that is not the demo's (it is dropped)."""
    exists, is_demo = await queries.demo_schema_state(conn)
    if exists and not is_demo:
        raise CommandError(
            f"schema {queries.schema!r} exists and is not a demo schema (it has no {DEMO_TABLE} "
            "table); the demo drops its schema, so pick another --schema"
        )
    return exists


async def clean_schema(dsn: str, schema: str) -> int | None:
    """Drop the demo schema a run with --keep left; its size, or None if there is none."""
    app = build_demo_app(dsn, schema, pool_max_size=2)
    queries = DemoQueries(schema)
    async with app, app.pool.acquire() as conn:
        if not await queries.demo_lock_try(conn):
            raise CommandError(f"a sweepq demo is running in schema {schema}; let it end first")
        if not await _check_demo_schema(queries, conn):
            return None
        size = await queries.demo_schema_size(conn)
        await queries.demo_schema_drop(conn)
        return size


async def run_demo(
    dsn: str,
    *,
    schema: str,
    rows: int,
    concurrency: int,
    console: Console,
    drop: bool = False,
) -> DemoSummary:
    """Fill the demo table, then walk it with a sweep and an in-process worker, shown live;
    drop the demo schema at the end if `drop`."""
    app = build_demo_app(dsn, schema, pool_max_size=concurrency + 3)
    queries = DemoQueries(schema)
    async with app, demo_schema_lock(app, queries, console) as conn:
        # A clean slate each time: the demo's schema (its table, sweepq's tables, earlier runs)
        # is dropped and built again, and only ever a schema that holds the demo's table.
        await _check_demo_schema(queries, conn)
        await queries.demo_schema_drop(conn)
        await app.migrate()
        filled = time.perf_counter()
        await queries.demo_table_create(conn)
        await queries.demo_rows_fill(conn, rows)
        await queries.demo_table_analyze(conn)
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
        _, checked = await queries.demo_rows_checked(conn)
        size = await queries.demo_schema_size(conn)
        if drop:
            await queries.demo_schema_drop(conn)
    final = ended[0]
    return DemoSummary(
        rows=final.completed + final.failed,
        seconds=final.elapsed_seconds,
        failures=final.failed,
        checked=checked,
        state=str(final.state),
        schema_bytes=size,
        dropped=drop,
    )
