"""The worker's settings on the command line: how each reads, its checks, and its banner line.

Each is named as the `WorkerConfig` field it sets (the `worker` command's parameters are too).
What each reads refuses text that is not a value of its kind; the bounds are the `WorkerConfig`'s,
checked once when the command builds it. A setting that neither an option nor a variable gives
keeps the `WorkerConfig`'s own default, so the command line never drifts from the library.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import typer

from sweepq.core.app import App
from sweepq.core.errors import ConfigurationError, SweepqError
from sweepq.core.ident import queue_name
from sweepq.core.worker import Worker, WorkerConfig

from .common import fail
from .durations import parse_duration, show_duration
from .settings import Parser, Resolved, resolve

WorkerSettings = dict[str, Resolved[Any]]


def _queues(given: str | list[str]) -> list[str]:
    """SWEEPQ_QUEUES is comma-separated; each --queue gives one name."""
    names = [q.strip() for q in given.split(",") if q.strip()] if isinstance(given, str) else given
    if not names:
        raise ValueError(given)
    return [queue_name(q) for q in names]


def _at_least_one(name: str) -> Callable[[str], int]:
    def read(text: str) -> int:
        value = int(text)
        if value < 1:
            raise ConfigurationError(f"{name} must be >= 1, got {value}")
        return value

    return read


def _seconds(text: str) -> float:
    """A finite number of seconds above 0; how far above is the WorkerConfig's to say."""
    value = float(text)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(text)
    return value


def _grace(text: str) -> float:
    value = float(text)
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(text)
    return value


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ConfigurationError:
        raise ValueError(text) from None


def _every(text: str) -> timedelta | None:
    if text.strip().lower() in ("never", "off", "0"):
        return None
    every = _duration(text)
    if every <= timedelta(0):  # "0s": not a period; say 'never' to mean never
        raise ValueError(text)
    return every


_DEFAULTS = {field.name: field.default for field in dataclasses.fields(WorkerConfig)}
_PARSERS: dict[str, Parser[Any]] = {
    "queues": Parser(_queues, "comma-separated queue names"),
    "concurrency": Parser(_at_least_one("concurrency"), "a whole number"),
    "threads": Parser(_at_least_one("threads"), "a whole number"),
    "lease_seconds": Parser(_seconds, "a finite number of seconds above 0, such as 30"),
    "poll_seconds": Parser(_seconds, "a finite number of seconds above 0, such as 1 or 0.5"),
    "grace_seconds": Parser(_grace, "a finite number of seconds, 0 or more, such as 30"),
    "prune_every": Parser(
        _every, "a duration above 0 such as 30m, 1h or 1d, or 'never' to not prune"
    ),
    "prune_older_than": Parser(_duration, "a duration such as 30s, 15m, 12h, 7d or 2w"),
}


def worker_settings(ctx: typer.Context) -> WorkerSettings:
    """Each setting and its source; one that is not valid ends the command with one line."""
    try:
        return {
            name: resolve(ctx, name, parser, _DEFAULTS[name]) for name, parser in _PARSERS.items()
        }
    except SweepqError as exc:
        fail(str(exc))


def build_worker(app: App, settings: WorkerSettings) -> Worker:
    """The Worker `settings` describe, through the one `WorkerConfig` they make; settings it
    refuses end the command with one line, which names the option or variable that gave each
    (`--lease-seconds`, not `lease_seconds`)."""
    try:
        config = WorkerConfig(**{name: setting.value for name, setting in settings.items()})
    except ConfigurationError as exc:
        fail(_named_by_source(str(exc), settings))
    return Worker.from_config(app, config)


def _named_by_source(message: str, settings: WorkerSettings) -> str:
    """`message` with each setting it names that was given renamed as the option or variable
    that gave it; the settings the command line does not set keep their names."""
    for name, setting in settings.items():
        if setting.source != "default":
            message = re.sub(rf"\b{name}\b", setting.source, message)  # --x or SWEEPQ_X
    return message


def banner_lines(settings: WorkerSettings) -> list[tuple[str, str, str]]:
    """(name, value, source) per setting, for the worker's start banner."""
    return [
        (name, _shown(name, setting.value), setting.source) for name, setting in settings.items()
    ]


def _shown(name: str, value: object) -> str:
    match value:
        case None:
            return "one per slot" if name == "threads" else "never"  # prune_every
        case timedelta():
            return show_duration(value)
        case float():
            return f"{value:g}"
        case list() | tuple():
            return ", ".join(value)
        case _:
            return str(value)
