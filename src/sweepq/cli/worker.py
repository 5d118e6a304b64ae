"""`sweepq worker APP` (or `--app`, or SWEEPQ_APP): run a worker until SIGINT/SIGTERM."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Annotated, Any

import anyio
import typer
from rich.console import Console

from sweepq.core.logs import JsonFormatter
from sweepq.core.worker import Worker

from . import metrics, render
from .app_spec import AppOption
from .app_spec import app_spec as resolve_app_spec
from .common import CommandError, fail, json_line, json_lines, run, stdout
from .database import DatabaseSettings, DsnOption, SchemaOption, app_database
from .django_worker import django_app
from .plugins import Sampler
from .settings import env_option, source_of
from .streams import unbreakable
from .worker_settings import WorkerSettings, banner_lines, build_worker, worker_settings


def worker(
    ctx: typer.Context,
    positional_app: Annotated[
        str | None,
        typer.Argument(
            metavar="[APP]",
            help="The App, as module:attribute (or --app, or SWEEPQ_APP).",
            show_default=False,
        ),
    ] = None,
    app_option: AppOption = None,
    queues: Annotated[
        list[str] | None,
        env_option(
            "--queue",
            "-q",
            envvar="SWEEPQ_QUEUES",
            metavar="QUEUE",
            help="A queue to work, repeat for more (default: SWEEPQ_QUEUES, comma-separated, "
            "else default).",
        ),
    ] = None,
    concurrency: Annotated[
        str | None,
        env_option(
            "--max-concurrency",
            "-c",
            envvar="SWEEPQ_MAX_CONCURRENCY",
            metavar="N",
            help="Jobs run at once (default: SWEEPQ_MAX_CONCURRENCY, else the worker's).",
        ),
    ] = None,
    threads: Annotated[
        str | None,
        env_option(
            "--threads",
            envvar="SWEEPQ_THREADS",
            metavar="N",
            help="Most `def` handlers run at once, each in a thread (default: SWEEPQ_THREADS, "
            "else one per slot).",
        ),
    ] = None,
    lease_seconds: Annotated[
        str | None,
        env_option(
            "--lease-seconds",
            envvar="SWEEPQ_LEASE_SECONDS",
            metavar="SECONDS",
            help="How long a claim holds a job without a heartbeat (default: "
            "SWEEPQ_LEASE_SECONDS, else the worker's).",
        ),
    ] = None,
    poll_seconds: Annotated[
        str | None,
        env_option(
            "--poll-seconds",
            envvar="SWEEPQ_POLL_SECONDS",
            metavar="SECONDS",
            help="How often an idle worker looks for due jobs (default: SWEEPQ_POLL_SECONDS, "
            "else the worker's).",
        ),
    ] = None,
    grace_seconds: Annotated[
        str | None,
        env_option(
            "--grace-seconds",
            envvar="SWEEPQ_GRACE_SECONDS",
            metavar="SECONDS",
            help="How long running jobs may finish after SIGTERM (default: "
            "SWEEPQ_GRACE_SECONDS, else the worker's).",
        ),
    ] = None,
    prune_every: Annotated[
        str | None,
        env_option(
            "--prune-every",
            envvar="SWEEPQ_PRUNE_EVERY",
            metavar="DURATION",
            help="How often the maintenance leader prunes history, or 'never' (default: "
            "SWEEPQ_PRUNE_EVERY, else 1h).",
        ),
    ] = None,
    prune_older_than: Annotated[
        str | None,
        env_option(
            "--prune-older-than",
            envvar="SWEEPQ_PRUNE_OLDER_THAN",
            metavar="DURATION",
            help="The age of the history it prunes (default: SWEEPQ_PRUNE_OLDER_THAN, else 7d).",
        ),
    ] = None,
    metrics_port: metrics.MetricsPortOption = None,
    django: Annotated[
        bool,
        typer.Option(
            "--django",
            help="Run the Django tasks of a sweepq.contrib.django.SweepqBackend instead of an "
            "APP, with Django set up from DJANGO_SETTINGS_MODULE (manage.py sweepq_worker "
            "does this).",
        ),
    ] = False,
    django_backend: Annotated[
        str,
        typer.Option(
            "--django-backend",
            metavar="ALIAS",
            help="With --django: the entry of Django's TASKS setting whose tasks to run.",
        ),
    ] = "default",
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    log_level: Annotated[
        str, typer.Option("--log-level", help="debug, info, warning or error.")
    ] = "info",
    log_format: Annotated[
        str,
        typer.Option(
            "--log-format",
            envvar="SWEEPQ_LOG_FORMAT",
            help="text, or json: one object per line with the record's fields (job_id, task, "
            "attempt, outcome, error, ...).",
        ),
    ] = "text",
) -> None:
    """Run a worker for APP's tasks until SIGINT or SIGTERM (a second signal stops at once)."""
    # Its output may lose its reader (`| tee log`, and tee exits on the same Ctrl-C): the worker
    # stops as it would otherwise, whatever becomes of its stdout and stderr. With --log-format
    # json, every line it writes is a JSON object: its banner and messages, its errors, its log.
    if log_format not in ("text", "json"):
        fail(f"--log-format {log_format!r} is not one of text, json")
    as_json = log_format == "json"
    with unbreakable(), json_lines(as_json):
        level = logging.getLevelNamesMapping().get(log_level.upper())
        if level is None:
            fail(f"--log-level {log_level!r} is not one of debug, info, warning, error")
        if django:
            if positional_app or app_option:
                given = "APP" if positional_app else source_of(ctx, "app_option")
                fail(f"--django runs the tasks of Django's TASKS setting: give no {given} with it")
            app, db = django_app(ctx, django_backend)
            app_spec, spec_source = f"TASKS[{django_backend!r}]", "--django"
        else:
            try:
                app_spec = resolve_app_spec(app_option, positional_app)
            except CommandError as exc:
                fail(str(exc))
            spec_source = "APP" if positional_app else source_of(ctx, "app_option")
            app, db = app_database(ctx, app_spec)
        settings = worker_settings(ctx)  # the options are read through ctx, with their sources
        w = build_worker(app, settings)  # settings that cannot work together end it here
        port = metrics.metrics_port(ctx)
        handler = logging.StreamHandler(sys.stderr)  # unbreakable: no traceback per lost line
        handler.setFormatter(
            JsonFormatter()
            if as_json
            else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        )
        logging.basicConfig(level=level, handlers=[handler])
        if as_json:
            logging.captureWarnings(True)  # a library's warning is a log line too
        sampler = None if port.value is None else metrics.serve_metrics(app, port.value)
        run(
            lambda: serve(
                w,
                settings,
                db,
                app_spec=(app_spec, spec_source),
                say=Say(stdout(), as_json=as_json),
                metrics_port=port,
                sampler=sampler,
            )
        )


