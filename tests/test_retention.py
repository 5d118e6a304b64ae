"""Retention: pruning removes old history in batches and never touches live work."""

from __future__ import annotations

from datetime import timedelta

import pytest

import sweepq
from factories import backdate_jobs, backdate_keys, job_ids
from statements import claim, job_counts
from sweepq.core.ident import ident
from sweepq.core.queries import Conn

# Tables whose size is bounded by construction rather than by age.
BOUNDED_TABLES = {
    "schema_migrations": "one row per migration",
    "leaders": "one row per elected role",
    "reserved_names": "one row per name a layer keeps, written by its migrations",
    "queue_pauses": "one row per paused queue, deleted by its resume",
}


def register(app: sweepq.App) -> sweepq.Task:
    @app.task(name="t", max_attempts=1)
    async def t(ctx: sweepq.Context, n: int) -> None:
        if n % 3 == 1:
            raise RuntimeError("fails")
        if n % 3 == 2:
            raise sweepq.Cancel("cancelled")

    return t


async def run_all(app: sweepq.App) -> None:
    async with sweepq.Worker(app, concurrency=5) as worker:
        await worker.run_until_idle()


@pytest.mark.parametrize("old_count", [10, 9])
async def test_prune_removes_terminal_jobs_older_than_the_cutoff_in_batches(
    app: sweepq.App, old_count: int
) -> None:
    t = register(app)
    old = await app.enqueue_many(
        [sweepq.JobSpec(t, {"n": i}, idempotency_key=f"old{i}") for i in range(old_count)]
    )
    recent = await app.enqueue_many([sweepq.JobSpec(t, {"n": i}) for i in range(3)])
    await run_all(app)
    counts = await job_counts(app)
    assert set(counts) == {"completed", "failed", "cancelled"}
    # Live jobs, however old, are never pruned.
    waiting = await app.enqueue(t, {"n": 0}, delay=timedelta(hours=1))
    running = await app.enqueue(t, {"n": 0})
    (claimed,) = await claim(app)
    assert claimed.id == running.job_id
    await backdate_jobs(
        app, timedelta(days=2), "finished_at", "created_at", ids=[r.job_id for r in old]
    )
    await backdate_jobs(app, timedelta(days=30), "created_at", ids=[waiting.job_id, running.job_id])

    removed = await app.prune(older_than=timedelta(days=1), batch_size=3)
    assert removed["jobs"] == old_count
    assert removed["concurrency_keys"] == 0
    assert await job_ids(app) == {r.job_id for r in recent} | {waiting.job_id, running.job_id}
    for r in old:
        assert await app.get_job(r.job_id) is None
    # Nothing left to prune.
    again = await app.prune(older_than=timedelta(days=1), batch_size=3)
    assert set(again.values()) == {0}
    # A pruned job's idempotency key is free again.
    assert (await app.enqueue(t, {"n": 0}, idempotency_key="old0")).outcome == "created"


async def test_prune_with_a_zero_cutoff_removes_every_terminal_job_and_only_those(
    app: sweepq.App,
) -> None:
    t = register(app)
    done = await app.enqueue_many([sweepq.JobSpec(t, {"n": i}) for i in range(4)])
    await run_all(app)
    live = await app.enqueue(t, {"n": 0}, delay=60)
    removed = await app.prune(older_than=timedelta(0))
    assert removed["jobs"] == len(done)
    assert await job_ids(app) == {live.job_id}


async def test_prune_reports_every_table_it_keeps_by_age(tx_app: sweepq.App, conn: Conn) -> None:
    removed = await tx_app.prune(older_than=timedelta(days=7), conn=conn)
    tables = {
        r[0]
        for r in await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = $1", tx_app.schema
        )
    }
    assert {"jobs", "concurrency_keys"} <= set(removed)
    assert set(removed) <= tables
    # Every table the queue writes has retention, or is bounded by construction.
    assert tables - set(removed) <= set(BOUNDED_TABLES)
    assert all(isinstance(n, int) and n >= 0 for n in removed.values())


async def test_prune_removes_unused_concurrency_keys_and_keeps_those_in_use(
    app: sweepq.App,
) -> None:
    t = register(app)
    # unused: its only job finished long ago; limited: carries a limit; waiting: has a job
    # waiting; running: has a job running; recent: its only job was cancelled before any claim
    # folded its wake-up, which then wakes nothing (no key row is made for it).
    finished = await app.enqueue(t, {"n": 0}, concurrency_key="unused")
    await run_all(app)
    await app.set_concurrency_limit("limited", 3)
    await app.enqueue(t, {"n": 0}, concurrency_key="waiting", delay=3600)
    await app.enqueue(t, {"n": 0}, concurrency_key="running")
    (claimed,) = await claim(app)
    recent = await app.enqueue(t, {"n": 0}, concurrency_key="recent")
    await app.cancel(recent.job_id)
    await backdate_jobs(app, timedelta(days=2), "finished_at", ids=[finished.job_id, recent.job_id])
    await backdate_keys(app, timedelta(days=2), ["unused", "limited", "waiting", "running"])

    removed = await app.prune(older_than=timedelta(days=1), batch_size=2)
    assert removed["jobs"] == 2
    assert removed["concurrency_keys"] == 1
    keys = {k.key: k for k in await app.concurrency_keys()}
    assert set(keys) == {"limited", "waiting", "running"}
    assert keys["limited"].max_running == 3
    assert (keys["waiting"].waiting, keys["running"].running) == (1, 1)
    job = await app.get_job(claimed.id)
    assert job is not None
    assert job.state is sweepq.JobState.RUNNING
    # The pruned key comes back with its next job, and that job runs.
    again = await app.enqueue(t, {"n": 0}, concurrency_key="unused")
    await run_all(app)
    job = await app.get_job(again.job_id)
    assert job is not None
    assert job.state is sweepq.JobState.COMPLETED


async def test_prune_puts_back_a_key_row_that_waiting_jobs_need(app: sweepq.App) -> None:
    t = register(app)
    schema = ident(app.schema)
    waiting = await app.enqueue(t, {"n": 0}, concurrency_key="k")
    # As if the key's row had been pruned while this enqueue was in flight.
    await app.pool.execute(f"DELETE FROM {schema}.concurrency_keys WHERE key = 'k'")
    await app.prune(older_than=timedelta(days=1))
    assert [k.key for k in await app.concurrency_keys()] == ["k"]
    await run_all(app)
    job = await app.get_job(waiting.job_id)
    assert job is not None
    assert job.state is sweepq.JobState.COMPLETED
