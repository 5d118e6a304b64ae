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
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from inspect import isawaitable
from types import MappingProxyType
from typing import Any, ClassVar, Self, TypeAlias

import asyncpg
import msgspec

from .core.errors import ConfigurationError
from .core.ident import qualified
from .core.queries import Conn
from .core.sqlfiles import parse_statements

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

DEFAULT_WAIT = timedelta(seconds=5)
# A link postponed for less than the second its own pauses take would only churn its job row;
# one postponed for over an hour acts on a health figure long out of date.
WAIT_BOUNDS = (timedelta(seconds=1), timedelta(hours=1))
DEFAULT_MIN_ROWS = 10_000

_SQL = """
-- name: replication_lag
-- The replica furthest behind in replay, and how many replicas hide their figures from this
-- role (a role without pg_read_all_stats sees each walsender's row with every figure NULL,
-- state included: a visible walsender always has a state).
SELECT extract(epoch FROM max(replay_lag))::float8 AS lag,
       (array_agg(application_name ORDER BY replay_lag DESC NULLS LAST))[1] AS replica,
       count(*) FILTER (WHERE state IS NULL) AS hidden,
       quote_ident(current_user) AS role
FROM pg_catalog.pg_stat_replication;

-- name: transaction_oldest
-- The oldest open transaction of another client session of this database, and the sessions
-- whose transactions this role cannot see: other roles' sessions show it no backend_type,
-- state or xact_start without pg_read_all_stats. Background processes such as autovacuum's
-- workers run as no role (usesysid NULL): they are not sessions that could hold VACUUM back.
WITH others AS (
    SELECT pid, usesysid, usename::text AS usename, application_name, backend_type, xact_start
    FROM pg_catalog.pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
), oldest AS (
    SELECT pid, usename, application_name,
           -- clock_timestamp(), not now(): a caller's transaction would age everything less.
           extract(epoch FROM clock_timestamp() - xact_start)::float8 AS age
    FROM others
    WHERE backend_type = 'client backend' AND xact_start IS NOT NULL
    ORDER BY xact_start
    LIMIT 1
), hidden AS (
    SELECT count(*) AS sessions,
           coalesce(array_agg(DISTINCT coalesce(usename, usesysid::text)), '{}') AS roles
    FROM others
    WHERE backend_type IS NULL AND usesysid IS NOT NULL
)
SELECT oldest.pid, oldest.usename, oldest.application_name, oldest.age,
       hidden.sessions AS hidden, hidden.roles AS hidden_roles,
       quote_ident(current_user) AS role
FROM hidden
LEFT JOIN oldest ON true;

-- name: table_dead_tuples
-- The live and dead row counts of the table named by $1 (quoted, optionally qualified, else
-- found through the search_path); one row whether or not it exists.
SELECT c.relkind::text AS kind, quote_ident(n.nspname) || '.' || quote_ident(c.relname) AS shown,
       s.n_live_tup AS live, s.n_dead_tup AS dead,
       current_setting('search_path') AS search_path
FROM (SELECT to_regclass($1) AS oid) AS named
LEFT JOIN pg_catalog.pg_class AS c ON c.oid = named.oid
LEFT JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_stat_all_tables AS s ON s.relid = named.oid;
"""

_STATEMENTS: Mapping[str, str] = MappingProxyType(parse_statements(_SQL))


# --- what a check returns -----------------------------------------------------------------------


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
        length = _length(seconds, "Wait(seconds=...)")
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


# --- the ready-made checks ----------------------------------------------------------------------


class HealthCheck(ABC):
    """A ready-made check: `await check(conn)` returns a `Wait` or None (go).

    Made by `replica_lag`, `long_transactions` and `dead_tuples`; its `repr` is the call that
    made it (`replica_lag(max_seconds=5)`), which is how a run's status names it.

    Attributes:
        wait: how long a link waits when the check finds the database unhealthy.
    """

    _factory: ClassVar[str]  # the function that makes it, for its repr

    def __init__(self, wait: float | timedelta) -> None:
        self.wait = _wait(wait)

    @abstractmethod
    async def __call__(self, conn: Conn) -> Wait | None:
        """One short query on `conn`: a `Wait` when the database is unhealthy, else None."""

    @property
    def name(self) -> str:
        """The call that made the check, `replica_lag(max_seconds=5)`: its `repr`."""
        return repr(self)

    def __repr__(self) -> str:
        shown = self._arguments()
        if self.wait != DEFAULT_WAIT:
            shown.append(f"wait={self.wait.total_seconds():g}")
        return f"{self._factory}({', '.join(shown)})"

    @abstractmethod
    def _arguments(self) -> list[str]: ...

    def _blind(self, what: str, role: str) -> Wait:
        return Wait(
            self.wait,
            f"{self!r} cannot see {what} as role {role}: GRANT pg_monitor TO {role}",
        )


