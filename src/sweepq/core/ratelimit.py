"""A rate limiter shared by every worker through PostgreSQL.

`await ctx.rate_limit("stripe", per_second=5)` reserves the key's next grant with one statement
(GCRA: a theoretical arrival time per key) and then sleeps until the reserved time, holding its
worker slot. Waiting writes nothing, and the job is never released and re-queued, so a limit
cannot mint retries or history rows, however oversubscribed it is.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import anyio

from .errors import InvalidJobOptionError

if TYPE_CHECKING:
    from .app import App


async def rate_limit(app: App, key: str, *, per_second: float, burst: int = 1) -> float:
    """Wait for a grant of `key` at most `per_second` per second; returns seconds waited.

    Args:
        key: the limited resource (e.g. an API name); shared by every worker of the schema.
        per_second: grants per second, spaced evenly.
        burst: grants allowed back to back after an idle spell.
    """
    if not isinstance(key, str) or not key:
        raise InvalidJobOptionError(f"rate limit key must be a non-empty string, got {key!r}")
    if not (isinstance(per_second, int | float) and math.isfinite(per_second) and per_second > 0):
        raise InvalidJobOptionError(f"per_second must be a number > 0, got {per_second!r}")
    if not isinstance(burst, int) or burst < 1:
        raise InvalidJobOptionError(f"burst must be an int >= 1, got {burst!r}")
    wait = await app.queries.runtime.rate_limit_reserve(app.pool, key, 1.0 / per_second, burst)
    if wait > 0:
        await anyio.sleep(wait)
    return wait
