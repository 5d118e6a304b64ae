"""`sweepq sweep start|status|pause|resume|cancel`: runs of sweeps, and their live progress."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any

import anyio
import msgspec
import typer
from rich.console import RenderableType

from sweepq.core.errors import UnknownTaskError
from sweepq.core.queries import TRANSIENT_ERRORS
from sweepq.sweeps.app import App
from sweepq.sweeps.errors import UnknownSweepError
from sweepq.sweeps.runs import SweepRun, SweepState

from . import render
from .common import (
    AppOption,
    CommandError,
    DsnOption,
    JsonOption,
    SchemaOption,
    app_database,
    database,
    fail,
    live,
    open_app,
    print_json,
    run,
    stdout,
)

sweep = typer.Typer(help="Start sweep runs, watch their progress, pause, resume or cancel them.",
                    no_args_is_help=True)  # fmt: skip

RunArgument = Annotated[
    int, typer.Argument(metavar="RUN", help="The run's id.", min=1, show_default=False)
]

WATCH_INTERVAL = 0.25
logger = logging.getLogger("sweepq.cli")


def parse_params(pairs: Sequence[str]) -> dict[str, Any]:
    """`k=v` pairs into params: a value that parses as JSON is taken as such, else as text."""
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CommandError(f"--param {pair!r} is not key=value (e.g. --param batch=7)")
        if key in params:
            raise CommandError(f"--param {key!r} is given twice")
        try:
            params[key] = msgspec.json.decode(text)
        except msgspec.DecodeError:
            params[key] = text
    return params


@sweep.command("start")
def start(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="The registered sweep's name.", show_default=False)
    ],
    app_spec: AppOption,
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            "-p",
            show_default=False,
            help="A param as key=value (repeat for more); JSON values (7, true, [1,2]) are "
            "taken as JSON, anything else as text.",
        ),
    ] = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Start a run of sweep NAME of --app, unless one with the same params is active."""
    try:
        params = parse_params(param or [])
    except CommandError as exc:
        fail(str(exc))
    with app_database(app_spec, dsn, schema) as (app, _):

        async def go() -> None:
            async with app:
                started = await app.start_sweep(name, params)
            if as_json:
                print_json(started)
                return
            console = stdout()
            if started.started:
                console.print(f"started run {started.run_id} of sweep {name!r}")
            else:
                console.print(
                    f"sweep {name!r} already has an active run with these params: "
                    f"run {started.run_id}"
                )
            console.print(f"watch it: sweepq sweep status {started.run_id} --watch", style="dim")

        run(go)


