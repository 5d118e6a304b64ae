"""Where a setting comes from: the command line, else its `SWEEPQ_*` variable, else a default.

Click reads the variable (`envvar=` on the option) and records which of the two gave the value
(`Context.get_parameter_source`). This names that source, for the worker's banner and for
errors, and reads a setting given as text the same way from either.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec
import typer

from sweepq.core.errors import ConfigurationError, SweepqError

T = TypeVar("T")


class Resolved(msgspec.Struct, Generic[T], frozen=True):
    """A setting's value and where it came from (`--option`, `ENV_VAR`, `APP` or `default`)."""

    value: T
    source: str


@dataclass(frozen=True)
class Parser(Generic[T]):
    """Reads a setting's text (a list, from a repeated option); ValueError: not `expected`."""

    read: Callable[[Any], T]
    expected: str


def env_option(*flags: str, envvar: str | list[str], help: str, metavar: str | None = None) -> Any:
    """An option that its variable (or the first set of several) may give instead.

    Its `help` names the variables and the default itself, in the order they are tried.
    """
    return typer.Option(
        *flags, envvar=envvar, metavar=metavar, help=help, show_default=False, show_envvar=False
    )


def source_of(ctx: typer.Context, name: str) -> str:
    """The option (`--dsn`) or variable (`SWEEPQ_DSN`) that gave parameter `name`, or `default`."""
    param = next(p for p in ctx.command.params if p.name == name)
    found = ctx.get_parameter_source(name)
    kind = found.name if found else "DEFAULT"  # by name: click's enum, or the copy typer bundles
    if kind == "COMMANDLINE":
        return param.opts[0]
    if kind == "ENVIRONMENT":
        return next(var for var in _names(param.envvar) if os.environ.get(var))
    return "default"


def _names(envvar: str | Sequence[str] | None) -> list[str]:
    return [envvar] if isinstance(envvar, str) else list(envvar or ())


def resolve(ctx: typer.Context, name: str, parser: Parser[T], default: T) -> Resolved[T]:
    """Parameter `name` read by `parser`, or `default` where no option or variable gives it.

    A variable's text is stripped; one of blanks only counts as unset, like an empty one.

    Raises:
        ConfigurationError: the value is not valid; the message names where it came from.
    """
    source = source_of(ctx, name)
    if source.startswith("-"):
        given = ctx.params[name]
        return _read(parser, given, source, f"{source} {given!r}")
    text = "" if source == "default" else os.environ[source].strip()
    if not text:
        return Resolved(default, "default")
    return _read(parser, text, source, f"{source}={text!r}")


def _read(parser: Parser[T], given: Any, source: str, shown: str) -> Resolved[T]:
    try:
        return Resolved(parser.read(given), source)
    except SweepqError as exc:  # a check of the value (range, identifier): say where it was set
        raise ConfigurationError(f"{exc} (from {source})") from None
    except ValueError:
        raise ConfigurationError(f"{shown} is not valid: expected {parser.expected}") from None
