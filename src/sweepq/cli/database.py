"""The database a command works on, and where its DSN and schema came from.

Without APP: `--dsn`, else SWEEPQ_DSN, then DATABASE_URL; `--schema`, else SWEEPQ_SCHEMA, else
`sweepq`. With APP: `--dsn` outranks the App's own DSN, which outranks the environment; the
schema is the App's, which `--schema` or SWEEPQ_SCHEMA may name but not change.
"""

# No `from __future__ import annotations`: `row_command` annotates its command's argument with
# the `typer.Argument` it is given, which typer reads from the annotation at run time.

from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import msgspec
import typer
from rich.console import RenderableType

from sweepq.core.app import DEFAULT_SCHEMA
from sweepq.core.dsn import check_dsn, redact
from sweepq.core.errors import ConfigurationError, SweepqError
from sweepq.core.ident import ident
from sweepq.loading import load_app
from sweepq.sweeps.app import App

from .common import CommandError, JsonOption, fail, respond
from .settings import Parser, Resolved, env_option, resolve, source_of

# Read through the command's context, which knows where each came from (see `database`).
DsnOption = Annotated[
    str | None,
    env_option(
        "--dsn",
        envvar=["SWEEPQ_DSN", "DATABASE_URL"],
        help="A postgresql:// URL, or a key=value connection string such as 'host=db "
        "dbname=app' (default: SWEEPQ_DSN, then DATABASE_URL).",
    ),
]
SchemaOption = Annotated[
    str | None,
    env_option(
        "--schema",
        envvar="SWEEPQ_SCHEMA",
        help="sweepq's schema (default: SWEEPQ_SCHEMA, else sweepq).",
    ),
]
_SCHEMA = Parser(str, "a schema name")

T = TypeVar("T")


class DatabaseSettings(msgspec.Struct, frozen=True):
    dsn: Resolved[str]
    schema: Resolved[str]

    def lines(self) -> list[tuple[str, str, str]]:
        return [
            ("database", redact(self.dsn.value), self.dsn.source),
            ("schema", self.schema.value, self.schema.source),
        ]


def database(ctx: typer.Context) -> DatabaseSettings:
    """The database of a command without APP; none, or a malformed one, ends it with one line."""
    try:
        return _database(ctx)
    except SweepqError as exc:
        fail(str(exc))


def _database(ctx: typer.Context) -> DatabaseSettings:
    dsn = ctx.params["dsn"]
    if not dsn:
        raise ConfigurationError(
            "no database given: pass --dsn postgresql://... (or --dsn 'host=... dbname=...'), or "
            "set SWEEPQ_DSN (or DATABASE_URL)"
        )
    schema = resolve(ctx, "schema", _SCHEMA, DEFAULT_SCHEMA)
    ident(schema.value, what=f"schema name (from {schema.source})")
    source = source_of(ctx, "dsn")
    return DatabaseSettings(Resolved(check_dsn(dsn, source), source), schema)


def plain_app(db: DatabaseSettings) -> App:
    """An App on `db` with no tasks (enough for reading and changing jobs and runs)."""
    return App(db.dsn.value, schema=db.schema.value, pool_max_size=2)


def row_command(
    argument: object,
    call: Callable[[App, int], Awaitable[T]],
    view: Callable[[T], RenderableType],
) -> Callable[..., None]:
    """A command on one row (a job, a run) given by its id as `argument` (a `typer.Argument`),
    with a DSN alone: it does `call` to the row, and shows what it returns as `view`."""

    def command(
        ctx: typer.Context,
        row_id: Annotated[int, argument],
        dsn: DsnOption = None,
        schema: SchemaOption = None,
        as_json: JsonOption = False,
    ) -> None:
        respond(plain_app(database(ctx)), as_json, lambda app: call(app, row_id), view)

    return command


def app_database(ctx: typer.Context, spec: str) -> tuple[App, DatabaseSettings]:
    """Load APP and point it at --dsn if given; a wrong APP or database ends with one line."""
    try:
        app = load_app(spec)
        return app, app_settings(ctx, app)
    except (CommandError, SweepqError) as exc:
        fail(str(exc))


def app_settings(ctx: typer.Context, app: App, *, own: str = "APP") -> DatabaseSettings:
    """The database of an App a command was given, pointed at --dsn if given; `own` names
    where the App's own DSN and schema come from, for the banner.

    Raises:
        ConfigurationError: no DSN, or a --schema/SWEEPQ_SCHEMA other than the App's.
    """
    return DatabaseSettings(_app_dsn(ctx, app, own), _app_schema(ctx, app, own))


def _app_dsn(ctx: typer.Context, app: App, own: str) -> Resolved[str]:
    given, source = ctx.params["dsn"], source_of(ctx, "dsn")
    if source == "--dsn":
        app.configure(dsn=check_dsn(given, source))
    used = app.dsn  # raises ConfigurationError naming --dsn and SWEEPQ_DSN when there is none
    return Resolved(used, source if given and used in (given, _as_url(given)) else own)


def _as_url(dsn: str) -> str | None:
    """`dsn` as the URL the App connects with, or None if it is not a DSN at all."""
    try:
        return check_dsn(dsn)
    except ConfigurationError:
        return None


def _app_schema(ctx: typer.Context, app: App, own: str) -> Resolved[str]:
    named = resolve(ctx, "schema", _SCHEMA, app.schema)
    if named.value != app.schema:
        raise ConfigurationError(
            f"{named.source} says schema {named.value!r} but the App uses schema "
            f"{app.schema!r}; an App's schema is set where it is built (sweepq.App(schema=...))"
        )
    return named if named.source != "default" else Resolved(app.schema, own)