def replica_lag(max_seconds: float, *, wait: float | timedelta = DEFAULT_WAIT) -> HealthCheck:
    """A check that waits while a replica replays more than `max_seconds` behind.

    It reads `replay_lag` in `pg_stat_replication` on the server the app connects to: for each
    replica streaming from it, the time between WAL being flushed here and that replica
    reporting it applied. The largest is compared with `max_seconds`. No replica, or lags that
    are NULL (a replica that has caught up and is idle), mean go.

    The lag columns are visible only to roles with the privileges of `pg_read_all_stats`
    (`GRANT pg_monitor TO <role>`); another role sees one row per replica with every figure
    NULL. The check then waits, with a reason naming that grant, rather than pass unseen lag;
    with no replica at all it goes, whatever the role.

    Args:
        max_seconds: the most replay lag to go on with (seconds, > 0).
        wait: how long a link waits while a replica is further behind (1 s to 1 hour).

    Returns:
        The check: its `Wait` reads `replica lag 7.2 s > 5 s ('replica1')`.

    Raises:
        ConfigurationError: `max_seconds` or `wait` out of range.

    Example:
        >>> class Backfill(sweepq.Sweep):
        ...     throttle = (sweepq.throttle.replica_lag(5),)
    """
    return _ReplicaLag(_positive(max_seconds, "replica_lag(max_seconds=...)"), wait)


def long_transactions(max_seconds: float, *, wait: float | timedelta = DEFAULT_WAIT) -> HealthCheck:
    """A check that waits while a transaction of this database has been open too long.

    It reads `xact_start` in `pg_stat_activity`: the oldest open transaction of another client
    session of the current database (the checking connection and idle sessions, which hold no
    transaction, do not count; idle in transaction does). Older than `max_seconds`, it holds
    back what VACUUM may remove, so that the dead rows a sweep leaves behind pile up: wait.

    A role sees the transactions of other roles' sessions only with the privileges of
    `pg_read_all_stats` (`GRANT pg_monitor TO <role>`). Without them, while a session of
    another role is connected to the database, the check cannot tell whether it holds a
    transaction, and waits with a reason naming that grant.

    Args:
        max_seconds: the age of the oldest transaction to go on with (seconds, > 0).
        wait: how long a link waits while an older one is open (1 s to 1 hour).

    Returns:
        The check: its `Wait` reads `oldest transaction open 93 s > 60 s (pid 4242, 'psql',
        role 'report')`.

    Raises:
        ConfigurationError: `max_seconds` or `wait` out of range.

    Example:
        >>> class Backfill(sweepq.Sweep):
        ...     throttle = (sweepq.throttle.long_transactions(300),)
    """
    return _LongTransactions(_positive(max_seconds, "long_transactions(max_seconds=...)"), wait)


