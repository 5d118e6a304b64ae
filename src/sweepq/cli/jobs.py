"""`sweepq jobs list|show|retry|cancel`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

import typer
from rich.console import RenderableType

from sweepq.core.admin import JobRow, job_list
from sweepq.core.jobs import Job, JobState
from sweepq.sweeps.app import App
from sweepq.sweeps.naming import leaf_group

from . import render
from .common import CommandError, JsonOption, fail, respond
from .database import DsnOption, SchemaOption, database, plain_app

jobs = typer.Typer(help="List, inspect, retry and cancel jobs.", no_args_is_help=True)

JobIdArgument = Annotated[
    int, typer.Argument(metavar="ID", help="The job's id.", min=1, show_default=False)
]


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

    def command(
        ctx: typer.Context,
        job_id: JobIdArgument,
        dsn: DsnOption = None,
        schema: SchemaOption = None,
        as_json: JsonOption = False,
    ) -> None:
        async def call(app: App) -> Job:
            job = await act(app, job_id)
            if job is None:
                raise CommandError(f"no job {job_id} (it never existed, or it was pruned)")
            check(job)
            return job

        respond(plain_app(database(ctx)), as_json, call, view)

    return command


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
