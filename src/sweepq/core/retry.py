"""Retry policies: how long a failed execution waits before the next attempt, and which
exceptions are worth another attempt at all.

A `RetryPolicy` is set on a task (`@app.task(retry=...)`) or on the App as the default of its
tasks (`App(retry=...)`). The outcome decision (`core/decision.py`) applies it; deadlines and
`max_attempts` still win over it.

    @app.task(retry=sweepq.RetryPolicy(
        backoff=sweepq.backoff.exponential(base=2, cap=600),
        discard_on=(InvalidAddress,),     # retrying cannot fix these: fail at once
    ))
    async def send_email(ctx: sweepq.Context, to: str) -> None: ...
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import ConfigurationError

Backoff = Callable[[int, BaseException], float]
"""How long to wait (seconds) after failed attempt `attempt` (1, 2, ...) that raised `error`."""


@dataclass(frozen=True)
class RetryPolicy:
    """What a failed execution does next.

    Attributes:
        backoff: the wait after a failed attempt (attempt number, exception) -> seconds; None
            keeps the default, 1 s doubling per attempt with 25 % jitter, up to an hour.
        retry_on: when given, only these exception types are retried; any other fails the job
            at once (`failure_reason = "error"`).
        discard_on: exception types that fail the job at once (`"error"`): a 4xx from an API,
            a validation error, whatever another attempt cannot fix.
    """

    backoff: Backoff | None = None
    retry_on: tuple[type[BaseException], ...] | None = None
    discard_on: tuple[type[BaseException], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.backoff is not None and not callable(self.backoff):
            raise ConfigurationError(
                f"RetryPolicy: backoff must be a function (attempt, error) -> seconds, such as "
                f"sweepq.backoff.exponential(), got {self.backoff!r}"
            )
        for name in ("retry_on", "discard_on"):
            types = getattr(self, name)
            if types is None and name == "retry_on":
                continue
            if not isinstance(types, tuple) or not all(
                isinstance(t, type) and issubclass(t, BaseException) for t in types
            ):
                raise ConfigurationError(
                    f"RetryPolicy: {name} must be a tuple of exception types, got {types!r}"
                )

    def discards(self, error: BaseException) -> bool:
        """Whether `error` fails the job at once instead of being retried."""
        if self.discard_on and isinstance(error, self.discard_on):
            return True
        return self.retry_on is not None and not isinstance(error, self.retry_on)

    def delay(self, attempt: int, error: BaseException) -> float | None:
        """The policy's wait after `attempt`, or None to keep the default backoff."""
        if self.backoff is None:
            return None
        seconds = float(self.backoff(attempt, error))
        if not math.isfinite(seconds) or seconds < 0:
            raise ConfigurationError(
                f"the retry backoff returned {seconds!r} for attempt {attempt}: it must return "
                "a finite number of seconds >= 0"
            )
        return seconds


def _jittered(seconds: float, jitter: float) -> float:
    return seconds * (1 + random.uniform(-jitter, jitter)) if jitter else seconds


def _checked(jitter: float, cap: float, **sizes: float) -> None:
    if not 0 <= jitter < 1:
        raise ConfigurationError(f"jitter must be in [0, 1), got {jitter!r}")
    for name, value in {"cap": cap, **sizes}.items():
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise ConfigurationError(f"{name} must be a number of seconds >= 0, got {value!r}")


# The default backoff, of tasks whose policy sets none: 1 s doubling per attempt, at most an
# hour, each +- 25 % (jitter spreads the retries of jobs that failed together).
_BASE, _FACTOR, _CAP, _JITTER = 1.0, 2.0, 3600.0, 0.25


def default_delay(attempt: int) -> float:
    """The default backoff's wait after failed attempt `attempt` (1, 2, ...), in seconds."""
    return _exponential(_BASE, _FACTOR, _CAP, _JITTER, max(attempt, 1))


def _exponential(base: float, factor: float, cap: float, jitter: float, attempt: int) -> float:
    return _jittered(min(base * factor ** min(attempt - 1, 1_000), cap), jitter)


def exponential(
    base: float = _BASE, factor: float = _FACTOR, cap: float = _CAP, jitter: float = _JITTER
) -> Backoff:
    """`base * factor ** (attempt - 1)` seconds, at most `cap`, each +- `jitter` (a fraction).

    Example:
        >>> sweepq.backoff.exponential(base=2, cap=600)  # 2 s, 4 s, 8 s, ... 600 s
    """
    _checked(jitter, cap, base=base, factor=factor)

    def wait(attempt: int, error: BaseException) -> float:
        return _exponential(base, factor, cap, jitter, attempt)

    return wait


def linear(step: float = 10.0, cap: float = 3600.0, jitter: float = 0.25) -> Backoff:
    """`step * attempt` seconds, at most `cap`, each +- `jitter` (a fraction)."""
    _checked(jitter, cap, step=step)

    def wait(attempt: int, error: BaseException) -> float:
        return _jittered(min(step * attempt, cap), jitter)

    return wait


def constant(delay: float = 10.0, jitter: float = 0.25) -> Backoff:
    """`delay` seconds after every failed attempt, +- `jitter` (a fraction)."""
    _checked(jitter, delay, delay=delay)

    def wait(attempt: int, error: BaseException) -> float:
        return _jittered(delay, jitter)

    return wait