async def serve(
    w: Worker,
    settings: WorkerSettings,
    db: DatabaseSettings,
    *,
    app_spec: tuple[str, str],
    say: Say,
    metrics_port: metrics.MetricsPort | None = None,
    sampler: Sampler | None = None,
) -> None:
    """Run worker `w` (built from `settings`) until the first SIGINT/SIGTERM cancels it;
    `sampler` (feeding the metrics endpoint) runs beside it, on the open app, until the worker
    stops."""
    app = w.app
    lines = [("app", *app_spec), *db.lines(), *banner_lines(settings)]
    if metrics_port is not None:
        lines.append(metrics.banner_line(metrics_port))
    say.banner(w.id, lines)
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as tg:
            scope = anyio.CancelScope()
            tg.start_soon(_watch, signals, w, scope, say)
            async with app:
                if sampler is not None:
                    tg.start_soon(sampler.run)
                with scope:
                    async with w:
                        await w.run()
                if sampler is not None:
                    sampler.stop()  # before the app's pool closes under its next read
            tg.cancel_scope.cancel()
    say(f"worker stopped; it processed {w.processed} jobs", processed=w.processed)


async def _watch(
    signals: AsyncIterator[int], w: Worker, scope: anyio.CancelScope, say: Say
) -> None:
    """First signal: drain within the grace period. Second: hand running jobs back now."""
    count = 0
    async for signum in signals:
        count += 1
        name = signal.Signals(signum).name
        if count == 1:
            say(
                f"{name}: stopping; running jobs have {w.grace_seconds:g}s to finish "
                "(send it again to stop at once)",
                signal=name,
            )
            w.stop()
        elif count == 2:
            say(f"{name} again: stopping now; running jobs are handed back", signal=name)
            w.stop()
            scope.cancel()
        else:
            say(f"{name}: exiting; leftover leases are rescued when they lapse", signal=name)
            sys.stdout.flush()
            os._exit(128 + signum)


class Say:
    """What the worker command itself says on stdout (its banner, how it stops): lines for a
    reader, or with `as_json` one JSON object per line, in the shape of its JSON log."""

    def __init__(self, console: Console, *, as_json: bool) -> None:
        self.console = console
        self.as_json = as_json

    def banner(self, worker_id: str, lines: Sequence[tuple[str, str, str]]) -> None:
        """Each setting, its value and where it came from."""
        title = f"sweepq worker {worker_id}"
        if not self.as_json:
            self.console.print(render.settings_table(title, lines))
            return
        settings = {name: {"value": value, "source": source} for name, value, source in lines}
        self(title, worker_id=worker_id, settings=settings)

    def __call__(self, message: str, **fields: Any) -> None:
        if self.as_json:
            print(json_line(message, **fields), flush=True)
        else:
            self.console.print(message)
