"""A rate limiter shared by every worker through PostgreSQL.

`await ctx.rate_limit("stripe", per_second=5)` reserves the key's next grant with one statement
(GCRA: a theoretical arrival time per key) and then sleeps until the reserved time, holding its
worker slot. Waiting writes nothing, and the job is never released and re-queued, so a limit
cannot mint retries or history rows, however oversubscribed it is.
"""

from __future__ import annotations

import math

from .errors import InvalidJobOptionError

_SLOWEST = 1 / (365.25 * 86_400)  # one grant a year: spacing stays far inside an interval


def spacing_seconds(key: str, *, per_second: float, burst: int = 1) -> float:
    """Check a rate limit's settings; returns the seconds between grants.

    Args:
        key: the limited resource (e.g. an API name); shared by every worker of the schema.
        per_second: grants per second, spaced evenly.
        burst: grants allowed back to back after an idle spell.
    """
    if not isinstance(key, str) or not key or "\x00" in key:
        raise InvalidJobOptionError(f"rate limit key must be a non-empty string, got {key!r}")
    if not (
        isinstance(per_second, int | float)
        and not isinstance(per_second, bool)
        and math.isfinite(per_second)
        and per_second >= _SLOWEST
    ):
        raise InvalidJobOptionError(
            f"per_second must be a number of grants per second of at least one a year, "
            f"got {per_second!r}"
        )
    if not isinstance(burst, int) or isinstance(burst, bool) or burst < 1:
        raise InvalidJobOptionError(f"burst must be an int >= 1, got {burst!r}")
    return 1.0 / per_second
