"""`sweepq doctor`: what may be wrong with a queue, each finding with a severity."""

from __future__ import annotations

from typing import Annotated

import typer

from sweepq.core.admin import diagnose

from . import render
from .common import DsnOption, JsonOption, SchemaOption, database, open_app, print_json, run, stdout
from .settings import parse_duration


def doctor(
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    retention: Annotated[
        str,
        typer.Option("--retention", help="Terminal jobs older than this should have been pruned."),
    ] = "7d",
    as_json: JsonOption = False,
) -> None:
    """Report concurrency keys and oversubscription, sizes, retention, leases, server settings."""
    db = database(dsn, schema)

    async def go() -> None:
        keep = parse_duration(retention, what="--retention")
        async with open_app(db) as app:
            report = await diagnose(app, retention=keep)
        if as_json:
            print_json(report)
        else:
            stdout().print(render.doctor_view(report))

    run(go)
