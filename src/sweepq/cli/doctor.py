"""`sweepq doctor`: what may be wrong with a queue, each finding with a severity."""

from __future__ import annotations

from typing import Annotated

import typer

from sweepq.core.doctor import diagnose

from . import render
from .common import JsonOption, respond
from .database import DsnOption, SchemaOption, database, plain_app
from .durations import duration_option


def doctor(
    ctx: typer.Context,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    retention: Annotated[
        str,
        typer.Option("--retention", help="Terminal jobs older than this should have been pruned."),
    ] = "7d",
    as_json: JsonOption = False,
) -> None:
    """Report whether the schema is migrated, concurrency keys and oversubscription, sizes,
    retention, leases, server settings (exit code 1 when a finding is critical)."""
    app = plain_app(database(ctx))
    keep = duration_option(retention, "--retention")
    found = respond(app, as_json, lambda app: diagnose(app, retention=keep), render.doctor_view)
    if found.critical:
        raise typer.Exit(1)
