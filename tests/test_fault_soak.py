"""A bounded soak with everything at once: a 20x oversubscribed key, snoozing jobs with deadlines,
a sweep and cron, worked by two workers. Afterwards nothing is stuck, every deadline was
honoured, and retention brings every table back to what configuration alone keeps (run with -n 0
-s to see each table's rows and bytes at the start and after retention and VACUUM).

SWEEPQ_SOAK_SECONDS sets how long the load lasts (default 30).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from datetime import timedelta

import anyio
import pytest

import sweepq
from factories import create_items
from sweep_worker_proc import items_sweep, sweeps_app
from sweepq.core.ident import ident
from sweepq.sweeps.app import App
from waiting import wait_until

pytestmark = [pytest.mark.fault, pytest.mark.committed]

SOAK_SECONDS = float(os.environ.get("SWEEPQ_SOAK_SECONDS", "30"))
SLOTS = 20  # per worker; two workers
HOT_LIMIT = 1
HOT_WAITING = 20 * HOT_LIMIT  # 20x oversubscription of the hot key
SNOOZE_DEADLINE = 2.0
ROWS = 3_000
# A job no one claims fails at the leader's next round after its deadline; a snoozed one at the
# first claim after it. Either way well within this margin.
DEADLINE_MARGIN = timedelta(seconds=3)
# What configuration alone keeps after retention: the hot key's limit, the cron schedule, the
# maintenance leader's row and the sweeps' reserved names. Items and handled are the test's own
# tables.
CONFIGURATION = {
    "concurrency_keys": 1,
    "cron_schedules": 1,
    "leaders": 1,
    "reserved_names": 3,  # the names the sweeps keep, written by their migration
}


@pytest.fixture
async def app(dsn: str) -> AsyncIterator[App]:
    async with sweeps_app(dsn) as fresh:
        yield fresh


async def table_sizes(app: App) -> dict[str, tuple[int, int]]:
    """(rows, bytes) of every table of sweepq in the app's schema."""
    tables = await app.pool.fetch(
        "SELECT tablename FROM pg_tables WHERE schemaname = $1 AND tablename NOT IN"
        " ('items', 'handled', 'schema_migrations')",
        app.schema,
    )
    sizes: dict[str, tuple[int, int]] = {}
    for (table,) in tables:
        name = f"{ident(app.schema)}.{ident(table)}"
        rows = await app.pool.fetchval(f"SELECT count(*) FROM {name}")
        size = await app.pool.fetchval("SELECT pg_total_relation_size($1::regclass)", name)
        sizes[table] = (int(rows), int(size))
    return sizes


