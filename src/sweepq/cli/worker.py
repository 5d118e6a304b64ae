"""`sweepq worker APP`: run a worker until SIGINT/SIGTERM."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import Annotated

import anyio
import typer
from rich.console import Console

from sweepq.core.app import App
from sweepq.core.errors import SweepqError
from sweepq.core.worker import Worker

from . import render
from .common import DsnOption, SchemaOption, app_database, fail, run, stdout
from .settings import DatabaseSettings, WorkerSettings, resolve_worker


def worker(
    app_spec: Annotated[
        str, typer.Argument(metavar="APP", help="The App, as module:attribute.", show_default=False)
    ],
    queue: Annotated[
        list[str] | None,
        typer.Option(
            "--queue",
            "-q",
            help="A queue to work, repeat for more (default: SWEEPQ_QUEUES, else default).",
            show_default=False,
        ),
    ] = None,
    max_concurrency: Annotated[
        int | None,
        typer.Option(
            "--max-concurrency",
            "-c",
            min=1,
            show_default=False,
            help="Jobs run at once (default: SWEEPQ_MAX_CONCURRENCY, else the worker's).",
        ),
    ] = None,
    lease_seconds: Annotated[
        float | None,
        typer.Option(
            "--lease-seconds",
            show_default=False,
            help="How long a claim holds a job without a heartbeat (default: "
            "SWEEPQ_LEASE_SECONDS, else the worker's).",
        ),
    ] = None,
    poll_seconds: Annotated[
        float | None,
        typer.Option(
            "--poll-seconds",
            show_default=False,
            help="How often an idle worker looks for due jobs (default: SWEEPQ_POLL_SECONDS, "
            "else the worker's).",
        ),
    ] = None,
    grace_seconds: Annotated[
        float | None,
        typer.Option(
            "--grace-seconds",
            show_default=False,
            help="How long running jobs may finish after SIGTERM (default: "
            "SWEEPQ_GRACE_SECONDS, else the worker's).",
        ),
    ] = None,
    prune_every: Annotated[
        str | None,
        typer.Option(
            "--prune-every",
            show_default=False,
            help="How often the maintenance leader prunes history, or 'never' (default: "
            "SWEEPQ_PRUNE_EVERY, else 1h).",
        ),
    ] = None,
    prune_older_than: Annotated[
        str | None,
        typer.Option(
            "--prune-older-than",
            show_default=False,
            help="The age of the history it prunes (default: SWEEPQ_PRUNE_OLDER_THAN, else 7d).",
        ),
    ] = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    log_level: Annotated[
        str, typer.Option("--log-level", help="debug, info, warning or error.")
    ] = "info",
) -> None:
    """Run a worker for APP's tasks until SIGINT or SIGTERM (a second signal stops at once)."""
    level = logging.getLevelNamesMapping().get(log_level.upper())
    if level is None:
        fail(f"--log-level {log_level!r} is not one of debug, info, warning, error")
    with app_database(app_spec, dsn, schema) as (app, db):
        try:
            settings = resolve_worker(
                queues=queue, max_concurrency=max_concurrency, lease_seconds=lease_seconds,
                poll_seconds=poll_seconds, grace_seconds=grace_seconds, prune_every=prune_every,
                prune_older_than=prune_older_than, env=os.environ,
            )  # fmt: skip
        except SweepqError as exc:
            fail(str(exc))
        logging.basicConfig(
            level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )

        async def go() -> None:
            await serve(app, settings, db, app_spec=app_spec, console=stdout())

        run(go)


async def serve(
    app: App,
    settings: WorkerSettings,
    db: DatabaseSettings,
    *,
    app_spec: str,
    console: Console,
) -> None:
    """Run a worker with `settings` until the first SIGINT/SIGTERM cancels it."""
    w = Worker(
        app,
        queues=settings.queues.value,
        concurrency=settings.concurrency.value,
        lease_seconds=settings.lease_seconds.value,
        poll_seconds=settings.poll_seconds.value,
        grace_seconds=settings.grace_seconds.value,
        prune_every=settings.prune_every.value,
        prune_older_than=settings.prune_older_than.value,
    )
    lines = [("app", app_spec, "APP"), *db.lines(), *settings.lines()]
    console.print(render.settings_table(f"sweepq worker {w.id}", lines))
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as tg:
            scope = anyio.CancelScope()
            tg.start_soon(_watch, signals, w, scope, console)
            async with app:
                with scope:
                    async with w:
                        await w.run()
            tg.cancel_scope.cancel()
    console.print(f"worker stopped; it processed {w.processed} jobs")


async def _watch(
    signals: AsyncIterator[int], w: Worker, scope: anyio.CancelScope, console: Console
) -> None:
    """First signal: drain within the grace period. Second: hand running jobs back now."""
    count = 0
    async for signum in signals:
        count += 1
        name = signal.Signals(signum).name
        if count == 1:
            console.print(
                f"{name}: stopping; running jobs have {w.grace_seconds:g}s to finish "
                "(send it again to stop at once)"
            )
            w.stop()
        elif count == 2:
            console.print(f"{name} again: stopping now; running jobs are handed back")
            w.stop()
            scope.cancel()
        else:
            console.print(f"{name}: exiting; leftover leases are rescued when they lapse")
            sys.stdout.flush()
            os._exit(128 + signum)
