"""The lane: the App's own short statements run on one kept connection when it is free."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

import sweepq
from factories import count_rows
from waiting import wait_until


def noop_task(app: sweepq.App) -> sweepq.Task:
    @app.task(name="t")
    async def t(ctx: sweepq.Context, n: int) -> None:
        return None

    return t


async def _lane_closed(app: sweepq.App) -> bool:
    lane = app.db.lane
    assert lane is not None
    kept = lane._conn  # closed once the client has read that its backend was terminated
    try:
        return kept is None or kept.is_closed()
    except asyncpg.InterfaceError:  # closed, and taken back by the pool already
        return True


async def _sleeping(app: sweepq.App) -> bool:
    return bool(
        await app.pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE state = 'active' AND query = 'SELECT 7 FROM pg_sleep(0.3)'"
        )
    )


async def test_concurrent_enqueues_share_the_lane_and_the_pool(app: sweepq.App) -> None:
    t = noop_task(app)
    results = await asyncio.gather(*(app.enqueue(t, {"n": n}) for n in range(50)))
    assert len({r.job_id for r in results}) == 50
    assert await count_rows(app, "jobs") == 50
    # Sequential calls reuse one backend: the lane's.
    pids = set()
    for _ in range(5):
        async with app.db.own_connection() as c:
            pids.add(await c.fetchval("SELECT pg_backend_pid()"))
    assert len(pids) == 1


async def test_a_call_that_fails_gives_the_lane_back_to_the_pool_and_the_next_works(
    app: sweepq.App,
) -> None:
    t = noop_task(app)
    async with app.db.own_connection() as c:
        first = await c.fetchval("SELECT pg_backend_pid()")
    with pytest.raises(asyncpg.DivisionByZeroError):
        async with app.db.own_connection() as c:
            await c.execute("SELECT 1 / 0")
    # A transaction left open (never by sweepq's own statements) is not carried to the next call.
    async with app.db.own_connection() as c:
        await c.execute("BEGIN")
    async with app.db.own_connection() as c:
        assert not c.is_in_transaction()
    # The lane's backend is killed: the next call finds it gone and takes another.
    await app.pool.execute("SELECT pg_terminate_backend($1)", first)
    await wait_until(lambda: _lane_closed(app), what="the lane's connection sees its backend gone")
    assert (await app.enqueue(t, {"n": 1})).outcome == "created"
    assert (await app.enqueue(t, {"n": 2})).outcome == "created"


async def test_an_app_with_a_pool_of_one_has_no_lane_and_still_works(dsn: str) -> None:
    schema = f"lane_one_{uuid.uuid4().hex[:12]}"
    app = sweepq.App(dsn, schema=schema, pool_min_size=1, pool_max_size=1)
    t = noop_task(app)
    async with app:
        await app.migrate()
        try:
            assert app.db.lane is None
            await asyncio.gather(*(app.enqueue(t, {"n": n}) for n in range(5)))
            async with app.pool.acquire() as c:  # the only connection is free for the caller
                assert await c.fetchval("SELECT 1") == 1
            assert await count_rows(app, "jobs") == 5
        finally:
            await app.pool.execute(f'DROP SCHEMA "{app.schema}" CASCADE')


async def test_closing_the_app_lets_a_statement_on_the_lane_finish(dsn: str) -> None:
    app = sweepq.App(dsn, schema=f"lane_close_{uuid.uuid4().hex[:12]}")
    await app.open()

    async def slow() -> int:
        async with app.db.own_connection() as c:
            return int(await c.fetchval("SELECT 7 FROM pg_sleep(0.3)"))

    running = asyncio.create_task(slow())
    await wait_until(lambda: _sleeping(app), what="the statement on the lane runs")
    await app.close()  # waits for it instead of taking its connection away
    assert await running == 7
