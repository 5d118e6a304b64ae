"""Migrations: forward-only, recorded once each, idempotent, safe from many processes at once."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import anyio
import asyncpg
import pytest

import sweepq
from factories import drop_schema, schema_exists
from sweepq.core.ident import ident
from sweepq.core.migrate import Migration, migrate
from sweepq.core.queries import Conn
from waiting import StartLine


@contextlib.asynccontextmanager
async def fresh_schema(dsn: str) -> AsyncIterator[str]:
    """A schema name nobody uses yet; dropped afterwards if something created it."""
    schema = f"m_{uuid.uuid4().hex[:12]}"
    try:
        yield schema
    finally:
        conn = await asyncpg.connect(dsn)
        try:
            await drop_schema(conn, schema)
        finally:
            await conn.close()


async def ledger(app: sweepq.App) -> list[tuple[str, int, str]]:
    rows = await app.pool.fetch(
        f"SELECT component, version, name FROM {ident(app.schema)}.schema_migrations"
        " ORDER BY component, version"
    )
    return [(r[0], r[1], r[2]) for r in rows]


async def catalog(conn: Conn, schema: str) -> dict[str, list[str]]:
    """The shape of a schema, with its name taken out so two schemas can be compared."""
    columns = await conn.fetch(
        "SELECT table_name, column_name, data_type, udt_name, is_nullable, column_default"
        " FROM information_schema.columns WHERE table_schema = $1"
        " ORDER BY table_name, column_name",
        schema,
    )
    indexes = await conn.fetch(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname", schema
    )
    constraints = await conn.fetch(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(c.oid)"
        " FROM pg_constraint AS c JOIN pg_namespace AS n ON n.oid = c.connamespace"
        " WHERE n.nspname = $1 ORDER BY 1, 2",
        schema,
    )
    types = await conn.fetch(
        "SELECT t.typname, array_agg(e.enumlabel ORDER BY e.enumsortorder)::text"
        " FROM pg_type AS t JOIN pg_namespace AS n ON n.oid = t.typnamespace"
        " JOIN pg_enum AS e ON e.enumtypid = t.oid WHERE n.nspname = $1 GROUP BY t.typname",
        schema,
    )

    def strip(rows: list[asyncpg.Record]) -> list[str]:
        return [str(tuple(r)).replace(schema, "<schema>") for r in rows]

    return {
        "columns": strip(columns),
        "indexes": strip(indexes),
        "constraints": strip(constraints),
        "types": strip(types),
    }


async def test_migrating_an_up_to_date_schema_applies_nothing(app: sweepq.App) -> None:
    recorded = await ledger(app)
    assert [(c, v) for c, v, _ in recorded] == [(m.component, m.version) for m in app.migrations()]
    async with app.pool.acquire() as c:
        shape = await catalog(c, app.schema)
    assert await app.migrate() == []
    assert await app.migrate() == []
    assert await app.migrate(dry_run=True) == []
    assert await ledger(app) == recorded
    async with app.pool.acquire() as c:
        assert await catalog(c, app.schema) == shape


async def test_eight_concurrent_migrations_of_a_fresh_schema_apply_each_migration_once(
    dsn: str,
) -> None:
    async with fresh_schema(dsn) as schema:
        apps = [sweepq.App(dsn, schema=schema, pool_max_size=1) for _ in range(8)]
        results: list[list[str]] = []
        line = StartLine(len(apps))

        async def one(app: sweepq.App) -> None:
            async with app:
                await line.reached()
                results.append(await app.migrate())

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for app in apps:
                    tg.start_soon(one, app)
                await line.release()
        labels = [m.label for m in apps[0].migrations()]
        assert len(results) == 8
        # One process applied everything; the others waited for it and found nothing to do.
        assert sorted(results, key=len) == [[]] * 7 + [labels]
        async with apps[0]:
            rows = await ledger(apps[0])
            assert [f"{c}/{v:04d}_{n}" for c, v, n in rows] == labels
            assert await apps[0].migrate() == []


async def test_a_dry_run_on_a_fresh_schema_lists_what_is_pending_and_creates_nothing(
    dsn: str,
) -> None:
    async with fresh_schema(dsn) as schema:
        app = sweepq.App(dsn, schema=schema, pool_max_size=1)
        async with app:
            pending = await app.migrate(dry_run=True)
            assert pending == [m.label for m in app.migrations()]
            assert pending[0] == "core/0001_initial"
            assert not await schema_exists(app, schema)
            assert await app.migrate(dry_run=True) == pending


async def test_migrating_step_by_step_gives_the_same_schema_as_migrating_at_once(
    dsn: str,
) -> None:
    async with fresh_schema(dsn) as at_once, fresh_schema(dsn) as stepwise:
        a = sweepq.App(dsn, schema=at_once, pool_max_size=1)
        b = sweepq.App(dsn, schema=stepwise, pool_max_size=1)
        async with a, b:
            await a.migrate()
            steps = b.migrations()
            async with b.pool.acquire() as c:
                for n in range(1, len(steps) + 1):
                    applied = await migrate(c, stepwise, steps[:n])
                    assert [m.label for m in applied] == [steps[n - 1].label]
            assert await b.migrate() == []
            async with a.pool.acquire() as ca, b.pool.acquire() as cb:
                assert await catalog(ca, at_once) == await catalog(cb, stepwise)


async def test_a_schema_migrated_by_a_newer_sweepq_is_refused(app: sweepq.App) -> None:
    await app.pool.execute(
        f"INSERT INTO {ident(app.schema)}.schema_migrations (component, version, name)"
        " VALUES ('core', 999, 'from_the_future')"
    )
    with pytest.raises(sweepq.MigrationError, match="upgrade sweepq before running it"):
        await app.migrate()
    with pytest.raises(sweepq.MigrationError, match=r"\(core/0999\)"):
        await app.migrate(dry_run=True)


async def test_a_failing_migration_leaves_nothing_half_applied(app: sweepq.App) -> None:
    schema = ident(app.schema)
    broken = Migration(
        "extra",
        1,
        "broken",
        f"CREATE TABLE {schema}.half_done (id int); SELECT 1 / 0;",
    )
    async with app.pool.acquire() as c:
        with pytest.raises(asyncpg.DivisionByZeroError):
            await migrate(c, app.schema, [broken])
        assert await c.fetchval("SELECT to_regclass($1)", f"{schema}.half_done") is None
        assert ("extra", 1, "broken") not in await ledger(app)
        # The lock was released: the next run can apply a fixed migration.
        fixed = Migration("extra", 1, "broken", f"CREATE TABLE {schema}.half_done (id int);")
        assert await migrate(c, app.schema, [fixed]) == [fixed]
        assert ("extra", 1, "broken") in await ledger(app)


async def test_a_schema_holding_tables_of_sweepqs_names_is_refused_and_nothing_is_written(
    dsn: str,
) -> None:
    async with fresh_schema(dsn) as schema:
        conn = await asyncpg.connect(dsn)
        try:
            # A user's own `jobs` table, as `public` often has one.
            await conn.execute(f"CREATE SCHEMA {ident(schema)}")
            await conn.execute(f"CREATE TABLE {ident(schema)}.jobs (id int, title text)")
            await conn.execute(f"INSERT INTO {ident(schema)}.jobs VALUES (1, 'mine')")
            before = await catalog(conn, schema)
            app = sweepq.App(dsn, schema=schema, pool_max_size=1)
            async with app:
                with pytest.raises(
                    sweepq.MigrationError,
                    match=r'already holds relation "jobs" that sweepq did not create.*'
                    r"Nothing was changed",
                ):
                    await app.migrate()
            # No ledger, no type, no function: the schema is as it was, the user's rows too.
            assert await catalog(conn, schema) == before
            assert await conn.fetchval(f"SELECT title FROM {ident(schema)}.jobs") == "mine"
            assert (
                await conn.fetchval(
                    "SELECT count(*) FROM pg_proc AS p JOIN pg_namespace AS n"
                    " ON n.oid = p.pronamespace WHERE n.nspname = $1",
                    schema,
                )
                == 0
            )
        finally:
            await conn.close()


@pytest.mark.parametrize("schema", ["information_schema", "pg_catalog", "pg_toast", "pg_mine"])
def test_postgresqls_own_schemas_are_refused(schema: str) -> None:
    with pytest.raises(sweepq.InvalidIdentifierError, match="one of PostgreSQL's own schemas"):
        sweepq.App("postgresql://unused.invalid/none", schema=schema)
    app = sweepq.App("postgresql://unused.invalid/none", schema="fine")
    with pytest.raises(sweepq.InvalidIdentifierError, match="one of PostgreSQL's own schemas"):
        app.configure(schema=schema)


async def test_no_lock_a_role_without_privileges_can_take_stalls_a_migration(dsn: str) -> None:
    async with fresh_schema(dsn) as schema:
        outsider = await asyncpg.connect(dsn)
        try:
            # The advisory lock earlier versions serialized migrations with: any role may take it.
            await outsider.execute(
                "SELECT pg_advisory_lock(hashtextextended($1, 0))", f"sweepq:migrate:{schema}"
            )
            app = sweepq.App(dsn, schema=schema, pool_max_size=1)
            async with app:
                with anyio.fail_after(30):
                    assert await app.migrate() == [m.label for m in app.migrations()]
                    await app.check_migrated()
        finally:
            await outsider.close()


async def test_a_migration_behind_a_long_transaction_gives_up_and_changes_nothing(
    app: sweepq.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sweepq.core.migrate._LOCK_TIMEOUT_SECONDS", 1)
    schema = ident(app.schema)
    extra = Migration("extra", 1, "touch_jobs", f"ALTER TABLE {schema}.jobs ADD COLUMN x int;")
    reader = await asyncpg.connect(app.dsn)
    try:
        # A report left open on the jobs table holds a lock the migration's ALTER needs.
        tx = reader.transaction()
        await tx.start()
        await reader.fetchval(f"SELECT count(*) FROM {schema}.jobs")
        async with app.pool.acquire() as c:
            with pytest.raises(sweepq.MigrationError, match="waited over 1 s for a lock"):
                await migrate(c, app.schema, [extra])
        await tx.rollback()
        assert ("extra", 1, "touch_jobs") not in await ledger(app)
        async with app.pool.acquire() as c:
            assert await migrate(c, app.schema, [extra]) == [extra]
    finally:
        await reader.close()
