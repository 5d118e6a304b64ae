"""Retention: pruning removes old history in batches and never touches live work."""

from __future__ import annotations

from datetime import timedelta

import pytest

import sweepq
from statements import claim, job_counts
from sweepq.core.ident import ident

# Tables whose size is bounded by construction rather than by age.
BOUNDED_TABLES = {
    "schema_migrations": "one row per migration",
    "leaders": "one row per elected role",
}


def register(app: sweepq.App) -> sweepq.Task:
    @app.task(name="t", max_attempts=1)
    async def t(ctx: sweepq.Context, n: int) -> None:
        if n % 3 == 1:
            raise RuntimeError("fails")
        if n % 3 == 2:
            raise sweepq.Cancel("cancelled")

    return t


async def age(app: sweepq.App, ids: list[int], column: str, by: timedelta) -> None:
    assert column in ("finished_at", "created_at")
    await app.pool.execute(
        f"UPDATE {ident(app.schema)}.jobs SET {column} = {column} - $2::interval"
        " WHERE id = ANY($1::bigint[])",
        ids,
        by,
    )


async def job_ids(app: sweepq.App) -> set[int]:
    return {r[0] for r in await app.pool.fetch(f"SELECT id FROM {ident(app.schema)}.jobs")}


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
    await age(app, [r.job_id for r in old], "finished_at", timedelta(days=2))
    await age(app, [r.job_id for r in old], "created_at", timedelta(days=2))
    await age(app, [waiting.job_id, running.job_id], "created_at", timedelta(days=30))

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


async def test_prune_reports_every_table_it_keeps_by_age(app: sweepq.App) -> None:
    removed = await app.prune(older_than=timedelta(days=7))
    tables = {
        r[0]
        for r in await app.pool.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = $1", app.schema
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
    schema = ident(app.schema)
    # unused: its only job finished long ago; limited: carries a limit; waiting: has a job
    # waiting; running: has a job running; recent: set up just now.
    finished = await app.enqueue(t, {"n": 0}, concurrency_key="unused")
    await run_all(app)
    await app.set_concurrency_limit("limited", 3)
    await app.enqueue(t, {"n": 0}, concurrency_key="waiting", delay=3600)
    await app.enqueue(t, {"n": 0}, concurrency_key="running")
    (claimed,) = await claim(app)
    await app.enqueue(t, {"n": 0}, concurrency_key="recent")
    await app.pool.execute(
        f"UPDATE {schema}.jobs SET state = 'cancelled', finished_at = now() - interval '2 days'"
        " WHERE concurrency_key = 'recent'"
    )
    await age(app, [finished.job_id], "finished_at", timedelta(days=2))
    await app.pool.execute(
        f"UPDATE {schema}.concurrency_keys SET updated_at = now() - interval '2 days'"
        " WHERE key <> 'recent'"
    )

    removed = await app.prune(older_than=timedelta(days=1), batch_size=2)
    assert removed["jobs"] == 2
    assert removed["concurrency_keys"] == 1
    keys = {k.key: k for k in await app.concurrency_keys()}
    assert set(keys) == {"limited", "waiting", "running", "recent"}
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
