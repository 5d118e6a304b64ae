"""`TableSweep`: a sweep over a table, declared by its table, key and filter; the keyset SQL is
generated from validated identifiers.

The generated page query is a row-value comparison against the cursor, in key order, with a
LIMIT (never OFFSET):

    SELECT <columns> FROM <table> WHERE (<where>) AND (k1, k2) > ($1::text::<t1>, $2::text::<t2>)
    ORDER BY k1, k2 LIMIT $3

Cursor values travel as JSON and come back as text that each key column's own type parses
(`format_type` of the column, checked before use), so a timestamptz, uuid or numeric cursor
compares exactly as the database orders it. Rows become dicts of JSON values: datetimes, dates
and times as ISO 8601, UUIDs and decimals as strings, bytea as `\\x` hex.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import uuid
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, ClassVar

import asyncpg
import msgspec

from ..core.errors import InvalidIdentifierError
from ..core.ident import ident, qualified
from ..core.queries import Conn
from .errors import InvalidSweepError, SweepFault
from .queries import ColumnInfo, SweepQueries
from .sweep import Sweep

# What format_type may return for a type we cast cursor text to: words, digits, spaces,
# a schema dot, a typmod in parentheses, array brackets. Anything else (quotes above all) is
# refused rather than pasted into SQL.
_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_ .]*(\([0-9, ]+\))?[A-Za-z0-9_ ]*(\[\])*")
_KINDS = {"r": "table", "p": "partitioned table", "m": "materialized view"}


class _Plan(msgspec.Struct, frozen=True):
    """A TableSweep bound to its table: the checked columns and the generated statements."""

    selected: tuple[str, ...]
    key: tuple[str, ...]
    identity: tuple[str, ...]
    first_page: str
    next_page: str
    explain: str
    count: str


class TableSweep(Sweep):
    """A sweep over the rows of one table, keyset-paged by a declared key.

    Declare `table`, `key` (a tuple of columns ending in a unique one) and optionally `where`
    and `columns`; write `handle(ctx, item)`, where `item` is the row as a dict of JSON values.
    The table and key are checked against the catalog when a run starts: a missing table or
    column, a key column that may be NULL, or a key that is not unique is refused with a message
    naming the fix.

    Attributes:
        table: the table, optionally qualified (`"app.users"`); unqualified names resolve
            through the connection's search_path.
        key: the cursor columns, e.g. `("created_at", "id")`. Some unique index (or the primary
            key) must cover a subset of them, normally the last one. Choose columns the walk
            (and the handler above all) never writes: a row whose key moves past the cursor is
            served again, and the run fails rather than repeat it.
        where: an SQL condition on the rows to visit, written by the developer in code, never
            built from user input: it is pasted into the query as is (`"deleted_at IS NULL"`).
        columns: the columns each item carries (default: all); the key columns are always added.
        count_seconds: how long counting the rows at the start may take (for an exact total in
            the progress); past it, or with 0, the planner's estimate is the total.

    Example:
        >>> @app.register_sweep
        ... class TouchUsers(sweepq.TableSweep):
        ...     name = "touch-users"
        ...     table = "users"
        ...     key = ("created_at", "id")
        ...     where = "deleted_at IS NULL"
        ...
        ...     async def handle(self, ctx, item):
        ...         ...
    """

    table: ClassVar[str] = ""
    # Declared columns replace the key() method of a plain Sweep.
    key: ClassVar[tuple[str, ...]] = ()  # type: ignore[assignment]
    where: ClassVar[str | None] = None
    columns: ClassVar[tuple[str, ...] | None] = None
    count_seconds: ClassVar[float] = 2.0

    _plan: _Plan | None = None

    # the layer's hooks --------------------------------------------------------------------------

    async def prepare(self, conn: Conn) -> None:
        """Check the table, columns and key against the catalog and build the page queries."""
        if self._plan is not None:
            return
        plan = await _build_plan(type(self), self._catalog(), conn)
        try:
            # Plan (not run) the walk's query once: a `where` that does not fit the table is
            # refused here, not by the first link. A savepoint keeps a caller's transaction.
            async with conn.transaction():
                await conn.fetchval(plan.explain)
        except asyncpg.PostgresError as exc:
            raise InvalidSweepError(
                f"sweep {self.name!r}: its query on table {self.table!r} does not run: {exc} "
                f"(where = {self.where!r})"
            ) from None
        self._plan = plan

    async def page(
        self, conn: Conn, after: tuple[Any, ...] | None, limit: int
    ) -> Sequence[dict[str, Any]]:
        """The next rows after the cursor `after`, in key order, by the generated keyset query.

        Each row is a dict of JSON values: timestamps, dates and times in ISO 8601, UUIDs and
        numerics as strings, `bytea` as `\\x` hex.
        """
        plan = await self._ready(conn)
        if after is None:
            rows = await conn.fetch(plan.first_page, limit)
        else:
            if len(after) != len(plan.key):
                raise SweepFault(
                    f"sweep {self.name!r}: the cursor {list(after)!r} does not fit the key "
                    f"{plan.key!r} (was the key changed while a run was active?)"
                )
            rows = await conn.fetch(plan.next_page, *(_cursor_text(v) for v in after), limit)
        return [{name: jsonable(value) for name, value in row.items()} for row in rows]

    def cursor_of(self, item: Any) -> tuple[Any, ...]:
        """The values of the `key` columns in the row `item`."""
        return tuple(item[column] for column in type(self).key)

    def identity(self, item: Any) -> tuple[Any, ...]:
        """The values of the key's unique columns in the row `item`: the leaf's dedup key."""
        plan = self._plan
        columns = plan.identity if plan is not None else type(self).key
        return tuple(item[column] for column in columns)

    def advances(self, cursor: tuple[Any, ...], key: tuple[Any, ...]) -> bool:
        """Always: the page query itself returns only rows whose key is past the cursor."""
        return True

    async def count(self, conn: Conn) -> int | None:
        """The rows the walk covers, counted if that takes under `count_seconds`, else None."""
        if not self.count_seconds:
            return None
        plan = await self._ready(conn)
        try:
            async with conn.transaction():
                previous = await conn.fetchval("SELECT current_setting('statement_timeout')")
                limit = f"{int(self.count_seconds * 1000)}ms"
                await conn.execute("SELECT set_config('statement_timeout', $1, true)", limit)
                rows = await conn.fetchval(plan.count)
                await conn.execute("SELECT set_config('statement_timeout', $1, true)", previous)
        except asyncpg.QueryCanceledError:
            return None
        return int(rows)

    async def estimate(self, conn: Conn) -> int | None:
        """The planner's estimate of the rows the walk covers (no scan of the table)."""
        plan = await self._ready(conn)
        text = await conn.fetchval(plan.explain)
        try:
            rows = msgspec.json.decode(text)[0]["Plan"]["Plan Rows"]
        except (msgspec.DecodeError, LookupError, TypeError):
            return None
        return int(rows) if isinstance(rows, int | float) and rows >= 0 else None

    # checks -------------------------------------------------------------------------------------

    @classmethod
    def check_class(cls) -> None:
        """Refuse declarations that cannot work (table, key, columns, where), naming the fix."""
        super().check_class()
        where = f"sweep {cls.name!r}"
        try:
            qualified(cls.table, what="table")
        except InvalidIdentifierError as exc:
            raise InvalidSweepError(f"{where}: {exc}") from None
        key = cls.key
        if isinstance(key, str) or not isinstance(key, tuple) or not key:
            raise InvalidSweepError(
                f"{where}: key must be a tuple of column names ending in a unique column, "
                f"e.g. key = ('created_at', 'id'), got {key!r}"
            )
        if cls.columns is not None and (
            isinstance(cls.columns, str) or not isinstance(cls.columns, tuple)
        ):
            raise InvalidSweepError(f"{where}: columns must be a tuple of column names or None")
        try:
            for column in (*key, *(cls.columns or ())):
                ident(column, what="column name")
        except InvalidIdentifierError as exc:
            raise InvalidSweepError(f"{where}: {exc}") from None
        if len(set(key)) != len(key):
            raise InvalidSweepError(f"{where}: key {key!r} names a column twice")
        if cls.where is not None and (not isinstance(cls.where, str) or not cls.where.strip()):
            raise InvalidSweepError(f"{where}: where must be a non-empty SQL condition or None")

    @classmethod
    def _required_methods(cls) -> tuple[str, ...]:
        return ("handle",)

    # internals ----------------------------------------------------------------------------------

    def _catalog(self) -> SweepQueries:
        if self._queries is not None:
            return self._queries
        if self.app is None:
            raise InvalidSweepError(
                f"sweep {self.name!r}: a TableSweep reads the catalog through its app; "
                "build it with app.register_sweep and start it with app.start_sweep"
            )
        self._queries = SweepQueries(self.app.schema)
        return self._queries

    async def _ready(self, conn: Conn) -> _Plan:
        if self._plan is None:
            await self.prepare(conn)
        assert self._plan is not None
        return self._plan


