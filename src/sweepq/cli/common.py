"""What the commands share: the database options, loading APP, running async code, and errors.

Every failure a user can fix ends the command with one red line on stderr and exit code 2; no
traceback, and never a DSN's password.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Annotated, Any, NoReturn, TypeVar

import anyio
import asyncpg
import msgspec
import typer
from rich.console import Console, RenderableType
from rich.live import Live
from rich.text import Text

from sweepq.core.dsn import check_dsn, redact
from sweepq.core.errors import SweepqError
from sweepq.sweeps.app import App

from .settings import DatabaseSettings, resolve_app_database, resolve_database

T = TypeVar("T")

DsnOption = Annotated[
    str | None,
    typer.Option(
        "--dsn",
        help="PostgreSQL URL (default: SWEEPQ_DSN, then DATABASE_URL).",
        show_default=False,
    ),
]
SchemaOption = Annotated[
    str | None,
    typer.Option(
        "--schema",
        help="sweepq's schema (default: SWEEPQ_SCHEMA, else sweepq).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
AppOption = Annotated[
    str, typer.Option("--app", help="The App, as module:attribute (e.g. myproject.jobs:app).")
]


class CommandError(Exception):
    """A command could not do what was asked (e.g. a job that does not exist)."""


def stdout() -> Console:
    return Console(highlight=False)


@contextlib.contextmanager
def live(console: Console) -> Iterator[Callable[[RenderableType], None]]:
    """Yield `show(renderable)`: refreshed ~4x/s on a terminal, else printed once at the end."""
    if console.is_terminal:
        with Live(console=console, refresh_per_second=4) as view:
            yield view.update
        return
    latest: list[RenderableType] = []

    def keep(renderable: RenderableType) -> None:
        latest[:] = [renderable]

    try:
        yield keep
    finally:
        if latest:
            console.print(latest[-1])


def fail(message: str) -> NoReturn:
    """Print `message` as one red line on stderr and exit with code 2."""
    Console(stderr=True, highlight=False).print(
        Text(f"error: {' '.join(redact(message).split())}", style="bold red"), soft_wrap=True
    )
    raise typer.Exit(2)


def print_json(value: Any) -> None:
    typer.echo(msgspec.json.encode(value).decode())


def run(fn: Callable[[], Awaitable[T]]) -> T:
    """Run `fn` on an event loop, turning the errors a user can act on into `fail`."""
    try:
        return anyio.run(fn)
    except BaseException as raised:
        exc = _unwrap(raised)
        if isinstance(exc, SweepqError | CommandError):
            fail(str(exc))
        if isinstance(exc, asyncpg.UndefinedTableError | asyncpg.UndefinedObjectError):
            fail(f"{exc}: is the schema migrated? run `sweepq migrate` (with the same --schema)")
        if isinstance(exc, asyncpg.PostgresError | asyncpg.InterfaceError):
            fail(f"database error: {type(exc).__name__}: {exc}")
        if isinstance(exc, OSError):
            fail(f"cannot reach the database: {exc}")
        if exc is not raised and isinstance(exc, KeyboardInterrupt):
            raise exc from None
        raise


def _unwrap(exc: BaseException) -> BaseException:
    """The error inside task-group wrappers: the first one that is not a cancellation."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        if not inner:
            break
        exc = inner[0]
    return exc


def database(dsn: str | None, schema: str | None) -> DatabaseSettings:
    """The database a command without APP works on."""
    try:
        settings = resolve_database(dsn=dsn, schema=schema, env=os.environ)
        check_dsn(settings.dsn.value, settings.dsn.source)
    except SweepqError as exc:
        fail(str(exc))
    return settings


@contextlib.asynccontextmanager
async def open_app(db: DatabaseSettings, *, pool_max_size: int = 2) -> AsyncIterator[App]:
    """An open App on `db` with no tasks (enough for reading and changing jobs)."""
    async with App(db.dsn.value, schema=db.schema.value, pool_max_size=pool_max_size) as app:
        yield app


def load_app(spec: str) -> App:
    """Import `module:attribute` and check that it is an App.

    The current directory is put on sys.path first, as `python -m` would.

    Raises:
        CommandError: naming what was not found: the module, the attribute, or an App.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise CommandError(f"APP must be module:attribute (e.g. myproject.jobs:app), got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise CommandError(
                f"cannot import module {module_name!r} of APP {spec!r}: no module named "
                f"{missing!r} (looked in the current directory and sys.path)"
            ) from None
        raise CommandError(
            f"importing module {module_name!r} of APP {spec!r} failed: {exc}"
        ) from None
    except Exception as exc:
        raise CommandError(
            f"importing module {module_name!r} of APP {spec!r} raised {type(exc).__name__}: {exc}"
        ) from None
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            apps = sorted(n for n, v in vars(module).items() if isinstance(v, App))
            hint = f" (Apps it defines: {', '.join(apps)})" if apps else " (it defines no App)"
            raise CommandError(f"module {module_name!r} has no attribute {attribute!r}{hint}")
        found = getattr(found, part)
    if not isinstance(found, App):
        raise CommandError(f"APP {spec!r} is a {type(found).__name__}, not a sweepq.App")
    return found


@contextlib.contextmanager
def app_database(
    spec: str, dsn: str | None, schema: str | None
) -> Iterator[tuple[App, DatabaseSettings]]:
    """Load APP and point it at --dsn (which outranks the App's own DSN and the environment)."""
    try:
        app = load_app(spec)
        if dsn:
            app.configure(dsn=check_dsn(dsn, "--dsn"))
        settings = resolve_app_database(app, dsn=dsn, schema=schema, env=os.environ)
    except (CommandError, SweepqError) as exc:
        fail(str(exc))
    yield app, settings
