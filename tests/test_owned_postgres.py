"""The test-owned server restarts and recovers from a kill with its committed data, on its own
port, and takes new connections afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import asyncpg
import pytest

from owned_postgres import OwnedPostgres, StopMode, owned_postgres

pytestmark = pytest.mark.fault


@pytest.fixture
def owned_pg() -> Iterator[OwnedPostgres]:
    with owned_postgres() as server:
        yield server


async def write_a_row(dsn: str) -> asyncpg.Connection[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    await conn.execute("CREATE TABLE kept (id int PRIMARY KEY, note text)")
    await conn.execute("INSERT INTO kept VALUES (1, 'committed before')")
    return conn


async def read_rows(dsn: str) -> list[tuple[int, str]]:
    conn = await asyncpg.connect(dsn)
    try:
        return [(r["id"], r["note"]) for r in await conn.fetch("SELECT * FROM kept")]
    finally:
        await conn.close()


def test_the_owned_server_is_not_the_shared_one(owned_pg: OwnedPostgres) -> None:
    assert owned_pg.port != 5432
    assert owned_pg.dsn == f"postgresql://postgres@127.0.0.1:{owned_pg.port}/postgres"


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_a_restarted_server_keeps_committed_data_and_takes_new_connections(
    owned_pg: OwnedPostgres, mode: StopMode
) -> None:
    old = await write_a_row(owned_pg.dsn)
    first_pid = owned_pg.pid

    await anyio.to_thread.run_sync(owned_pg.restart, mode)

    assert owned_pg.running
    assert owned_pg.pid != first_pid
    # The connection from before the restart was closed by it.
    with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
        await old.fetchval("SELECT 1")
    await old.close()
    assert await read_rows(owned_pg.dsn) == [(1, "committed before")]


async def test_a_killed_server_starts_again_with_its_committed_data(
    owned_pg: OwnedPostgres,
) -> None:
    old = await write_a_row(owned_pg.dsn)

    await anyio.to_thread.run_sync(owned_pg.kill)
    assert not owned_pg.running
    with pytest.raises(ConnectionRefusedError):
        await asyncpg.connect(owned_pg.dsn, timeout=5)
    await anyio.to_thread.run_sync(owned_pg.start)

    old.terminate()
    assert await read_rows(owned_pg.dsn) == [(1, "committed before")]


async def test_a_stopped_server_refuses_connections_until_it_starts_again(
    owned_pg: OwnedPostgres,
) -> None:
    await (await write_a_row(owned_pg.dsn)).close()

    await anyio.to_thread.run_sync(owned_pg.stop)
    with pytest.raises(ConnectionRefusedError):
        await asyncpg.connect(owned_pg.dsn, timeout=5)
    await anyio.to_thread.run_sync(owned_pg.start)

    assert await read_rows(owned_pg.dsn) == [(1, "committed before")]