async def test_a_soak_of_everything_at_once_leaves_nothing_stuck_and_nothing_behind(
    app: App,
) -> None:
    await create_items(app, ROWS)
    items = app.register_sweep(items_sweep(app.schema, page_size=200, window=1_000))

    @app.task(name="hot")
    async def hot(ctx: sweepq.Context, n: int) -> None:
        await anyio.sleep(0.005)

    @app.task(name="snoozer")
    async def snoozer(ctx: sweepq.Context, n: int) -> None:
        raise sweepq.Snooze(0.3)

    @app.task(name="tick")
    async def tick(ctx: sweepq.Context) -> None:
        return None

    app.cron("tick", "* * * * * *", tick)
    await app.set_concurrency_limit("hot", HOT_LIMIT)
    start_sizes = await table_sizes(app)
    schema = ident(app.schema)
    workers = [
        sweepq.Worker(
            app,
            concurrency=SLOTS,
            lease_seconds=3,
            heartbeat_seconds=0.5,
            poll_seconds=0.2,
            maintenance_seconds=0.2,
            leader_ttl_seconds=1,
        )
        for _ in range(2)
    ]
    counter = 0

    async def load() -> None:
        nonlocal counter
        run = await app.start_sweep(items.name, {"delay": 0.002})
        assert run.outcome == "started"
        with anyio.move_on_after(SOAK_SECONDS):
            while True:
                waiting = await app.pool.fetchval(
                    f"SELECT count(*) FROM {schema}.jobs"
                    " WHERE state = 'available' AND concurrency_key = 'hot'"
                )
                specs = [
                    sweepq.JobSpec(
                        hot, {"n": counter + i}, concurrency_key="hot", deadline=SOAK_SECONDS
                    )
                    for i in range(max(0, HOT_WAITING - int(waiting)))
                ]
                specs += [
                    sweepq.JobSpec(snoozer, {"n": counter + i}, deadline=SNOOZE_DEADLINE)
                    for i in range(2)
                ]
                counter += len(specs)
                await app.enqueue_many(specs)
                await anyio.sleep(0.25)

    async def settled() -> bool:
        live = await app.pool.fetchval(
            f"SELECT count(*) FROM {schema}.jobs WHERE state IN ('available', 'running')"
            " AND task <> 'tick'"
        )
        return int(live) == 0

    with anyio.fail_after(SOAK_SECONDS + 90):
        async with workers[0], workers[1], anyio.create_task_group() as tg:
            for worker in workers:
                tg.start_soon(worker.run)
            await load()
            # The load stops; what it left drains: the backlog on the hot key, the sweep.
            await wait_until(settled, timeout=90, what="the backlog drains", every=0.2)
            for worker in workers:
                worker.stop()

    (run,) = await app.list_sweep_runs()
    assert run.state is sweepq.SweepState.COMPLETED
    assert (run.enqueued, run.completed, run.failed) == (ROWS, ROWS, 0)
    # Nothing stuck: every job is terminal (cron may have left its last tick waiting).
    stuck = await app.pool.fetch(
        f"SELECT id, task, state::text FROM {schema}.jobs"
        " WHERE state IN ('available', 'running') AND task <> 'tick'"
    )
    assert stuck == []
    # Deadlines: no job started after its deadline, and none outlived it past the margin.
    late = await app.pool.fetch(
        f"""
        SELECT id, task, state::text, attempted_at, finished_at, deadline_at FROM {schema}.jobs
        WHERE deadline_at IS NOT NULL
          AND (attempted_at > deadline_at OR finished_at > deadline_at + $1::interval)
        """,
        DEADLINE_MARGIN,
    )
    assert late == []
    snoozers = await app.pool.fetch(
        f"SELECT state::text, failure_reason, attempt, snoozes FROM {schema}.jobs"
        " WHERE task = 'snoozer'"
    )
    assert len(snoozers) >= 4
    assert {(r[0], r[1], r[2]) for r in snoozers} == {("failed", "deadline_exceeded", 0)}
    # Snoozing never reaches a terminal exit by itself: the deadline gives it one. (A snoozer
    # that a loaded machine first claimed past its deadline never snoozed, and fails the same.)
    assert any(r[3] >= 1 for r in snoozers)
    hot_jobs = await app.pool.fetchval(f"SELECT count(*) FROM {schema}.jobs WHERE task = 'hot'")
    assert hot_jobs >= HOT_WAITING
    running = await app.pool.fetchval(
        f"SELECT running FROM {schema}.concurrency_keys WHERE key = 'hot'"
    )
    assert running == 0

    # Retention brings every table back to what configuration alone keeps.
    removed = await app.prune(older_than=timedelta(0))
    assert removed["jobs"] >= ROWS
    await app.pool.execute(f"DELETE FROM {schema}.jobs WHERE task = 'tick'")
    for table in start_sizes:
        await app.pool.execute(f"VACUUM {schema}.{ident(table)}")
    end_sizes = await table_sizes(app)
    for table, (rows, _) in end_sizes.items():
        assert rows <= CONFIGURATION.get(table, 0), (table, rows, removed)
    assert set(end_sizes) == set(start_sizes)
    print(f"\nsoak {SOAK_SECONDS:g}s: {counter} jobs enqueued by the load, {ROWS} sweep items")
    for table in sorted(end_sizes):
        print(f"  {table}: (rows, bytes) at start {start_sizes[table]}, after retention and")
        print(f"    VACUUM {end_sizes[table]}")
