"""`sweepq jobs list|show|retry|cancel|enqueue`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from functools import partial
from typing import Annotated, Any, get_args, get_type_hints

import typer
from rich.console import RenderableType

from sweepq.core.admin import JobRow, job_list
from sweepq.core.checks import parse_json, show
from sweepq.core.errors import SweepqError
from sweepq.core.jobs import Enqueued, Job, JobState
from sweepq.core.options import JobOptions, check_names
from sweepq.sweeps.app import App
from sweepq.sweeps.naming import leaf_group

from . import render
from .app_spec import AppOption
from .app_spec import app_spec as resolve_app_spec
from .common import CommandError, JsonOption, fail, respond, split_pair
from .database import DsnOption, SchemaOption, app_database, database, plain_app, row_command
from .durations import parse_duration

jobs = typer.Typer(help="List, inspect, retry, cancel and enqueue jobs.", no_args_is_help=True)

JOB_ID = typer.Argument(metavar="ID", help="The job's id.", min=1, show_default=False)


@jobs.command("list")
def list_jobs(
    ctx: typer.Context,
    state: Annotated[
        JobState | None, typer.Option("--state", help="Only jobs in this state.")
    ] = None,
    task: Annotated[str | None, typer.Option("--task", help="Only jobs of this task.")] = None,
    queue: Annotated[str | None, typer.Option("--queue", help="Only jobs of this queue.")] = None,
    group: Annotated[
        str | None, typer.Option("--group", help="Only jobs of this job group.")
    ] = None,
    run_id: Annotated[
        int | None,
        typer.Option("--run", min=1, help="Only the items (leaf jobs) of this sweep run."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="Most jobs shown.")] = 50,
    before: Annotated[
        int | None, typer.Option("--before", help="Only ids below this (the next page).")
    ] = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """List jobs, newest first, with their last error (next page: `--before` the last id shown)."""
    if group is not None and run_id is not None:
        fail("--group and --run do not go together: a run's items are its job group")
    if run_id is not None:
        group = leaf_group(run_id)

    async def call(app: App) -> list[JobRow]:
        return await job_list(
            app.queries, app.pool, state=state, task=task, queue=queue, group=group,
            before=before, limit=limit,
        )  # fmt: skip

    respond(
        plain_app(database(ctx)), as_json, call, lambda rows: render.jobs_table(rows, limit=limit)
    )


def _one_job(
    act: Callable[[App, int], Awaitable[Job | None]],
    check: Callable[[Job], None],
    view: Callable[[Job], RenderableType],
) -> Callable[..., None]:
    """A command that does `act` to job ID, refuses what `check` refuses, and shows `view`."""
    return row_command(JOB_ID, partial(_act, act, check), view)


async def _act(
    act: Callable[[App, int], Awaitable[Job | None]],
    check: Callable[[Job], None],
    app: App,
    job_id: int,
) -> Job:
    job = await act(app, job_id)
    if job is None:
        raise CommandError(f"no job {job_id} (it never existed, or it was pruned)")
    check(job)
    return job


def _anything(job: Job) -> None:
    return None


def _ended(job: Job) -> None:
    if job.state is JobState.RUNNING:
        raise CommandError(f"job {job.id} is running; it can be retried once it has ended")


def _cancelled(job: Job) -> None:
    if job.state is not JobState.CANCELLED:
        raise CommandError(
            f"job {job.id} is {job.state}; only available or running jobs can be cancelled"
        )


def _due(job: Job) -> str:
    return f"job {job.id} is {job.state}, due now (attempt {job.attempt}/{job.max_attempts})"


jobs.command("show", help="Show one job: its row, arguments and recorded errors.")(
    _one_job(App.get_job, _anything, render.job_detail)
)
jobs.command(
    "retry",
    help="Run a finished job again now, with a fresh attempt budget (an available job: now).",
)(_one_job(App.retry, _ended, _due))
jobs.command(
    "cancel",
    help="Cancel an available or running job (a running one's worker can no longer finish it).",
)(_one_job(App.cancel, _cancelled, lambda job: f"job {job.id} is cancelled"))


@jobs.command("enqueue")
def enqueue(
    ctx: typer.Context,
    task: Annotated[
        str, typer.Argument(metavar="TASK", help="The task's name.", show_default=False)
    ],
    args: Annotated[
        str,
        typer.Option(
            "--args", "-a", help="The job's arguments, a JSON object (e.g. '{\"n\": 7}')."
        ),
    ] = "{}",
    option: Annotated[
        list[str] | None,
        typer.Option(
            "--option",
            "-o",
            show_default=False,
            help="A job option as name=value, repeat for more (queue, priority, delay=30s, "
            "run_at=2026-12-24T09:00:00+01:00, max_attempts, idempotency_key, identity_key, "
            "unique_for=1h, deadline=15m, concurrency_key, group, ...).",
        ),
    ] = None,
    app_spec: AppOption = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Enqueue a job of TASK of --app, its args checked against the handler, and print what
    happened: created, or the job it was deduplicated against."""
    try:
        decoded = parse_json(args, "--args")
        if not isinstance(decoded, dict):
            raise CommandError(
                f"--args must be a JSON object, got {show(args)}: pass one such as '{{\"n\": 7}}'"
            )
        options = parse_options(option or [])
        spec = resolve_app_spec(app_spec)
    except (CommandError, SweepqError) as exc:
        fail(str(exc))
    app, _ = app_database(ctx, spec)
    respond(
        app,
        as_json,
        lambda app: app.enqueue(task, decoded, **options),
        lambda done: _enqueued(task, done),
    )


def parse_options(given: list[str]) -> dict[str, Any]:
    """`name=value` pairs as job options, each value read as its option's type (a duration
    such as 30s for delay, deadline and unique_for; an ISO 8601 time for run_at)."""
    hints = get_type_hints(JobOptions)
    options: dict[str, Any] = {}
    for pair in given:
        name, text = split_pair(pair, "--option", "name=value")
        if name not in hints:
            check_names({name: None})  # raises, naming the options there are
        options[name] = _option_value(name, text.strip(), hints[name])
    return options


def _option_value(name: str, text: str, hint: Any) -> Any:
    kinds = set(get_args(hint)) or {hint}
    try:
        if timedelta in kinds:
            return text if text == "" else _seconds(text, name)
        if datetime in kinds:
            return datetime.fromisoformat(text)
        if int in kinds:
            return int(text)
    except ValueError:
        raise CommandError(f"--option {name}={text!r} is not valid for {name}") from None
    return text


def _seconds(text: str, name: str) -> float:
    try:
        return float(text)
    except ValueError:
        return parse_duration(text, what=name).total_seconds()


def _enqueued(task: str, done: Enqueued) -> str:
    if done.created:
        return f"enqueued job {done.job_id} of task {task!r}"
    return f"not enqueued: job {done.job_id} holds that key ({done.outcome})"
