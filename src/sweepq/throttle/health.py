"""The ready-made checks: `replica_lag`, `long_transactions`, `dead_tuples`, and the
`HealthCheck` each returns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import timedelta
from typing import ClassVar

from ..core.errors import ConfigurationError
from ..core.ident import qualified
from ..core.queries import Conn
from .stats import replication_lag, table_dead_tuples, transaction_oldest
from .wait import Wait, as_length, as_number, as_seconds

DEFAULT_WAIT = timedelta(seconds=5)
# A link postponed for less than the second its own pauses take would only churn its job row;
# one postponed for over an hour acts on a health figure long out of date.
WAIT_BOUNDS = (timedelta(seconds=1), timedelta(hours=1))
DEFAULT_MIN_ROWS = 10_000


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
    return _ReplicaLag(as_seconds(max_seconds, "replica_lag(max_seconds=...)"), wait)


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
    return _LongTransactions(as_seconds(max_seconds, "long_transactions(max_seconds=...)"), wait)


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
    fraction = as_number(max_fraction, "dead_tuples(max_fraction=...)")
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
        row = await replication_lag(conn)
        if past := self._past(row.lag):
            shown = f"replica lag {past}"
            return Wait(self.wait, f"{shown} ({row.replica!r})" if row.replica else shown)
        if row.hidden:
            return self._blind(f"the lag of {_count(row.hidden, 'replica')}", row.role)
        return None


class _LongTransactions(_SecondsCheck):
    _factory = "long_transactions"

    async def __call__(self, conn: Conn) -> Wait | None:
        row = await transaction_oldest(conn)
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
        row = await table_dead_tuples(conn, self._quoted, self)
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


def _wait(value: object) -> timedelta:
    length = as_length(value, "wait")
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