def dead_tuples(
    table: str,
    max_fraction: float,
    *,
    min_rows: int = DEFAULT_MIN_ROWS,
    wait: float | timedelta = DEFAULT_WAIT,
) -> HealthCheck:
    """A check that waits while too many of a table's rows are dead.

    It reads `n_live_tup` and `n_dead_tup` of `table` in `pg_stat_all_tables` and waits while
    `n_dead_tup / (n_live_tup + n_dead_tup)` is above `max_fraction`: the sweep's updates or
    deletes have outrun (auto)vacuum. A table of fewer than `min_rows` rows, live and dead,
    never waits: vacuuming it is quick, and its fraction swings with a few rows.

    The figures are PostgreSQL's statistics: each session adds its changes at most about once
    a second, and VACUUM and ANALYZE set them. Pick `max_fraction` above the fraction at which
    autovacuum starts on the table (with the default `autovacuum_vacuum_scale_factor` of 0.2,
    a little under 0.17), or the sweep waits for a vacuum that nothing starts.

    Args:
        table: the table, optionally qualified (`"app.users"`); an unqualified name is found
            through the connection's search_path, at each call.
        max_fraction: the fraction of dead rows to go on with (between 0 and 1).
        min_rows: live and dead rows below which the table never waits.
        wait: how long a link waits while the fraction is higher (1 s to 1 hour).

    Returns:
        The check: its `Wait` reads `dead tuples of public.users 31 % > 20 %`. A table that
        does not exist (or is not a table) makes the call raise `ConfigurationError`.

    Raises:
        InvalidIdentifierError: `table` is not `name` or `schema.name` of plain identifiers.
        ConfigurationError: `max_fraction`, `min_rows` or `wait` out of range.

    Example:
        >>> class Backfill(sweepq.Sweep):
        ...     throttle = (sweepq.throttle.dead_tuples("app.users", 0.25),)
    """
    quoted = qualified(table, what="dead_tuples(table=...)")
    fraction = _number(max_fraction, "dead_tuples(max_fraction=...)")
    if not 0 < fraction < 1:
        raise ConfigurationError(
            f"dead_tuples(max_fraction=...) must lie between 0 and 1 (0.2 is 20 % of the rows "
            f"dead), got {max_fraction!r}"
        )
    if not isinstance(min_rows, int) or isinstance(min_rows, bool) or min_rows < 0:
        raise ConfigurationError(f"dead_tuples(min_rows=...) must be an int >= 0, got {min_rows!r}")
    return _DeadTuples(table, quoted, fraction, min_rows, wait)


class _SecondsCheck(HealthCheck):
    """A check of one figure in seconds against its limit, `max_seconds`."""

    def __init__(self, max_seconds: float, wait: float | timedelta) -> None:
        super().__init__(wait)
        self.max_seconds = max_seconds

    def _arguments(self) -> list[str]:
        return [f"max_seconds={self.max_seconds:g}"]

    def _past(self, seconds: float | None) -> str | None:
        """`7.2 s > 5 s` when `seconds` is past the limit; None when it is not, or unknown."""
        if seconds is not None and seconds > self.max_seconds:
            return f"{_over(seconds, self.max_seconds)} s > {self.max_seconds:g} s"
        return None


class _ReplicaLag(_SecondsCheck):
    _factory = "replica_lag"

    async def __call__(self, conn: Conn) -> Wait | None:
        row = await _replication_lag(conn)
        if past := self._past(row.lag):
            shown = f"replica lag {past}"
            return Wait(self.wait, f"{shown} ({row.replica!r})" if row.replica else shown)
        if row.hidden:
            return self._blind(f"the lag of {_count(row.hidden, 'replica')}", row.role)
        return None


class _LongTransactions(_SecondsCheck):
    _factory = "long_transactions"

    async def __call__(self, conn: Conn) -> Wait | None:
        row = await _transaction_oldest(conn)
        if past := self._past(row.age):
            who = [f"pid {row.pid}"]
            if row.application_name:
                who.append(repr(row.application_name))
            if row.usename:
                who.append(f"role {row.usename!r}")
            return Wait(self.wait, f"oldest transaction open {past} ({', '.join(who)})")
        if row.hidden:
            sessions = _count(row.hidden, "session")
            roles = ", ".join(row.hidden_roles)
            return self._blind(
                f"whether {sessions} of role(s) {roles} hold a transaction", row.role
            )
        return None


