"""What a handler can end an execution with, besides returning (success) or raising (failure):
`Snooze`, `RetryAfter` and `Cancel`, and the backoff between failed attempts.

What each ending does to the job is decided in one place, `sweepq.core.decision`.
"""

from __future__ import annotations

from datetime import timedelta

from .retry import default_delay

MAX_DELAY_SECONDS = 36_525 * 86_400.0  # 100 years, as for enqueue's delay: a timestamp can hold it


def _seconds(delay: timedelta | float, what: str) -> float:
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    if not 0 <= seconds <= MAX_DELAY_SECONDS:  # also refuses NaN and infinity
        raise ValueError(f"{what} delay must be >= 0 seconds and at most 100 years, got {delay!r}")
    return seconds


MAX_REASON_LENGTH = 1_000


class Snooze(Exception):
    """Run this job again after `delay`, without charging an attempt.

    Args:
        delay: how long to wait (a timedelta or seconds).
        reason: why it waits, recorded in the job's history (`Job.errors`, kind `snoozed`)
            by the same write as the snooze itself; None records nothing.

    Example:
        >>> raise sweepq.Snooze(timedelta(seconds=30), reason="the API is down")  # doctest: +SKIP
    """

    def __init__(self, delay: timedelta | float, *, reason: str | None = None) -> None:
        self.seconds = _seconds(delay, "Snooze")
        if reason is not None and (
            not isinstance(reason, str) or not 0 < len(reason) <= MAX_REASON_LENGTH
        ):
            raise ValueError(
                f"Snooze reason must be None or a non-empty str of at most "
                f"{MAX_REASON_LENGTH:,} characters, got {reason!r:.80}"
            )
        self.reason = reason
        super().__init__(f"snoozed for {self.seconds:g}s" + (f": {reason}" if reason else ""))


class RetryAfter(Exception):
    """Retry this job after `delay` (a 429's Retry-After, say).

    Args:
        delay: how long to wait (a timedelta or seconds).
        consume_budget: charge the attempt to `max_attempts` (default), or, when False, treat
            it like a snooze: nothing charged, `snoozes` counted, the deadline still applies.
    """

    def __init__(self, delay: timedelta | float, *, consume_budget: bool = True) -> None:
        self.seconds = _seconds(delay, "RetryAfter")
        self.consume_budget = consume_budget
        super().__init__(f"retry after {self.seconds:g}s")


class Cancel(Exception):
    """End this job as `cancelled`: terminal, and not a failure.

    Args:
        reason: recorded in the job's errors.
    """

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        super().__init__(reason or "cancelled by the handler")


def backoff_seconds(attempt: int) -> float:
    """Delay before retry number `attempt`: the default backoff (`retry.default_delay`)."""
    return default_delay(attempt)
