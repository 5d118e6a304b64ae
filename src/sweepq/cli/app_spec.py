"""APP, `module:attribute`: which App a command works with (`sweepq.loading` imports it)."""

from __future__ import annotations

from typing import Annotated

import typer

from .common import CommandError

AppOption = Annotated[
    str | None,
    typer.Option(
        "--app",
        envvar="SWEEPQ_APP",
        show_envvar=False,
        show_default=False,
        help="The App, as module:attribute (e.g. myproject.jobs:app); default: SWEEPQ_APP.",
    ),
]


def app_spec(given: str | None, positional: str | None = None) -> str:
    """The APP a command names: `--app` (or SWEEPQ_APP), or the positional APP where a command
    takes one (`sweepq worker APP`); both must agree.

    Raises:
        CommandError: no APP at all, or two different ones.
    """
    given = (given or "").strip() or None
    if positional and given and positional != given:
        raise CommandError(f"APP {positional!r} and --app/SWEEPQ_APP {given!r} differ; give one")
    found = positional or given
    if not found:
        raise CommandError(
            "name the App: --app module:attribute (e.g. myproject.jobs:app), or set SWEEPQ_APP"
        )
    return found