async def _build_plan(cls: type[TableSweep], queries: SweepQueries, conn: Conn) -> _Plan:
    where = f"sweep {cls.name!r}"
    quoted = qualified(cls.table, what="table")
    table = await queries.sweep_table_find(conn, quoted)
    if table is None:
        raise InvalidSweepError(
            f"{where}: table {cls.table!r} does not exist (an unqualified name is looked up "
            "through the connection's search_path; qualify it, e.g. 'app.users')"
        )
    if table.kind not in _KINDS:
        raise InvalidSweepError(
            f"{where}: {cls.table!r} is not a table (relkind {table.kind!r}); sweep the table "
            "it reads from, whose unique indexes keep the walk exact"
        )
    columns = {c.name: c for c in await queries.sweep_table_columns(conn, table.oid)}
    listed = ", ".join(columns)
    for role, names in (("key column", cls.key), ("column", cls.columns or ())):
        for name in names:
            if name not in columns:
                raise InvalidSweepError(
                    f"{where} has no {role} {name!r} in table {cls.table!r} (columns: {listed})"
                )
    types = [_key_type(cls, columns[name]) for name in cls.key]
    identity = await _identity(cls, queries, conn, table.oid)
    selected = tuple(dict.fromkeys((*(cls.columns or columns), *cls.key)))
    select = ", ".join(ident(c) for c in selected)
    order = ", ".join(ident(c) for c in cls.key)
    bounds = ", ".join(f"${i}::text::{t}" for i, t in enumerate(types, start=1))
    condition = f"({cls.where})" if cls.where else "true"
    limit = f"${len(types) + 1}"
    return _Plan(
        selected=selected,
        key=cls.key,
        identity=identity,
        first_page=f"SELECT {select} FROM {quoted} WHERE {condition} ORDER BY {order} LIMIT $1",
        next_page=(
            f"SELECT {select} FROM {quoted} WHERE {condition} AND ({order}) > ({bounds}) "
            f"ORDER BY {order} LIMIT {limit}"
        ),
        explain=f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {quoted} WHERE {condition}",
        count=f"SELECT count(*) FROM {quoted} WHERE {condition}",
    )


