"""`sweepq migrate` and `sweepq prune`: the schema, and retention."""

from __future__ import annotations

from typing import Annotated

import typer

from sweepq.core.admin import migration_list

from . import render
from .common import JsonOption, print_json, respond, run, stdout
from .database import DsnOption, SchemaOption, database, plain_app
from .durations import duration_option


def migrate(
    ctx: typer.Context,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only show what would be applied.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Create or upgrade sweepq's tables (safe to run from many processes at once)."""
    db = database(ctx)

    async def go() -> None:
        async with plain_app(db) as app:
            done = await app.migrate(dry_run=dry_run)
            applied = await migration_list(app.queries, app.pool)
        if as_json:
            print_json(
                {
                    "schema": db.schema.value,
                    "applied": [m.label for m in applied if m.label not in done],
                    ("pending" if dry_run else "applied_now"): done,
                }
            )
            return
        stdout().print(
            render.migrations_view(applied, done, schema=db.schema.value, dry_run=dry_run)
        )

    run(go)


def prune(
    ctx: typer.Context,
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            help="Remove terminal jobs finished longer ago than this (30s, 15m, 12h, 7d, 2w).",
        ),
    ] = "7d",
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete history older than --older-than, in bounded batches; print rows removed per table."""
    app = plain_app(database(ctx))
    age = duration_option(older_than, "--older-than")
    respond(
        app,
        as_json,
        lambda app: app.prune(older_than=age),
        lambda removed: render.prune_view(removed, older_than=older_than),
    )
