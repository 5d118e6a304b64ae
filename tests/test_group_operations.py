"""Job groups: jobs enqueued under one name, counted, cancelled and retried together."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

import sweepq
from factories import count_rows
from statements import claim, finish
from sweepq.core.ident import ident
from sweepq.core.queries import Conn


def register(app: sweepq.App) -> sweepq.Task:
    @app.task(name="item", max_attempts=1)
    async def item(ctx: sweepq.Context, n: int, fail: bool = False) -> None:
        if fail:
            raise RuntimeError(f"item {n} fails")

    return item


async def test_a_groups_counts_follow_its_jobs_to_the_end(app: sweepq.App) -> None:
    item = register(app)
    await app.enqueue_many(
        [sweepq.JobSpec(item, {"n": n, "fail": n % 4 == 0}, group="import-42") for n in range(12)]
        + [sweepq.JobSpec(item, {"n": n}, group="other") for n in range(5)]
        + [sweepq.JobSpec(item, {"n": 99})]
    )
    counts = await app.group_counts("import-42")
    assert (counts.available, counts.outstanding, counts.total) == (12, 12, 12)
    assert await app.group_outstanding(["import-42", "other", "none"]) == {
        "import-42": 12,
        "other": 5,
        "none": 0,
    }
    async with sweepq.Worker(app, concurrency=4) as worker:
        assert await worker.run_until_idle() == 18
    counts = await app.group_counts("import-42")
    assert counts == sweepq.GroupCounts(completed=9, failed=3)
    assert counts.outstanding == 0
    job = await app.get_job(await first_of(app, "other"))
    assert job is not None
    assert job.group == "other"


async def first_of(app: sweepq.App, group: str) -> int:
    found = await app.pool.fetchval(
        f"SELECT min(id) FROM {ident(app.schema)}.jobs WHERE job_group = $1", group
    )
    assert found is not None
    return int(found)


async def test_cancelling_a_group_leaves_its_running_jobs_unless_asked(
    tx_app: sweepq.App, conn: Conn
) -> None:
    item = register(tx_app)
    await tx_app.set_concurrency_limit("k", 5, conn=conn)
    await tx_app.enqueue_many(
        [sweepq.JobSpec(item, {"n": n}, group="g", concurrency_key="k") for n in range(6)],
        conn=conn,
    )
    running = await claim(tx_app, 2, on=conn)
    assert len(running) == 2
    assert await tx_app.cancel_group("g", reason="not needed", conn=conn) == 4
    counts = await tx_app.group_counts("g", conn=conn)
    assert (counts.running, counts.cancelled) == (2, 4)
    assert await tx_app.cancel_group("g", include_running=True, reason="stop all", conn=conn) == 2
    assert await tx_app.group_counts("g", conn=conn) == sweepq.GroupCounts(cancelled=6)
    # The running executions were fenced out, and the key's slots given back.
    assert not await finish(tx_app, running[0], on=conn)
    keys = {k.key: k for k in await tx_app.concurrency_keys(conn=conn)}
    assert keys["k"].running == 0
    job = await tx_app.get_job(running[1].id, conn=conn)
    assert job is not None
    assert [(e.kind, e.error) for e in job.errors] == [("cancelled", "stop all")]


async def test_retrying_a_groups_failures_runs_them_again_with_a_fresh_budget(
    app: sweepq.App,
) -> None:
    fixed = anyio.Event()

    @app.task(name="flaky", max_attempts=1)
    async def flaky(ctx: sweepq.Context, n: int) -> None:
        if n % 2 and not fixed.is_set():
            raise RuntimeError("not yet")

    await app.enqueue_many([sweepq.JobSpec(flaky, {"n": n}, group="batch") for n in range(10)])
    held = await app.enqueue(flaky, {"n": 1}, group="batch", identity_key="only-one")
    async with sweepq.Worker(app, concurrency=4) as worker:
        assert await worker.run_until_idle() == 11
        assert await app.group_counts("batch") == sweepq.GroupCounts(completed=5, failed=6)
        # A failed job whose identity another active job holds stays failed.
        blocker = await app.enqueue(flaky, {"n": 2}, identity_key="only-one", delay=3600)
        fixed.set()
        assert await app.retry_group_failures("batch") == 5
        assert await worker.run_until_idle() == 5
    counts = await app.group_counts("batch")
    assert (counts.completed, counts.failed) == (10, 1)
    job = await app.get_job(held.job_id)
    assert job is not None
    assert job.state is sweepq.JobState.FAILED
    await app.cancel(blocker.job_id)
    assert await app.retry_group_failures("batch") == 1


async def test_a_groups_counts_read_only_its_own_index_entries(app: sweepq.App) -> None:
    item = register(app)
    await app.enqueue_many([sweepq.JobSpec(item, {"n": n}) for n in range(3_000)])
    await app.enqueue_many([sweepq.JobSpec(item, {"n": n}, group="small") for n in range(7)])
    await app.pool.execute(f"VACUUM ANALYZE {ident(app.schema)}.jobs")
    for name in ("job_group_counts", "job_group_outstanding"):
        arg: Any = "small" if name == "job_group_counts" else ["small"]
        plan = json.loads(
            await app.pool.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + app.queries.sql[name], arg)
        )
        assert rows_read(plan[0]["Plan"]) <= 7, json.dumps(plan, indent=1)


def rows_read(node: dict[str, Any]) -> int:
    own = 0
    if node.get("Relation Name") == "jobs":
        own = node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
        own += node.get("Rows Removed by Filter", 0)
    return own + sum(rows_read(child) for child in node.get("Plans", []))


@pytest.mark.parametrize("group", ["", "a\x00b", 42, "x" * 513])
async def test_a_bad_group_is_refused_and_writes_nothing(
    tx_app: sweepq.App, conn: Conn, group: Any
) -> None:
    item = register(tx_app)
    with pytest.raises(sweepq.InvalidJobOptionError, match="group"):
        await tx_app.enqueue(item, {"n": 1}, group=group, conn=conn)
    with pytest.raises(sweepq.InvalidJobOptionError, match="group"):
        await tx_app.group_counts(group, conn=conn)
    assert await count_rows(tx_app, "jobs", on=conn) == 0
