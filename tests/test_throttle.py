"""`sweepq.throttle`: the ready-made health checks, against real PostgreSQL servers.

Each test works in a database of this module's own (created on the test server, dropped at
the end), so that the sessions it counts are its own: `long_transactions` looks at every
session of the current database, and other suites share the test database. The replica test
streams from a server the test owns to a standby it starts (the shared server has no replica).
Roles made here are dropped at the end.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import pickle
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

import sweepq
import sweepq.throttle
from owned_postgres import OwnedPostgres, free_port, owned_postgres
from sweepq.core.ident import ident
from sweepq.throttle import Wait, dead_tuples, first_wait, long_transactions, replica_lag
from waiting import wait_until

PASSWORD = "sweepq-test"  # for servers that do not trust local connections


def dsn_of(dsn: str, *, database: str | None = None, role: str | None = None) -> str:
    """`dsn` with another database and/or role (host, port, socket and query kept)."""
    parts = urlsplit(dsn)
    netloc = parts.netloc
    if role is not None:
        netloc = f"{role}:{PASSWORD}@{netloc.rpartition('@')[2]}"
    path = parts.path if database is None else f"/{database}"
    return urlunsplit((parts.scheme, netloc, path, parts.query, parts.fragment))


@pytest.fixture(scope="module")
async def database(dsn: str) -> AsyncIterator[str]:
    """The DSN of a new, empty database on the test server."""
    name = f"throttle_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f"CREATE DATABASE {ident(name)}")
        yield dsn_of(dsn, database=name)
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {ident(name)} WITH (FORCE)")
        await admin.close()


@contextlib.asynccontextmanager
async def connected(
    dsn: str, name: str = "throttle-test"
) -> AsyncIterator[asyncpg.Connection[Any]]:
    conn = await asyncpg.connect(dsn, server_settings={"application_name": name})
    try:
        yield conn
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def plain_role(dsn: str) -> AsyncIterator[str]:
    """A login role with no privileges beyond PUBLIC's; dropped afterwards."""
    name = f"throttle_{uuid.uuid4().hex[:8]}"
    async with connected(dsn) as admin:
        await admin.execute(f"CREATE ROLE {ident(name)} LOGIN PASSWORD '{PASSWORD}'")
        try:
            yield name
        finally:
            await admin.execute(f"DROP OWNED BY {ident(name)}")
            await admin.execute(f"DROP ROLE {ident(name)}")


async def no_other_sessions(dsn: str, database: str) -> None:
    """Wait until no session is connected to `database` (a closed connection's backend may
    linger for a moment after `close()` returns)."""
    name = urlsplit(database).path.lstrip("/")
    async with connected(dsn) as admin:

        async def none_left() -> bool:
            query = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
            return not await admin.fetchval(query, name)

        await wait_until(none_left, timeout=10, what=f"no session on {name}")


async def flush_stats(conn: asyncpg.Connection[Any]) -> None:
    """Make the statistics of what `conn` did visible to every session now (not within ~1 s)."""
    await conn.execute("SELECT pg_stat_force_next_flush()")


# --- the module and its values -------------------------------------------------------------------


def test_sweepq_throttle_is_a_public_submodule_with_a_sorted_all() -> None:
    assert sweepq.throttle.__all__ == sorted(sweepq.throttle.__all__)
    assert all(hasattr(sweepq.throttle, name) for name in sweepq.throttle.__all__)
    assert "throttle" not in sweepq.__all__  # a submodule, imported by its name


def test_a_wait_is_a_timedelta_that_carries_its_reason() -> None:
    waited = Wait(7.5, "replica lag 7.2 s > 5 s")
    assert isinstance(waited, timedelta)
    assert waited == timedelta(seconds=7.5)
    assert waited.total_seconds() == 7.5
    assert waited.reason == "replica lag 7.2 s > 5 s"
    assert repr(waited) == "Wait(seconds=7.5, reason='replica lag 7.2 s > 5 s')"
    assert Wait(timedelta(minutes=2), "x") == timedelta(minutes=2)
    assert type(waited + timedelta(seconds=1)) is timedelta  # arithmetic gives a plain one
    for again in (pickle.loads(pickle.dumps(waited)), copy.copy(waited), copy.deepcopy(waited)):
        assert type(again) is Wait
        assert (again, again.reason) == (waited, waited.reason)
    with pytest.raises(AttributeError):
        waited.reason = "other"  # type: ignore[misc]  # read-only: the test says so


