"""What the commands share: errors, output, and running async code.

Every failure a user can fix ends the command with one red line on stderr and exit code 2; no
traceback, and never a DSN's password. Output fits the terminal, 80 columns too; piped into a
file or another program it is not wrapped at all (unless COLUMNS asks for a width).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
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

from sweepq.core.database import UNMIGRATED
from sweepq.core.dsn import redact
from sweepq.core.errors import SweepqError
from sweepq.core.logs import JsonFormatter
from sweepq.sweeps.app import App

T = TypeVar("T")

# What a statement raises on a schema that lacks a table, column, function or type it reads.
_UNMIGRATED = (*UNMIGRATED, asyncpg.UndefinedObjectError)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


class CommandError(Exception):
    """A command could not do what was asked (e.g. a job that does not exist)."""


def split_pair(pair: str, option: str, form: str) -> tuple[str, str]:
    """A `name=value` given to `option`: its name (stripped) and its value; one with no `=` or
    no name ends the command, saying it is not `form`."""
    name, sep, value = pair.partition("=")
    name = name.strip()
    if not sep or not name:
        raise CommandError(f"{option} {pair!r} is not {form}")
    return name, value


# The width of output that is not on a terminal: wide enough that no line is wrapped.
UNWRAPPED = 1_000_000


def stdout() -> Console:
    """The console of a command's output: on a terminal, its width; elsewhere (a pipe, a file),
    lines as long as they are, so that no message or row is broken in two, unless COLUMNS
    asks for a width."""
    console = Console(highlight=False)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.soft_wrap = True
        console.width = UNWRAPPED
    return console


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


# Set while a command writes JSON lines only (`sweepq worker --log-format json`).
_JSON_LINES: contextvars.ContextVar[bool] = contextvars.ContextVar("json_lines", default=False)


@contextlib.contextmanager
def json_lines(on: bool = True) -> Iterator[None]:
    """Within the block (`on`), `fail` writes its line as a JSON object, as the log does."""
    token = _JSON_LINES.set(on)
    try:
        yield
    finally:
        _JSON_LINES.reset(token)


def json_line(message: str, *, level: int = logging.INFO, **fields: Any) -> str:
    """`message` and `fields` as one JSON object, in the shape of the log's JSON lines (time,
    level, logger `sweepq.cli`, message, then the fields)."""
    record = logging.LogRecord("sweepq.cli", level, __file__, 0, message, None, None)
    record.__dict__.update(fields)
    return JsonFormatter().format(record)


def fail(message: str) -> NoReturn:
    """Print `message` as one red line on stderr (a JSON object within `json_lines`) and exit
    with code 2."""
    line = " ".join(redact(message).split())
    if _JSON_LINES.get():
        print(json_line(line, level=logging.ERROR), file=sys.stderr, flush=True)
        raise typer.Exit(2)
    Console(stderr=True, highlight=False).print(
        Text(f"error: {line}", style="bold red"), soft_wrap=True
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
        if isinstance(exc, _UNMIGRATED):  # met outside `opened`, which names what is pending
            fail(f"{exc}: run `sweepq migrate` (with the same --schema) if it is not migrated")
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


@contextlib.asynccontextmanager
async def opened(app: App) -> AsyncIterator[App]:
    """`app`, open for the block. A read that meets a table, column or function the schema
    lacks raises `SchemaNotMigratedError`, naming the migrations pending and the fix (or, if
    none is pending, what the read raised)."""
    async with app:
        try:
            yield app
        except _UNMIGRATED:
            await app.db.raise_if_unmigrated()
            raise


def respond(
    app: App,
    as_json: bool,
    call: Callable[[App], Awaitable[T]],
    view: Callable[[T], RenderableType],
) -> T:
    """Open `app`, `call` it, and print what it returns: as JSON with --json, else as `view`;
    return it too."""

    async def go() -> T:
        async with opened(app):
            found = await call(app)
        if as_json:
            print_json(found)
        else:
            stdout().print(view(found))
        return found

    return run(go)