class _DeadTuples(HealthCheck):
    _factory = "dead_tuples"

    def __init__(
        self, table: str, quoted: str, max_fraction: float, min_rows: int, wait: float | timedelta
    ) -> None:
        super().__init__(wait)
        self.table = table
        self.max_fraction = max_fraction
        self.min_rows = min_rows
        self._quoted = quoted

    def _arguments(self) -> list[str]:
        shown = [repr(self.table), f"max_fraction={self.max_fraction:g}"]
        if self.min_rows != DEFAULT_MIN_ROWS:
            shown.append(f"min_rows={self.min_rows}")
        return shown

    async def __call__(self, conn: Conn) -> Wait | None:
        row = await _table_dead_tuples(conn, self._quoted, self)
        if row.kind is None:
            raise ConfigurationError(
                f"{self!r}: table {self.table!r} does not exist (an unqualified name is looked "
                f"up through the connection's search_path, {row.search_path!r}; qualify it, "
                "e.g. 'app.users')"
            )
        if row.kind == "p":
            raise ConfigurationError(
                f"{self!r}: {row.shown} is partitioned, and its rows (and their statistics) are "
                "its partitions': check the partition the sweep writes to"
            )
        if row.live is None or row.dead is None:
            raise ConfigurationError(
                f"{self!r}: {row.shown} is not a table (relkind {row.kind!r}), so it has no row "
                "statistics: name the table it reads from"
            )
        total = row.live + row.dead
        if total < self.min_rows or total == 0:
            return None
        fraction = row.dead / total
        if fraction <= self.max_fraction:
            return None
        shown = _over(fraction * 100, self.max_fraction * 100)
        return Wait(
            self.wait, f"dead tuples of {row.shown} {shown} % > {self.max_fraction * 100:g} %"
        )


# --- the statements, one wrapper each -----------------------------------------------------------


class _Lag(msgspec.Struct, frozen=True):
    lag: float | None  # seconds, of the replica furthest behind
    replica: str | None  # its application_name
    hidden: int  # replicas whose figures this role cannot see
    role: str  # current_user, quoted as an identifier


class _Oldest(msgspec.Struct, frozen=True):
    pid: int | None
    usename: str | None
    application_name: str | None
    age: float | None  # seconds
    hidden: int  # sessions of other roles whose transactions this role cannot see
    hidden_roles: list[str]
    role: str


class _TableStats(msgspec.Struct, frozen=True):
    kind: str | None  # relkind; None: no such table
    shown: str | None  # schema.name, quoted where needed
    live: int | None
    dead: int | None
    search_path: str


async def _replication_lag(conn: Conn) -> _Lag:
    record = await conn.fetchrow(_STATEMENTS["replication_lag"])
    return msgspec.convert(dict(record or {}), _Lag)


async def _transaction_oldest(conn: Conn) -> _Oldest:
    record = await conn.fetchrow(_STATEMENTS["transaction_oldest"])
    return msgspec.convert(dict(record or {}), _Oldest)


async def _table_dead_tuples(conn: Conn, quoted: str, check: HealthCheck) -> _TableStats:
    try:
        record = await conn.fetchrow(_STATEMENTS["table_dead_tuples"], quoted)
    except asyncpg.InsufficientPrivilegeError as exc:
        # to_regclass() refuses a name qualified with a schema this role may not use.
        raise ConfigurationError(
            f"{check!r}: {exc} (the role needs USAGE on the table's schema to look the table "
            "up: GRANT USAGE ON SCHEMA <schema> TO <role>)"
        ) from None
    return msgspec.convert(dict(record or {}), _TableStats)


# --- arguments ------------------------------------------------------------------------------------


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def _positive(value: object, what: str) -> float:
    number = _number(value, what)
    if number <= 0:
        raise ConfigurationError(f"{what} must be a number of seconds > 0, got {value!r}")
    return number


def _length(value: object, what: str) -> timedelta:
    if isinstance(value, timedelta):
        if value <= timedelta(0):
            raise ConfigurationError(f"{what} must be a positive length, got {value!r}")
        return value
    return timedelta(seconds=_positive(value, what))


def _wait(value: object) -> timedelta:
    length = _length(value, "wait")
    low, high = WAIT_BOUNDS
    if not low <= length <= high:
        raise ConfigurationError(
            f"wait must lie between {low.total_seconds():g} s and {high.total_seconds():g} s "
            f"(how long a link waits before it checks again), got {value!r}"
        )
    return length


# --- reasons ----------------------------------------------------------------------------------


def _over(value: float, limit: float) -> str:
    """`value` with as few decimals as show it above `limit` (one below 10, else none): 7.2,
    93, and 20.4 rather than 20 when the limit is 20."""
    decimals = 1 if value < 10 else 0
    while decimals < 6 and round(value, decimals) <= limit:
        decimals += 1
    return f"{value:.{decimals}f}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
