"""Ready-made database-health checks that pace a sweep: `Sweep.throttle`.

A check is any `async (conn) -> timedelta | None`. Before a link of a run fans out, its sweep's
checks are called in order on a connection of the app's pool (not in a transaction): the first
that returns a timedelta postpones the link by that long, without writing any leaf or run row;
None from all of them lets the link go.

The ready-made checks return a `Wait`, a timedelta that also says why (`replica lag 7.2 s > 5 s`)
for the run's status to show. Each costs one short query over PostgreSQL's statistics views:

- `replica_lag`: the replay lag of the replicas in `pg_stat_replication`;
- `long_transactions`: the oldest open transaction of this database in `pg_stat_activity`;
- `dead_tuples`: the fraction of dead rows of one table in `pg_stat_all_tables`.

The first two read views that PostgreSQL shows in full only to roles with the privileges of
`pg_read_all_stats` (`GRANT pg_monitor TO <role>` gives them). A check that cannot see what it
checks does not pass silently: it waits, and its reason names the grant that lets it see.

The names are imported from `sweepq.throttle`; its modules are internal: `wait.py` (`Wait`),
`health.py` (the ready-made checks), `stats.py` (the statistics views they read).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from inspect import isawaitable
from typing import Any, TypeAlias

from ..core.errors import ConfigurationError
from .health import HealthCheck, dead_tuples, long_transactions, replica_lag
from .wait import Wait

__all__ = [
    "Check",
    "HealthCheck",
    "Wait",
    "check_name",
    "dead_tuples",
    "first_wait",
    "long_transactions",
    "replica_lag",
]

Check: TypeAlias = Callable[[Any], Awaitable[timedelta | None]]
"""What `Sweep.throttle` holds: `async (conn) -> timedelta | None`. `conn` is an asyncpg
connection of the app's pool, not in a transaction; a timedelta means "wait this long before
writing more", None means "go"."""


def check_name(check: Check) -> str:
    """How a run's status names `check`: a ready-made check's `repr` (`replica_lag(max_seconds=5)`),
    a function's qualified name (`Backfill.quiet_hours`), else its `repr`."""
    if isinstance(check, HealthCheck):
        return repr(check)
    name = getattr(check, "__qualname__", None)
    return name if isinstance(name, str) else repr(check)


async def first_wait(conn: Any, checks: Iterable[Check]) -> Wait | None:
    """Call `checks` in order on `conn` and return the first wait one of them asks for.

    A check's plain timedelta is returned as a `Wait` whose reason is the check's name
    (`check_name`); a timedelta of zero or less, like None, means "go". The checks after the
    first that asks for a wait are not called.

    Args:
        conn: the connection the checks run on (an asyncpg connection, not in a transaction).
        checks: the checks, such as a sweep's `throttle`.

    Returns:
        The first wait asked for, or None when every check says go.

    Raises:
        ConfigurationError: a check that is not `async`, or that returned something other than
            a timedelta or None.
    """
    for check in checks:
        pending = check(conn)
        if not isawaitable(pending):
            raise ConfigurationError(
                f"throttle check {check_name(check)} returned {pending!r} instead of an "
                "awaitable: define it with `async def check(conn)`"
            )
        result = await pending
        if result is None:
            continue
        if isinstance(result, Wait):
            return result
        if not isinstance(result, timedelta):
            raise ConfigurationError(
                f"throttle check {check_name(check)} returned {result!r}: a check returns a "
                "timedelta (wait this long before writing more) or None (go)"
            )
        if result > timedelta(0):
            return Wait(result, check_name(check))
    return None
