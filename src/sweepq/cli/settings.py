"""Where each setting comes from: command line > environment (`SWEEPQ_*`) > defaults.

Pure functions over the options given and an environment mapping, so that the precedence can be
tested without a process. Each value travels with its source, which the worker prints at start.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Generic, TypeVar

import msgspec

from sweepq.core.app import App
from sweepq.core.dsn import redact
from sweepq.core.errors import ConfigurationError, InvalidIdentifierError
from sweepq.core.ident import ident, queue_name
from sweepq.core.worker import Worker

T = TypeVar("T")

DEFAULT_SCHEMA = "sweepq"


class Resolved(msgspec.Struct, Generic[T], frozen=True):
    """A setting's value and where it came from (`--option`, `ENV_VAR`, `APP` or `default`)."""

    value: T
    source: str


class DatabaseSettings(msgspec.Struct, frozen=True):
    dsn: Resolved[str]
    schema: Resolved[str]

    def lines(self) -> list[tuple[str, str, str]]:
        return [
            ("database", redact(self.dsn.value), self.dsn.source),
            ("schema", self.schema.value, self.schema.source),
        ]


class WorkerSettings(msgspec.Struct, frozen=True):
    queues: Resolved[list[str]]
    concurrency: Resolved[int]
    lease_seconds: Resolved[float]
    poll_seconds: Resolved[float]
    grace_seconds: Resolved[float]
    prune_every: Resolved[timedelta | None]
    prune_older_than: Resolved[timedelta]

    def lines(self) -> list[tuple[str, str, str]]:
        """(name, value, source) per setting, for the worker's start-up banner."""
        every = self.prune_every.value
        return [
            ("queues", ", ".join(self.queues.value), self.queues.source),
            ("concurrency", str(self.concurrency.value), self.concurrency.source),
            ("lease_seconds", f"{self.lease_seconds.value:g}", self.lease_seconds.source),
            ("poll_seconds", f"{self.poll_seconds.value:g}", self.poll_seconds.source),
            ("grace_seconds", f"{self.grace_seconds.value:g}", self.grace_seconds.source),
            ("prune_every", "never" if every is None else _show(every), self.prune_every.source),
            ("prune_older_than", _show(self.prune_older_than.value), self.prune_older_than.source),
        ]


