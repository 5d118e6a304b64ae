"""The statistics views the ready-made checks read: one statement each, one wrapper each."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import asyncpg
import msgspec

from ..core.errors import ConfigurationError
from ..core.queries import Conn
from ..core.sqlfiles import parse_statements

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

STATEMENTS: Mapping[str, str] = MappingProxyType(parse_statements(_SQL))


class Lag(msgspec.Struct, frozen=True):
    lag: float | None  # seconds, of the replica furthest behind
    replica: str | None  # its application_name
    hidden: int  # replicas whose figures this role cannot see
    role: str  # current_user, quoted as an identifier


class Oldest(msgspec.Struct, frozen=True):
    pid: int | None
    usename: str | None
    application_name: str | None
    age: float | None  # seconds
    hidden: int  # sessions of other roles whose transactions this role cannot see
    hidden_roles: list[str]
    role: str


class TableStats(msgspec.Struct, frozen=True):
    kind: str | None  # relkind; None: no such table
    shown: str | None  # schema.name, quoted where needed
    live: int | None
    dead: int | None
    search_path: str


async def replication_lag(conn: Conn) -> Lag:
    record = await conn.fetchrow(STATEMENTS["replication_lag"])
    return msgspec.convert(dict(record or {}), Lag)


async def transaction_oldest(conn: Conn) -> Oldest:
    record = await conn.fetchrow(STATEMENTS["transaction_oldest"])
    return msgspec.convert(dict(record or {}), Oldest)


async def table_dead_tuples(conn: Conn, quoted: str, check: object) -> TableStats:
    try:
        record = await conn.fetchrow(STATEMENTS["table_dead_tuples"], quoted)
    except asyncpg.InsufficientPrivilegeError as exc:
        # to_regclass() refuses a name qualified with a schema this role may not use.
        raise ConfigurationError(
            f"{check!r}: {exc} (the role needs USAGE on the table's schema to look the table "
            "up: GRANT USAGE ON SCHEMA <schema> TO <role>)"
        ) from None
    return msgspec.convert(dict(record or {}), TableStats)
