"""The `sweepq` command: one Typer app, one module per command group."""

from __future__ import annotations

import typer

from . import demo, doctor, jobs, maintenance, sweep, worker

cli = typer.Typer(
    name="sweepq",
    help="sweepq: a durable job queue on PostgreSQL, with sweeps.",
    no_args_is_help=True,
    add_completion=False,
    # Tracebacks with locals could print a DSN's password; errors are one red line instead.
    pretty_exceptions_enable=False,
)
cli.command()(maintenance.migrate)
cli.command()(worker.worker)
cli.add_typer(jobs.jobs, name="jobs")
cli.add_typer(sweep.sweep, name="sweep")
cli.command()(maintenance.prune)
cli.command()(doctor.doctor)
cli.command()(demo.demo)


def main() -> None:
    """The console script's entry point."""
    cli()