@sweep.command("status")
def status(
    run_id: Annotated[
        int | None,
        typer.Argument(metavar="RUN", help="One run (default: recent runs).", show_default=False),
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Live progress bars until the runs end.")
    ] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Most runs listed.")] = 20,
    active: Annotated[bool, typer.Option("--active", help="Only running and paused runs.")] = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one run's progress, or recent runs; --watch follows active runs live (Ctrl-C ends)."""
    if watch and as_json:
        fail("--watch and --json do not go together: --json prints one snapshot")
    db = database(dsn, schema)
    console = stdout()

    async def go() -> None:
        async with open_app(db) as app:
            if watch:
                with live(console) as show:
                    await watch_runs(app, run_id, show)
                return
            if run_id is not None:
                found = await app.sweep_status(run_id)
                if found is None:
                    raise CommandError(f"no sweep run {run_id} (it never existed, or was pruned)")
                if as_json:
                    print_json(found)
                else:
                    console.print(render.sweep_detail(found))
                return
            runs = await app.list_sweep_runs(limit=limit, active_only=active)
            if as_json:
                print_json(runs)
            else:
                console.print(render.sweep_runs_table(runs))

    try:
        run(go)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None  # Ctrl-C is how a watch is left


async def watch_runs(
    app: App,
    run_id: int | None,
    show: Callable[[RenderableType], None],
    *,
    interval: float = WATCH_INTERVAL,
) -> list[SweepRun]:
    """Show progress every `interval` until the watched runs have ended; return them.

    With `run_id`, that run; else every run active now or that becomes active while watching.
    """
    watched: dict[int, SweepRun] = {}
    while True:
        try:
            await _refresh(app, run_id, watched)
        except TRANSIENT_ERRORS as exc:
            # The database restarted or dropped our connection: show the last figures, retry.
            logger.warning("reading sweep progress failed (%s); retrying", exc)
            await anyio.sleep(interval)
            continue
        runs = [watched[i] for i in sorted(watched)]
        show(render.sweep_progress(runs))
        if all(r.ended for r in runs):
            return runs
        await anyio.sleep(interval)


async def _refresh(app: App, run_id: int | None, watched: dict[int, SweepRun]) -> None:
    if run_id is not None:
        found = await app.sweep_status(run_id)
        if found is None:
            raise CommandError(f"no sweep run {run_id} (it never existed, or was pruned)")
        watched[found.id] = found
        return
    active = {r.id: r for r in await app.list_sweep_runs(limit=100, active_only=True)}
    for gone in [i for i, r in watched.items() if i not in active and not r.ended]:
        last = await app.sweep_status(gone)
        if last is None:
            del watched[gone]
        else:
            watched[gone] = last
    watched.update(active)


def _steer(
    verb: str,
    call: Callable[[App, int], Awaitable[SweepRun | None]],
    wanted: SweepState,
    run_id: int,
    app_spec: str | None,
    dsn: str | None,
    schema: str | None,
    as_json: bool,
) -> None:
    async def go(app: App) -> None:
        async with app:
            try:
                after = await call(app, run_id)
            except (UnknownTaskError, UnknownSweepError) as exc:
                if app_spec is not None:
                    raise
                missing = exc.task if isinstance(exc, UnknownTaskError) else exc.sweep
                raise CommandError(
                    f"the run cannot be {verb} without the sweep's code ({missing!r} is not "
                    "registered here): pass --app module:attribute"
                ) from None
        if after is None:
            raise CommandError(f"no sweep run {run_id} (it never existed, or was pruned)")
        if after.state is not wanted:
            raise CommandError(f"run {run_id} is {after.state}; it cannot be {verb}")
        if as_json:
            print_json(after)
        else:
            stdout().print(f"run {run_id} of sweep {after.sweep!r} is {after.state}")

    if app_spec is None:
        db = database(dsn, schema)
        plain = App(db.dsn.value, schema=db.schema.value, pool_max_size=2)
        run(lambda: go(plain))
        return
    with app_database(app_spec, dsn, schema) as (app, _):
        run(lambda: go(app))


OptionalAppOption = Annotated[
    str | None,
    typer.Option(
        "--app", show_default=False,
        help="The App with the sweep's code, as module:attribute (resume needs it to enqueue "
        "the next link).",
    ),
]  # fmt: skip


@sweep.command("pause")
def pause(
    run_id: RunArgument,
    app_spec: OptionalAppOption = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Pause a running run: no more pages are read; leaves already enqueued still run."""
    _steer("paused", App.pause_sweep, SweepState.PAUSED, run_id, app_spec, dsn, schema, as_json)


@sweep.command("resume")
def resume(
    run_id: RunArgument,
    app_spec: OptionalAppOption = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Resume a paused run from its committed cursor."""
    _steer("resumed", App.resume_sweep, SweepState.RUNNING, run_id, app_spec, dsn, schema, as_json)


@sweep.command("cancel")
def cancel(
    run_id: RunArgument,
    app_spec: OptionalAppOption = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Cancel a running or paused run and its outstanding leaves."""
    _steer(
        "cancelled", App.cancel_sweep, SweepState.CANCELLED, run_id, app_spec, dsn, schema,
        as_json,
    )  # fmt: skip
