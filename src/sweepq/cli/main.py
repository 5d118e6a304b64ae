"""The `sweepq` command: one Typer app, one module per command group."""

from __future__ import annotations

from typing import Annotated

import typer

from sweepq import __version__

from . import demo, doctor, jobs, maintenance, queues, sweep, top, web, worker

cli = typer.Typer(
    name="sweepq",
    help="sweepq: a durable job queue on PostgreSQL, with sweeps.",
    no_args_is_help=True,
    add_completion=False,
    # Tracebacks with locals could print a DSN's password; errors are one red line instead.
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sweepq {__version__}")
        raise typer.Exit


@cli.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """sweepq: a durable job queue on PostgreSQL, with sweeps."""


cli.command()(maintenance.migrate)
cli.command()(worker.worker)
cli.add_typer(jobs.jobs, name="jobs")
cli.add_typer(sweep.sweep, name="sweep")
cli.add_typer(queues.queues, name="queues")
cli.command()(maintenance.prune)
cli.command()(doctor.doctor)
cli.command()(top.top)
cli.command()(demo.demo)
cli.command()(web.web)

# The same command tree as click sees it: what the CLI reference (docs/reference/cli.md) is
# generated from, with mkdocs-click, and what its test walks.
click_command = typer.main.get_command(cli)
"""The `sweepq` command as a click command (built from `cli`), for generated documentation."""


def main() -> None:
    """The console script's entry point."""
    cli()
