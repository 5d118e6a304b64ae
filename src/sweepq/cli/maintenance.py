"""`sweepq migrate` and `sweepq prune`: the schema, and retention."""

from __future__ import annotations

from typing import Annotated

import typer

from sweepq.core.admin import migration_list

from . import render
from .common import DsnOption, JsonOption, SchemaOption, database, open_app, print_json, run, stdout
from .settings import parse_duration


def migrate(
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only show what would be applied.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Create or upgrade sweepq's tables (safe to run from many processes at once)."""
    db = database(dsn, schema)

    async def go() -> None:
        async with open_app(db) as app:
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
    db = database(dsn, schema)

    async def go() -> None:
        age = parse_duration(older_than, what="--older-than")
        async with open_app(db) as app:
            removed = await app.prune(older_than=age)
        if as_json:
            print_json(removed)
        else:
            stdout().print(render.prune_view(removed, older_than=older_than))

    run(go)
