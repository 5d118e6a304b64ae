"""`sweepq jobs list|show|retry|cancel`."""

from __future__ import annotations

from typing import Annotated

import typer

from sweepq.core.admin import job_list
from sweepq.core.jobs import Job, JobState

from . import render
from .common import (
    CommandError,
    DsnOption,
    JsonOption,
    SchemaOption,
    database,
    open_app,
    print_json,
    run,
    stdout,
)

jobs = typer.Typer(help="List, inspect, retry and cancel jobs.", no_args_is_help=True)

JobIdArgument = Annotated[
    int, typer.Argument(metavar="ID", help="The job's id.", min=1, show_default=False)
]


@jobs.command("list")
def list_jobs(
    state: Annotated[
        JobState | None, typer.Option("--state", help="Only jobs in this state.")
    ] = None,
    task: Annotated[str | None, typer.Option("--task", help="Only jobs of this task.")] = None,
    queue: Annotated[str | None, typer.Option("--queue", help="Only jobs of this queue.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="Most jobs shown.")] = 50,
    before: Annotated[
        int | None, typer.Option("--before", help="Only ids below this (the next page).")
    ] = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """List jobs, newest first (page with --before <last id>)."""
    db = database(dsn, schema)

    async def go() -> None:
        async with open_app(db) as app:
            rows = await job_list(
                app.queries, app.pool, state=state, task=task, queue=queue, before=before,
                limit=limit,
            )  # fmt: skip
        if as_json:
            print_json(rows)
        else:
            stdout().print(render.jobs_table(rows, limit=limit))

    run(go)


def _found(job: Job | None, job_id: int) -> Job:
    if job is None:
        raise CommandError(f"no job {job_id} (it never existed, or it was pruned)")
    return job


@jobs.command("show")
def show(
    job_id: JobIdArgument,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one job: its row, arguments and recorded errors."""
    db = database(dsn, schema)

    async def go() -> None:
        async with open_app(db) as app:
            job = _found(await app.get_job(job_id), job_id)
        if as_json:
            print_json(job)
        else:
            stdout().print(render.job_detail(job))

    run(go)


@jobs.command("retry")
def retry(
    job_id: JobIdArgument,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run a finished job again now, with a fresh attempt budget (an available job: now)."""
    db = database(dsn, schema)

    async def go() -> None:
        async with open_app(db) as app:
            job = _found(await app.retry(job_id), job_id)
        if job.state is JobState.RUNNING:
            raise CommandError(f"job {job_id} is running; it can be retried once it has ended")
        if as_json:
            print_json(job)
        else:
            stdout().print(
                f"job {job_id} is {job.state}, due now (attempt {job.attempt}/{job.max_attempts})"
            )

    run(go)


@jobs.command("cancel")
def cancel(
    job_id: JobIdArgument,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Cancel an available or running job (a running one's worker can no longer finish it)."""
    db = database(dsn, schema)

    async def go() -> None:
        async with open_app(db) as app:
            job = _found(await app.cancel(job_id), job_id)
        if job.state is not JobState.CANCELLED:
            raise CommandError(
                f"job {job_id} is {job.state}; only available or running jobs can be cancelled"
            )
        if as_json:
            print_json(job)
        else:
            stdout().print(f"job {job_id} is cancelled")

    run(go)