def _show(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    for unit, size in (("w", 604_800), ("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _worker_default(name: str) -> Any:
    # The worker's own defaults, so the command line never drifts from the library.
    return inspect.signature(Worker.__init__).parameters[name].default


def _pick(
    option: str,
    given: T | None,
    env_name: str,
    env: Mapping[str, str],
    parse: Callable[[str], T],
    default: T,
) -> Resolved[T]:
    if given is not None:
        return Resolved(given, option)
    text = env.get(env_name, "").strip()
    if text:
        try:
            return Resolved(parse(text), env_name)
        except ValueError:
            raise ConfigurationError(
                f"{env_name}={text!r} is not valid: expected {_EXPECTED[parse]}"
            ) from None
    return Resolved(default, "default")


def _queues(text: str) -> list[str]:
    names = [q.strip() for q in text.split(",") if q.strip()]
    if not names:
        raise ValueError(text)
    return names


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ConfigurationError:
        raise ValueError(text) from None


def _every(text: str) -> timedelta | None:
    if text.strip().lower() in ("never", "off", "0"):
        return None
    return _duration(text)


_EXPECTED: dict[Callable[[str], Any], str] = {
    int: "a whole number",
    float: "a number of seconds",
    _queues: "comma-separated queue names",
    _duration: "a duration such as 30s, 15m, 12h, 7d or 2w",
    _every: "a duration such as 30m, 1h or 1d, or 'never'",
}


def resolve_worker(
    *,
    queues: Sequence[str] | None,
    max_concurrency: int | None,
    lease_seconds: float | None,
    poll_seconds: float | None,
    grace_seconds: float | None = None,
    prune_every: str | None = None,
    prune_older_than: str | None = None,
    env: Mapping[str, str],
) -> WorkerSettings:
    """The worker's settings from its options (None: not given), the environment, the defaults.

    Raises:
        ConfigurationError: a value that cannot be parsed or is out of range, naming its source.
    """
    default_queues: Sequence[str] = _worker_default("queues")
    settings = WorkerSettings(
        queues=_pick(
            "--queue", list(queues) if queues else None, "SWEEPQ_QUEUES", env, _queues,
            list(default_queues),
        ),
        concurrency=_pick(
            "--max-concurrency", max_concurrency, "SWEEPQ_MAX_CONCURRENCY", env, int,
            int(_worker_default("concurrency")),
        ),
        lease_seconds=_pick(
            "--lease-seconds", lease_seconds, "SWEEPQ_LEASE_SECONDS", env, float,
            float(_worker_default("lease_seconds")),
        ),
        poll_seconds=_pick(
            "--poll-seconds", poll_seconds, "SWEEPQ_POLL_SECONDS", env, float,
            float(_worker_default("poll_seconds")),
        ),
        grace_seconds=_pick(
            "--grace-seconds", grace_seconds, "SWEEPQ_GRACE_SECONDS", env, float,
            float(_worker_default("grace_seconds")),
        ),
        prune_every=_pick_text(
            "--prune-every", prune_every, "SWEEPQ_PRUNE_EVERY", env, _every,
            _worker_default("prune_every"),
        ),
        prune_older_than=_pick_text(
            "--prune-older-than", prune_older_than, "SWEEPQ_PRUNE_OLDER_THAN", env, _duration,
            _worker_default("prune_older_than"),
        ),
    )  # fmt: skip
    for q in settings.queues.value:
        try:
            queue_name(q)
        except InvalidIdentifierError as exc:
            raise ConfigurationError(f"{exc} (from {settings.queues.source})") from None
    _at_least("concurrency", settings.concurrency, 1)
    _positive("lease_seconds", settings.lease_seconds)
    _positive("poll_seconds", settings.poll_seconds)
    if settings.grace_seconds.value < 0:
        raise ConfigurationError(
            f"grace_seconds must be >= 0, got {settings.grace_seconds.value:g} "
            f"(from {settings.grace_seconds.source})"
        )
    return settings


def _pick_text(
    option: str,
    given: str | None,
    env_name: str,
    env: Mapping[str, str],
    parse: Callable[[str], T],
    default: T,
) -> Resolved[T]:
    """Like `_pick`, for options given as text and parsed like the environment's value."""
    if given is None:
        return _pick(option, None, env_name, env, parse, default)
    try:
        return Resolved(parse(given), option)
    except ValueError:
        raise ConfigurationError(
            f"{option} {given!r} is not valid: expected {_EXPECTED[parse]}"
        ) from None


def _at_least(name: str, setting: Resolved[int], low: int) -> None:
    if setting.value < low:
        raise ConfigurationError(
            f"{name} must be >= {low}, got {setting.value} (from {setting.source})"
        )


def _positive(name: str, setting: Resolved[float]) -> None:
    if not setting.value > 0:
        raise ConfigurationError(
            f"{name} must be > 0 seconds, got {setting.value:g} (from {setting.source})"
        )


def resolve_database(
    *, dsn: str | None, schema: str | None, env: Mapping[str, str]
) -> DatabaseSettings:
    """The DSN (--dsn > SWEEPQ_DSN > DATABASE_URL) and schema (--schema > SWEEPQ_SCHEMA > default).

    Raises:
        ConfigurationError: no DSN anywhere, or a schema name that is not an identifier.
    """
    found: Resolved[str] | None = None
    for source, value in (
        ("--dsn", dsn),
        ("SWEEPQ_DSN", env.get("SWEEPQ_DSN")),
        ("DATABASE_URL", env.get("DATABASE_URL")),
    ):
        if value:
            found = Resolved(value, source)
            break
    if found is None:
        raise ConfigurationError(
            "no database given: pass --dsn postgresql://..., or set SWEEPQ_DSN (or DATABASE_URL)"
        )
    resolved_schema = _pick("--schema", schema, "SWEEPQ_SCHEMA", env, str, DEFAULT_SCHEMA)
    ident(resolved_schema.value, what=f"schema name (from {resolved_schema.source})")
    return DatabaseSettings(found, resolved_schema)


def resolve_app_database(
    app: App, *, dsn: str | None, schema: str | None, env: Mapping[str, str]
) -> DatabaseSettings:
    """The database of an App named by APP, checked against --dsn/--schema and the environment.

    `--dsn` has already been applied to the App (`App.configure`); an App built with another
    schema than asked is refused rather than silently used.
    """
    app_dsn = app.dsn  # raises ConfigurationError naming --dsn/SWEEPQ_DSN when there is none
    if dsn:
        dsn_source = "--dsn"
    elif app_dsn == env.get("SWEEPQ_DSN"):
        dsn_source = "SWEEPQ_DSN"
    elif app_dsn == env.get("DATABASE_URL"):
        dsn_source = "DATABASE_URL"
    else:
        dsn_source = "APP"
    for source, wanted in (("--schema", schema), ("SWEEPQ_SCHEMA", env.get("SWEEPQ_SCHEMA"))):
        if wanted and wanted != app.schema:
            raise ConfigurationError(
                f"{source} says schema {wanted!r} but the App uses schema {app.schema!r}; "
                "an App's schema is set where it is built (sweepq.App(schema=...))"
            )
        if wanted:
            return DatabaseSettings(Resolved(app_dsn, dsn_source), Resolved(app.schema, source))
    return DatabaseSettings(Resolved(app_dsn, dsn_source), Resolved(app.schema, "APP"))


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_MAX_DURATION_DAYS = 36_525  # 100 years; a timedelta or a database interval overflows far beyond


def parse_duration(text: str, *, what: str = "duration") -> timedelta:
    """Parse `30s`, `15m`, `12h`, `7d`, `2w` (a number and one unit).

    Raises:
        ConfigurationError: anything else, with the accepted forms.
    """
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise ConfigurationError(
            f"{what} {text!r} is not a duration: use a number and a unit s, m, h, d or w "
            "(e.g. 30s, 15m, 12h, 7d, 2w)"
        )
    seconds = float(match[1]) * _UNITS[match[2]]
    if seconds > _MAX_DURATION_DAYS * 86400:
        raise ConfigurationError(
            f"{what} {text!r} is too long: use at most 100 years ({_MAX_DURATION_DAYS}d)"
        )
    return timedelta(seconds=seconds)
