"""`manage.py sweepq_worker`: `sweepq worker --django` with this project's settings.

Every option of `sweepq worker` works here (`--queue`, `--max-concurrency`, `--threads`,
`--grace-seconds`, ...; `python manage.py sweepq_worker --help` lists them), and so do the
SWEEPQ_* variables; `--django-backend ALIAS` picks the TASKS entry (default: "default").
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

# Options manage.py has already applied; the worker command does not take them.
_MANAGE_OPTIONS = ("--settings", "--pythonpath")


class Command(BaseCommand):
    """Run a sweepq worker for the Django tasks of a SweepqBackend."""

    help = (
        "Run a sweepq worker for the Django tasks of TASKS['default'] (or --django-backend "
        "ALIAS) until SIGINT or SIGTERM; takes every option of `sweepq worker`."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Everything after the command's name goes to `sweepq worker --django`."""
        parser.add_argument("worker_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run_from_argv(self, argv: list[str]) -> None:
        """Hand the command line to `sweepq worker --django` (Django is set up by now)."""
        run_worker(_without_manage_options(argv[2:]), prog=f"{argv[0]} {argv[1]}")

    def handle(self, *args: Any, **options: Any) -> None:
        """`call_command("sweepq_worker", "--queue", "emails")`: the same, from code."""
        run_worker([*args, *options.get("worker_args", [])], prog="sweepq_worker")


def run_worker(args: Sequence[str], *, prog: str) -> None:
    """`sweepq worker --django ARGS`; returns when the worker stops (SystemExit on errors)."""
    from sweepq.cli.main import cli

    try:
        cli(["worker", "--django", *args], prog_name=prog)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise


def _without_manage_options(args: Sequence[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in _MANAGE_OPTIONS:
            skip = True
            continue
        if arg.startswith(tuple(f"{o}=" for o in _MANAGE_OPTIONS)):
            continue
        kept.append(arg)
    return kept