@pytest.mark.parametrize(
    ("seconds", "reason", "says"),
    [
        (0, "x", r"Wait\(seconds=...\) must be a number of seconds > 0, got 0"),
        (-1.5, "x", "> 0"),
        (math.nan, "x", "must be a finite number"),
        (math.inf, "x", "must be a finite number"),
        (True, "x", "must be a finite number"),
        ("5", "x", "must be a finite number"),
        (timedelta(0), "x", "must be a positive length"),
        (1, "", "must be a non-empty str"),
        (1, None, "must be a non-empty str"),
    ],
)
def test_a_wait_refuses_a_length_that_is_not_positive_or_an_empty_reason(
    seconds: Any, reason: Any, says: str
) -> None:
    with pytest.raises(sweepq.ConfigurationError, match=says):
        Wait(seconds, reason)


@pytest.mark.parametrize(
    ("make", "shown"),
    [
        (lambda: replica_lag(5), "replica_lag(max_seconds=5)"),
        (lambda: replica_lag(2.5, wait=30), "replica_lag(max_seconds=2.5, wait=30)"),
        (lambda: long_transactions(300), "long_transactions(max_seconds=300)"),
        (
            lambda: long_transactions(60, wait=timedelta(minutes=1)),
            "long_transactions(max_seconds=60, wait=60)",
        ),
        (lambda: dead_tuples("public.users", 0.2), "dead_tuples('public.users', max_fraction=0.2)"),
        (
            lambda: dead_tuples("users", 0.25, min_rows=100, wait=10),
            "dead_tuples('users', max_fraction=0.25, min_rows=100, wait=10)",
        ),
    ],
)
def test_a_check_is_named_by_the_call_that_made_it(make: Any, shown: str) -> None:
    check = make()
    assert (repr(check), check.name, sweepq.throttle.check_name(check)) == (shown, shown, shown)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: replica_lag(0), r"replica_lag\(max_seconds=...\) must be a number of seconds > 0"),
        (lambda: replica_lag(-5), "> 0"),
        (lambda: replica_lag(math.inf), "must be a finite number"),
        (lambda: replica_lag(math.nan), "must be a finite number"),
        (lambda: replica_lag(cast(Any, "5")), "must be a finite number"),
        (lambda: replica_lag(True), "must be a finite number"),
        (lambda: replica_lag(5, wait=0.5), r"wait must lie between 1 s and 3600 s .*got 0.5"),
        (lambda: replica_lag(5, wait=timedelta(hours=2)), "wait must lie between 1 s and 3600 s"),
        (lambda: replica_lag(5, wait=0), "wait must be a number of seconds > 0"),
        (lambda: replica_lag(5, wait=-timedelta(seconds=3)), "must be a positive length"),
        (lambda: long_transactions(0), r"long_transactions\(max_seconds=...\) must be"),
        (lambda: long_transactions(cast(Any, None)), "must be a finite number"),
        (lambda: long_transactions(60, wait=math.inf), "wait must be a finite number"),
        (lambda: dead_tuples("users", 0), r"max_fraction=...\) must lie between 0 and 1"),
        (lambda: dead_tuples("users", 1), "must lie between 0 and 1"),
        (lambda: dead_tuples("users", 1.5), "must lie between 0 and 1"),
        (lambda: dead_tuples("users", math.nan), "must be a finite number"),
        (lambda: dead_tuples("users", 0.2, min_rows=-1), r"min_rows=...\) must be an int >= 0"),
        (lambda: dead_tuples("users", 0.2, min_rows=cast(Any, 1.5)), "must be an int >= 0"),
        (lambda: dead_tuples("users", 0.2, wait=7200), "wait must lie between"),
    ],
)
def test_a_factory_refuses_arguments_out_of_range(make: Any, says: str) -> None:
    with pytest.raises(sweepq.ConfigurationError, match=says):
        make()


@pytest.mark.parametrize(
    "table", ["", "a.b.c", "1users", "users; DROP TABLE users", "app.", 'app."users"', None, 5]
)
def test_dead_tuples_refuses_a_table_name_that_is_not_plain_identifiers_when_made(
    table: Any,
) -> None:
    with pytest.raises(sweepq.InvalidIdentifierError, match=r"dead_tuples\(table=...\)"):
        dead_tuples(table, 0.2)


