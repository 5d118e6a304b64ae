"""`Wait`, what a ready-made check returns (a timedelta that says why), and the checks of the
lengths and numbers the checks are made with."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Self

from ..core.errors import ConfigurationError


class Wait(timedelta):
    """A timedelta that says why: "wait this long, because ...".

    It is a `datetime.timedelta` in every way (arithmetic, comparison, `total_seconds()`;
    equal to a timedelta of the same length whatever its reason), with a `reason` for the run's
    status to show: `throttled: replica lag 7.2 s > 5 s`.

    Args:
        seconds: how long to wait: seconds (> 0, finite) or a positive timedelta.
        reason: why, in a few words, for a person reading the run's status.

    Raises:
        ConfigurationError: a length that is not positive and finite, or an empty reason.

    Example:
        >>> waited = Wait(7.5, "replica lag 7.2 s > 5 s")
        >>> waited == timedelta(seconds=7.5), waited.reason
        (True, 'replica lag 7.2 s > 5 s')
    """

    __slots__ = ("_reason",)
    _reason: str

    def __new__(cls, seconds: float | timedelta, reason: str) -> Self:
        length = as_length(seconds, "Wait(seconds=...)")
        return super().__new__(
            cls, days=length.days, seconds=length.seconds, microseconds=length.microseconds
        )

    def __init__(self, seconds: float | timedelta, reason: str) -> None:
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigurationError(f"Wait(reason=...) must be a non-empty str, got {reason!r}")
        self._reason = reason

    @property
    def reason(self) -> str:
        """Why to wait, in a few words: `replica lag 7.2 s > 5 s`."""
        return self._reason

    def __repr__(self) -> str:
        return f"Wait(seconds={self.total_seconds():g}, reason={self._reason!r})"

    def __reduce__(self) -> tuple[type[Self], tuple[timedelta, str]]:
        return (type(self), (timedelta(self.days, self.seconds, self.microseconds), self._reason))


def as_number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def as_seconds(value: object, what: str) -> float:
    number = as_number(value, what)
    if number <= 0:
        raise ConfigurationError(f"{what} must be a number of seconds > 0, got {value!r}")
    return number


def as_length(value: object, what: str) -> timedelta:
    if isinstance(value, timedelta):
        if value <= timedelta(0):
            raise ConfigurationError(f"{what} must be a positive length, got {value!r}")
        return value
    return timedelta(seconds=as_seconds(value, what))
