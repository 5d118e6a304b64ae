"""`sweepq sweep start|status|failures|retry-failed|pause|resume|cancel`: runs of sweeps, their
live progress, and their failed items.

Only `start` needs the sweep's code (`--app`); every other command works with a DSN alone."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Annotated, Any, NamedTuple

import anyio
import msgspec
import typer
from rich.console import Group, RenderableType
from rich.text import Text

from sweepq.core import checks
from sweepq.core.errors import InvalidJobOptionError, SweepqError
from sweepq.core.outage import TRANSIENT_ERRORS
from sweepq.sweeps.app import App
from sweepq.sweeps.runs import SweepFailure, SweepRun, SweepStarted, SweepState

from . import sweep_render
from .app_spec import AppOption
from .app_spec import app_spec as resolve_app_spec
from .common import (
    CommandError,
    JsonOption,
    fail,
    live,
    opened,
    respond,
    run,
    split_pair,
    stdout,
)
from .database import DsnOption, SchemaOption, app_database, database, plain_app, row_command

sweep = typer.Typer(
    help="Start sweep runs, watch their progress, see and retry their failed items, pause, "
    "resume or cancel them.",
    no_args_is_help=True,
)

RUN = typer.Argument(metavar="RUN", help="The run's id.", min=1, show_default=False)
RunArgument = Annotated[int, RUN]


WATCH_INTERVAL = 0.25
START_WAIT_SECONDS = 3.0  # how long `start` gives a worker to take the run's first link
STATUS_FAILURES = 5  # the last failures `sweep status RUN` shows
logger = logging.getLogger("sweepq.cli")


def parse_params(pairs: Sequence[str]) -> dict[str, Any]:
    """`k=v` pairs into params: a value that parses as JSON is taken as such, else as text.

    Raises:
        CommandError: a pair that is not key=value, or a key given twice.
        InvalidJobOptionError: a key or value that cannot be stored (NUL, a lone surrogate), or
            JSON nested deeper than the queue stores.
    """
    params: dict[str, Any] = {}
    for pair in pairs:
        key, text = split_pair(pair, "--param", "key=value (e.g. --param batch=7)")
        if key in params:
            raise CommandError(f"--param {key!r} is given twice")
        params[checks.text(key, "a --param key")] = _param_value(key, text)
    return params


def _param_value(key: str, text: str) -> Any:
    try:
        return checks.parse_json(text, f"--param {key}")
    except InvalidJobOptionError:
        if checks.storable_text(text) and not _json_like(text):
            return text  # not JSON: the text itself
        raise


def _json_like(text: str) -> bool:
    """Whether `text` is JSON, if perhaps too deep to read."""
    try:
        msgspec.json.decode(text)
    except msgspec.DecodeError:
        return False
    except RecursionError:
        return True
    return True


@sweep.command("start")
def start(
    ctx: typer.Context,
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="The registered sweep's name.", show_default=False)
    ],
    app_spec: AppOption = None,
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
    except (CommandError, SweepqError) as exc:
        fail(str(exc))
    try:
        spec = resolve_app_spec(app_spec)
    except CommandError as exc:
        fail(str(exc))
    app, _ = app_database(ctx, spec)
    if as_json:
        respond(app, as_json, lambda app: app.start_sweep(name, params), lambda s: "")
    else:
        respond(app, as_json, lambda app: _start(app, name, params), lambda s: _started(name, *s))


async def _start(
    app: App, name: str, params: dict[str, Any]
) -> tuple[SweepStarted, SweepRun | None]:
    """Start the run, then give a worker `START_WAIT_SECONDS` to take its link: the run as it
    is then, so that a run no worker takes says so at once."""
    started = await app.start_sweep(name, params)
    run = await app.sweep_status(started.run_id)
    with anyio.move_on_after(START_WAIT_SECONDS):
        # A status to poll: the worker that takes the link is another process.
        while run is not None and run.state is SweepState.RUNNING:
            if run.worker_wait_seconds is None:
                break
            await anyio.sleep(0.05)
            run = await app.sweep_status(started.run_id)
    return started, run


def _started(name: str, started: SweepStarted, run: SweepRun | None = None) -> RenderableType:
    if started.started:
        said = f"started run {started.run_id} of sweep {name!r}"
    else:
        said = f"sweep {name!r} already has an active run with these params: run {started.run_id}"
    parts: list[RenderableType] = [said]
    waited = None if run is None else run.worker_wait_seconds
    if run is not None and waited is not None and run.state is SweepState.RUNNING:
        if run.queue_served:
            parts.append(Text(
                f"every worker of queue {run.queue!r} is busy: the run's link has waited "
                f"{waited:.0f}s for one", style="yellow",
            ))  # fmt: skip
        else:
            parts.append(Text(
                f"no worker is serving queue {run.queue!r}: start one, e.g. "
                f"sweepq worker --app APP --queue {run.queue}", style="yellow",
            ))  # fmt: skip
    parts.append(Text(f"watch it: sweepq sweep status {started.run_id} --watch", style="dim"))
    return Group(*parts)


@sweep.command("status")
def status(
    ctx: typer.Context,
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
    """Show one run's progress, or recent runs; --watch follows active runs live until they
    end (exit code 0 when every one completed, 1 when one failed or was cancelled; Ctrl-C
    leaves it with 130)."""
    if watch and as_json:
        fail("--watch and --json do not go together: --json prints one snapshot")
    app = plain_app(database(ctx))
    try:
        if watch:
            raise typer.Exit(watch_exit_code(run(lambda: _watch(app, run_id))))
        if run_id is not None and as_json:
            respond(app, as_json, lambda app: _run(app, run_id), sweep_render.sweep_detail)
        elif run_id is not None:
            respond(app, as_json, lambda app: _run_and_failures(app, run_id), _detail)
        else:
            view = sweep_render.sweep_runs_table
            respond(app, as_json, partial(_runs, limit=limit, active=active), view)
    except KeyboardInterrupt:
        # Ctrl-C leaves a watch before its runs end: not a success a script could mistake.
        raise typer.Exit(INTERRUPTED if watch else 0) from None


INTERRUPTED = 130  # as a shell reports a command that SIGINT ended


def watch_exit_code(runs: Sequence[SweepRun]) -> int:
    """0 when every watched run completed (or there was none), else 1: one failed or was
    cancelled."""
    return 0 if all(r.state is SweepState.COMPLETED for r in runs) else 1


async def _watch(app: App, run_id: int | None) -> list[SweepRun]:
    console = stdout()
    async with opened(app):
        with live(console) as show:
            return await watch_runs(app, run_id, show)


async def _runs(app: App, *, limit: int, active: bool) -> list[SweepRun]:
    return await app.list_sweep_runs(limit=limit, active_only=active)


async def _run(app: App, run_id: int) -> SweepRun:
    return _found(await app.sweep_status(run_id), run_id)


async def _run_and_failures(app: App, run_id: int) -> tuple[SweepRun, list[SweepFailure]]:
    found = await _run(app, run_id)
    undone = found.failed or found.cancelled
    failures = await app.sweep_failures(run_id, limit=STATUS_FAILURES) if undone else []
    return found, failures


def _detail(found: tuple[SweepRun, list[SweepFailure]]) -> RenderableType:
    return sweep_render.sweep_detail(*found)


def _found(found: SweepRun | None, run_id: int) -> SweepRun:
    if found is None:
        raise CommandError(f"no sweep run {run_id} (it never existed, or was pruned)")
    return found


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
        show(sweep_render.sweep_progress(runs))
        if all(r.ended for r in runs):
            return runs
        await anyio.sleep(interval)


async def _refresh(app: App, run_id: int | None, watched: dict[int, SweepRun]) -> None:
    if run_id is not None:
        found = await _run(app, run_id)
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


@sweep.command("failures")
def failures(
    ctx: typer.Context,
    run_id: RunArgument,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=100_000, help="Most failures listed.")
    ] = 50,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """List run RUN's items that failed for good or were cancelled, newest first: key, job,
    state, tries, last error (--json: each in full, with its traceback)."""

    async def call(app: App) -> list[SweepFailure]:
        _found(await app.sweep_status(run_id), run_id)
        return await app.sweep_failures(run_id, limit=limit)

    respond(plain_app(database(ctx)), as_json, call, sweep_render.sweep_failures_table)


class Retried(msgspec.Struct, frozen=True, kw_only=True):
    """What `sweep retry-failed` did: how many failed or cancelled items run again, and the
    run after."""

    retried: int
    run: SweepRun


async def _retry(app: App, run_id: int) -> Retried:
    _found(await app.sweep_status(run_id), run_id)
    retried = await app.retry_sweep_failures(run_id)
    return Retried(retried=retried, run=await _run(app, run_id))


def _retried(done: Retried) -> RenderableType:
    run = done.run
    if not done.retried:
        return f"run {run.id} of sweep {run.sweep!r} has no failed or cancelled items to retry"
    return Group(
        f"retrying {done.retried:,} failed or cancelled items of run {run.id} of sweep "
        f"{run.sweep!r}; the run is {run.state}",
        Text(f"watch it: sweepq sweep status {run.id} --watch", style="dim"),
    )


class Steering(NamedTuple):
    """What pause, resume or cancel calls, and the state the run must be in afterwards."""

    verb: str
    call: Callable[[App, int], Awaitable[SweepRun | None]]
    wanted: SweepState


async def _steer(action: Steering, app: App, run_id: int) -> SweepRun:
    after = _found(await action.call(app, run_id), run_id)
    if after.state is not action.wanted:
        raise CommandError(f"run {run_id} is {after.state}; it cannot be {action.verb}")
    return after


def _steered(run: SweepRun) -> str:
    return f"run {run.id} of sweep {run.sweep!r} is {run.state}"


def _steering(action: Steering) -> Callable[..., None]:
    """The command that pauses, resumes or cancels run RUN."""
    return row_command(RUN, partial(_steer, action), _steered)


sweep.command(
    "retry-failed",
    help="Run the failed and cancelled items of run RUN again (after a fix), with no new pass "
    "over the others; an ended run runs again until they are done.",
)(row_command(RUN, _retry, _retried))
sweep.command(
    "pause", help="Pause a running run: no more pages are read; leaves already enqueued still run."
)(_steering(Steering("paused", App.pause_sweep, SweepState.PAUSED)))
sweep.command(
    "resume",
    help="Resume a paused, failed or cancelled run from its committed cursor; the failed and "
    "cancelled items of an ended run run again, and no completed item does.",
)(_steering(Steering("resumed", App.resume_sweep, SweepState.RUNNING)))
sweep.command("cancel", help="Cancel a running or paused run and its outstanding leaves.")(
    _steering(Steering("cancelled", App.cancel_sweep, SweepState.CANCELLED))
)