# --- first_wait: the checks of a sweep, in order -------------------------------------------------


async def test_first_wait_returns_the_first_wait_asked_for_and_calls_no_check_after_it(
    database: str,
) -> None:
    called: list[str] = []

    async def go(conn: asyncpg.Connection[Any]) -> timedelta | None:
        called.append("go")
        assert await conn.fetchval("SELECT 1") == 1
        return None

    async def zero(conn: asyncpg.Connection[Any]) -> timedelta | None:
        called.append("zero")
        return timedelta(0)  # zero or less: go

    async def busy(conn: asyncpg.Connection[Any]) -> timedelta | None:
        called.append("busy")
        return timedelta(seconds=30)

    async def never(conn: asyncpg.Connection[Any]) -> timedelta | None:
        raise AssertionError("a check after the first wait was called")

    async with connected(database) as conn:
        assert await first_wait(conn, [go, zero, replica_lag(5)]) is None
        waited = await first_wait(conn, (go, busy, never))
    assert called == ["go", "zero", "go", "busy"]
    assert type(waited) is Wait
    assert waited == timedelta(seconds=30)
    assert waited.reason == busy.__qualname__  # a plain timedelta's reason: the check's name


async def test_first_wait_refuses_a_check_that_is_not_async_or_returns_something_else(
    database: str,
) -> None:
    def sync_check(conn: Any) -> None:
        return None

    async def seconds(conn: Any) -> float:
        return 5.0

    async with connected(database) as conn:
        with pytest.raises(sweepq.ConfigurationError, match=r"sync_check returned None instead"):
            await first_wait(conn, [sync_check])  # type: ignore[list-item]  # the mistake tested
        with pytest.raises(sweepq.ConfigurationError, match=r"seconds returned 5.0: a check"):
            await first_wait(conn, [seconds])  # type: ignore[list-item]  # the mistake tested


# --- replica_lag ---------------------------------------------------------------------------------


async def test_replica_lag_goes_on_a_server_without_replicas(database: str) -> None:
    async with connected(database) as conn:
        assert await conn.fetchval("SELECT count(*) FROM pg_stat_replication") == 0
        assert await replica_lag(5)(conn) is None
        assert await replica_lag(0.000001)(conn) is None


async def test_replica_lag_goes_on_a_server_without_replicas_whatever_the_role(
    dsn: str, database: str
) -> None:
    async with plain_role(dsn) as role, connected(dsn_of(database, role=role)) as conn:
        assert await replica_lag(0.000001)(conn) is None