def _key_type(cls: type[TableSweep], column: ColumnInfo) -> str:
    where = f"sweep {cls.name!r}"
    if not column.not_null:
        raise InvalidSweepError(
            f"{where}: key column {column.name!r} of table {cls.table!r} may be NULL, and a "
            "NULL never compares greater than a cursor, so such rows would be skipped; make it "
            f"NOT NULL (ALTER TABLE ... ALTER COLUMN {column.name} SET NOT NULL) or key on "
            "another column"
        )
    if not _TYPE.fullmatch(column.type) or column.type.endswith("[]") or column.type == "json":
        raise InvalidSweepError(
            f"{where}: key column {column.name!r} has type {column.type!r}, which cannot carry "
            "a cursor; key on scalar columns (integers, text, timestamps, uuid, numeric, ...)"
        )
    return column.type


async def _identity(
    cls: type[TableSweep], queries: SweepQueries, conn: Conn, oid: int
) -> tuple[str, ...]:
    """The columns of the smallest unique index covered by the key; refuse a key without one."""
    uniques = await queries.sweep_table_unique_keys(conn, oid)
    covered = [u for u in uniques if set(u.columns) <= set(cls.key)]
    if covered:
        best = min(covered, key=lambda u: (len(u.columns), not u.is_primary))
        return tuple(c for c in cls.key if c in best.columns)
    primary = next((u.columns for u in uniques if u.is_primary), None)
    if primary is not None:
        suggestion = tuple(dict.fromkeys((*cls.key, *primary)))
        fix = f"end the key with the primary key: key = {suggestion!r}"
    else:
        fix = (
            f"add a unique index on its last column ({cls.key[-1]!r}) or end the key with a "
            "column that has one"
        )
    raise InvalidSweepError(
        f"sweep {cls.name!r}: key {cls.key!r} of table {cls.table!r} is not unique (no unique "
        f"index or primary key covers it), so rows that tie on it could be skipped between "
        f"pages; {fix}"
    )


def jsonable(value: Any) -> Any:
    """A column value as a JSON value whose text the column's type parses back exactly."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return f"{value.days} days {value.seconds} seconds {value.microseconds} microseconds"
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, list | tuple | asyncpg.Record):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return str(value)


def _cursor_text(value: Any) -> str:
    """A cursor value as the text its column's input function parses."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return repr(value)
    raise SweepFault(f"a cursor value must be a JSON scalar, got {value!r}")
