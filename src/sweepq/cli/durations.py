"""Durations on the command line: `30s`, `15m`, `12h`, `7d`, `2w`, read and shown back."""

from __future__ import annotations

import re
from datetime import timedelta

from sweepq.core.errors import ConfigurationError

from .common import fail

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


def duration_option(text: str, option: str) -> timedelta:
    """The duration given to `option`; one that does not parse ends the command with one line."""
    try:
        return parse_duration(text, what=option)
    except ConfigurationError as exc:
        fail(str(exc))


def show_duration(delta: timedelta) -> str:
    """`delta` in the largest unit up to days that divides it: 1h, 7d, 14d, 90s (days, not
    weeks, as the docs and the options' defaults write them)."""
    seconds = delta.total_seconds()
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