@contextlib.contextmanager
def streaming_standby(primary: OwnedPostgres) -> Iterator[OwnedPostgres]:
    """A hot standby of `primary`, streaming as 'replica1' and replying every second."""
    basebackup = primary.bindir / "pg_basebackup"
    if not basebackup.is_file():
        pytest.skip(reason=f"no pg_basebackup in {primary.bindir}")
    root = Path(tempfile.mkdtemp(prefix="sweepq-standby-", dir="/tmp"))
    standby = OwnedPostgres(primary.bindir, root, free_port())
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        command = [str(basebackup), "--pgdata", str(standby.data), "--write-recovery-conf"]
        command += ["--host", "127.0.0.1", "--port", str(primary.port), "--username", "postgres"]
        command += ["--no-sync", "--checkpoint", "fast"]
        subprocess.run(command, check=True, capture_output=True, timeout=60, env=env)
        with (standby.data / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {standby.port}\nunix_socket_directories = '{root}'\n")
            conf.write("wal_receiver_status_interval = 1\n")
        with (standby.data / "postgresql.auto.conf").open("a") as conf:
            conf.write(
                f"primary_conninfo = 'host=127.0.0.1 port={primary.port} user=postgres"
                " application_name=replica1'\n"
            )
        owner = primary.data.stat()  # the standby runs as the primary's OS user
        if (owner.st_uid, owner.st_gid) != (os.geteuid(), os.getegid()):
            for path in [root, *root.rglob("*")]:
                os.chown(path, owner.st_uid, owner.st_gid, follow_symlinks=False)
        standby.start()
        yield standby
    finally:
        standby.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


async def _streaming(admin: asyncpg.Connection[Any]) -> bool:
    return bool(await admin.fetchval("SELECT state FROM pg_stat_replication") == "streaming")


async def check_until(
    check: sweepq.throttle.HealthCheck,
    conn: asyncpg.Connection[Any],
    done: Any,
    *,
    also: Any = None,
) -> Wait | None:
    """Call `check` until `done(result)`, within 20 s; `also()` runs between calls."""
    result: Wait | None = None
    first = True

    async def holds() -> bool:
        nonlocal result, first
        if not first and also is not None:
            await also()
        first = False
        result = await check(conn)
        return bool(done(result))

    await wait_until(holds, what=f"{check!r} gives what is wanted", every=0.1)
    return result


async def test_replica_lag_waits_while_a_replica_replays_behind_and_plain_roles_cannot_see() -> (
    None
):
    with owned_postgres() as primary, streaming_standby(primary) as standby:
        role = f"throttle_{uuid.uuid4().hex[:8]}"
        async with connected(primary.dsn) as admin, connected(standby.dsn) as replica:
            await admin.execute(f"CREATE ROLE {role} LOGIN; CREATE TABLE writes (at timestamptz)")
            check = replica_lag(0.3)

            async def write() -> None:
                await admin.execute("INSERT INTO writes VALUES (now())")

            # Streaming and caught up: go.
            await wait_until(lambda: _streaming(admin), what="the standby streams", every=0.05)
            await write()
            assert await check_until(check, admin, lambda r: r is None) is None

            # Replay paused while the primary writes: the lag grows past 0.3 s.
            await replica.execute("SELECT pg_wal_replay_pause()")
            waited = await check_until(check, admin, lambda r: r is not None, also=write)
            assert type(waited) is Wait
            assert waited == timedelta(seconds=5)
            assert re.fullmatch(r"replica lag \d+\.\d+ s > 0\.3 s \('replica1'\)", waited.reason)

            # A role without pg_read_all_stats sees the replica's row, not its figures: wait.
            async with connected(dsn_of(primary.dsn, role=role)) as plain:
                row = await plain.fetchrow("SELECT * FROM pg_stat_replication")
                assert row is not None
                assert row["application_name"] == "replica1"
                assert (row["state"], row["replay_lag"]) == (None, None)
                blind = await check(plain)
                assert type(blind) is Wait
                assert blind.reason == (
                    f"replica_lag(max_seconds=0.3) cannot see the lag of 1 replica as role "
                    f"{role}: GRANT pg_monitor TO {role}"
                )
                # Granted pg_monitor, it sees the lag (in its next transaction).
                await admin.execute(f"GRANT pg_monitor TO {role}")
                seen = await check(plain)
                assert seen is not None
                assert seen.reason.startswith("replica lag ")

            # Replay resumed: the replica catches up, and the check lets go.
            await replica.execute("SELECT pg_wal_replay_resume()")
            assert await check_until(check, admin, lambda r: r is None) is None
        assert standby.running


# --- long_transactions ---------------------------------------------------------------------------


async def age_of(conn: asyncpg.Connection[Any], pid: int) -> float:
    """The age of `pid`'s open transaction as pg_stat_activity reports it, in seconds."""
    age = await conn.fetchval(
        "SELECT extract(epoch FROM clock_timestamp() - xact_start)::float8"
        " FROM pg_stat_activity WHERE pid = $1",
        pid,
    )
    assert isinstance(age, float)
    return age


async def test_long_transactions_waits_while_another_session_holds_a_transaction_open(
    database: str,
) -> None:
    async with connected(database) as checker, connected(database, "report") as holder:
        role = await holder.fetchval("SELECT current_user")
        assert await long_transactions(0.000001)(checker) is None  # idle sessions do not count
        async with holder.transaction():
            await holder.fetchval("SELECT txid_current()")
            # The check reads the age later than this: anything below it is exceeded.
            age = await age_of(checker, holder.get_server_pid())
            waited = await long_transactions(age / 2)(checker)
            assert type(waited) is Wait
            assert waited == timedelta(seconds=5)
            match = re.fullmatch(
                rf"oldest transaction open (?P<age>[\d.]+) s > [\d.e-]+ s "
                rf"\(pid {holder.get_server_pid()}, 'report', role '{role}'\)",
                waited.reason,
            )
            assert match, waited.reason
            assert float(match["age"]) > age / 2
            assert await long_transactions(3600)(checker) is None
            with_wait = await long_transactions(age / 2, wait=timedelta(minutes=1))(checker)
            assert with_wait == timedelta(minutes=1)
        # Committed: the session is idle again.
        assert await long_transactions(0.000001)(checker) is None


async def test_long_transactions_does_not_count_the_checking_connections_own_transaction(
    database: str,
) -> None:
    async with connected(database) as checker, checker.transaction():
        await checker.fetchval("SELECT txid_current()")
        assert await age_of(checker, checker.get_server_pid()) > 0
        assert await long_transactions(0.000001)(checker) is None


async def test_long_transactions_counts_idle_in_transaction_without_a_transaction_id(
    database: str,
) -> None:
    async with (
        connected(database) as checker,
        connected(database, "idle") as holder,
        holder.transaction(),
    ):
        await holder.fetchval("SELECT 1")  # no txid, but the transaction is open
        age = await age_of(checker, holder.get_server_pid())
        waited = await long_transactions(age / 2)(checker)
        assert waited is not None
        assert "'idle'" in waited.reason


async def test_long_transactions_as_a_plain_role_sees_its_own_roles_sessions_and_waits_on_others(
    dsn: str, database: str
) -> None:
    await no_other_sessions(dsn, database)  # the sessions of the tests before this one
    async with plain_role(dsn) as role:
        as_role = dsn_of(database, role=role)
        async with connected(as_role) as checker, connected(as_role, "own") as own:
            # Only this role's sessions in the database: it sees them all.
            assert await long_transactions(0.000001)(checker) is None
            async with own.transaction():
                await own.fetchval("SELECT txid_current()")
                age = await age_of(checker, own.get_server_pid())
                waited = await long_transactions(age / 2)(checker)
                assert waited is not None
                assert f"'own', role '{role}'" in waited.reason
            # A session of another role: whether it holds a transaction is hidden from this one.
            async with connected(database, "other") as other:
                admin = await other.fetchval("SELECT current_user")
                hidden = await checker.fetchrow(
                    "SELECT backend_type, state, xact_start FROM pg_stat_activity WHERE pid = $1",
                    other.get_server_pid(),
                )
                assert hidden is not None
                assert tuple(hidden) == (None, None, None)
                blind = await long_transactions(300)(checker)
                assert type(blind) is Wait
                assert blind.reason == (
                    f"long_transactions(max_seconds=300) cannot see whether 1 session of "
                    f"role(s) {admin} hold a transaction as role {role}: "
                    f"GRANT pg_monitor TO {role}"
                )
                # Granted pg_monitor, it sees that the session is idle: go.
                await other.execute(f"GRANT pg_monitor TO {ident(role)}")
                try:
                    assert await long_transactions(300)(checker) is None
                    async with other.transaction():
                        await other.fetchval("SELECT txid_current()")
                        age = await age_of(checker, other.get_server_pid())
                        seen = await long_transactions(age / 2)(checker)
                        assert seen is not None
                        assert f"'other', role '{admin}'" in seen.reason
                finally:
                    await other.execute(f"REVOKE pg_monitor FROM {ident(role)}")


# --- dead_tuples ---------------------------------------------------------------------------------


async def make_table(conn: asyncpg.Connection[Any], table: str, rows: int, deleted: int) -> None:
    """`table` (a plain name) with `rows` rows of which `deleted` are deleted, stats visible."""
    await conn.execute(
        f"DROP TABLE IF EXISTS {ident(table)}; CREATE TABLE {ident(table)} (id int PRIMARY KEY);"
        f" INSERT INTO {ident(table)} SELECT generate_series(1, {rows:d});"
        f" DELETE FROM {ident(table)} WHERE id <= {deleted:d}"
    )
    await flush_stats(conn)


async def test_dead_tuples_waits_while_most_rows_are_dead_and_goes_after_vacuum(
    database: str,
) -> None:
    async with connected(database) as conn:
        await make_table(conn, "accounts", 20_000, 15_000)
        check = dead_tuples("accounts", 0.5)
        waited = await check(conn)
        assert type(waited) is Wait
        assert waited == timedelta(seconds=5)
        assert waited.reason == "dead tuples of public.accounts 75 % > 50 %"
        assert await dead_tuples("public.accounts", 0.8)(conn) is None  # 75 % is not above 80 %
        qualified = await dead_tuples("public.accounts", 0.74, wait=30)(conn)
        assert qualified is not None
        assert (qualified, qualified.reason) == (
            timedelta(seconds=30),
            "dead tuples of public.accounts 75 % > 74 %",
        )
        await conn.execute("VACUUM accounts")  # sets the table's statistics as it ends
        assert await check(conn) is None


async def test_dead_tuples_shows_a_fraction_near_its_limit_with_the_decimals_that_tell_them_apart(
    database: str,
) -> None:
    async with connected(database) as conn:
        await make_table(conn, "near", 10_000, 2_040)
        waited = await dead_tuples("near", 0.2)(conn)
        assert waited is not None
        assert waited.reason == "dead tuples of public.near 20.4 % > 20 %"


async def test_dead_tuples_never_waits_on_a_table_smaller_than_min_rows(database: str) -> None:
    async with connected(database) as conn:
        await make_table(conn, "tiny", 100, 90)
        assert await dead_tuples("tiny", 0.2)(conn) is None  # 100 rows < the default 10,000
        assert await dead_tuples("tiny", 0.2, min_rows=101)(conn) is None
        waited = await dead_tuples("tiny", 0.2, min_rows=100)(conn)
        assert waited is not None
        assert waited.reason == "dead tuples of public.tiny 90 % > 20 %"
        await make_table(conn, "empty", 0, 0)
        assert await dead_tuples("empty", 0.2, min_rows=0)(conn) is None


async def test_dead_tuples_finds_an_unqualified_table_through_the_search_path(
    database: str,
) -> None:
    async with connected(database) as conn:
        await conn.execute("CREATE SCHEMA IF NOT EXISTS app; SET search_path = app, public")
        await make_table(conn, "Users", 20_000, 10_000)  # a quoted, mixed-case name
        waited = await dead_tuples("Users", 0.3)(conn)
        assert waited is not None
        assert waited.reason == 'dead tuples of app."Users" 50 % > 30 %'
        await conn.execute("RESET search_path")
        with pytest.raises(sweepq.ConfigurationError, match="does not exist"):
            await dead_tuples("Users", 0.3)(conn)
        assert await dead_tuples("app.Users", 0.6)(conn) is None


async def test_dead_tuples_of_a_table_that_does_not_exist_raises_naming_it(database: str) -> None:
    async with connected(database) as conn:
        search_path = await conn.fetchval("SHOW search_path")
        for table in ("nope", "public.nope", "no_such_schema.users"):
            with pytest.raises(sweepq.ConfigurationError) as raised:
                await dead_tuples(table, 0.2)(conn)
            assert str(raised.value) == (
                f"dead_tuples({table!r}, max_fraction=0.2): table {table!r} does not exist (an "
                f"unqualified name is looked up through the connection's search_path, "
                f"{search_path!r}; qualify it, e.g. 'app.users')"
            )


async def test_dead_tuples_of_a_view_or_a_partitioned_table_raises_naming_the_fix(
    database: str,
) -> None:
    async with connected(database) as conn:
        await conn.execute(
            "CREATE OR REPLACE VIEW a_view AS SELECT 1 AS one;"
            " CREATE TABLE IF NOT EXISTS parted (id int) PARTITION BY RANGE (id)"
        )
        with pytest.raises(sweepq.ConfigurationError, match=r"public.a_view is not a table"):
            await dead_tuples("a_view", 0.2)(conn)
        with pytest.raises(sweepq.ConfigurationError, match=r"public.parted is partitioned"):
            await dead_tuples("parted", 0.2)(conn)


async def test_dead_tuples_as_a_plain_role_reads_a_tables_statistics_without_reading_the_table(
    dsn: str, database: str
) -> None:
    async with connected(database) as admin:
        await make_table(admin, "ledger", 20_000, 15_000)
        await admin.execute(
            "CREATE SCHEMA IF NOT EXISTS private; CREATE TABLE IF NOT EXISTS private.t (id int)"
        )
    async with plain_role(dsn) as role, connected(dsn_of(database, role=role)) as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetchval("SELECT count(*) FROM ledger")
        waited = await dead_tuples("ledger", 0.5)(conn)
        assert waited is not None
        assert waited.reason == "dead tuples of public.ledger 75 % > 50 %"
        # A schema it may not use hides its tables from name lookup.
        with pytest.raises(sweepq.ConfigurationError, match=r"GRANT USAGE ON SCHEMA"):
            await dead_tuples("private.t", 0.5)(conn)
