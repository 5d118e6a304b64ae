"""Dedup under concurrent enqueuers: the database decides, and the outcome tells the truth."""

from __future__ import annotations

import contextlib
import random
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import anyio
import asyncpg
import pytest

import sweepq
from factories import count_rows
from sweepq.core.queries import Conn
from waiting import StartLine

ENQUEUERS = 16


@contextlib.asynccontextmanager
async def connections(app: sweepq.App, n: int) -> AsyncIterator[list[Conn]]:
    opened: list[Conn] = []
    try:
        for _ in range(n):
            opened.append(await asyncpg.connect(app.dsn))
        yield opened
    finally:
        for c in opened:
            await c.close()


async def enqueue_at_once(
    app: sweepq.App, task: sweepq.Task, **options: Any
) -> list[sweepq.Enqueued]:
    """Enqueue the same job from ENQUEUERS connections released together."""
    results: list[sweepq.Enqueued] = []
    line = StartLine(ENQUEUERS)

    async def one(c: Conn, n: int) -> None:
        await line.reached()
        results.append(await app.enqueue(task, {"n": n}, conn=c, **options))

    async with connections(app, ENQUEUERS) as conns, anyio.create_task_group() as tg:
        for n, c in enumerate(conns):
            tg.start_soon(one, c, n)
        await line.release()
    assert len(results) == ENQUEUERS
    return results


def register(app: sweepq.App) -> sweepq.Task:
    @app.task(name="t")
    async def t(ctx: sweepq.Context, n: int) -> None:
        return None

    return t


async def test_concurrent_enqueuers_of_one_idempotency_key_create_exactly_one_job(
    app: sweepq.App,
) -> None:
    t = register(app)
    results = await enqueue_at_once(app, t, idempotency_key="pay:42")
    assert Counter(r.outcome for r in results) == {"created": 1, "existing_active": 15}
    assert len({r.job_id for r in results}) == 1
    assert await count_rows(app, "jobs") == 1


async def test_concurrent_enqueuers_of_one_identity_create_exactly_one_active_job(
    app: sweepq.App,
) -> None:
    t = register(app)
    results = await enqueue_at_once(app, t, identity_key="rebuild:7")
    assert Counter(r.outcome for r in results) == {"created": 1, "existing_active": 15}
    assert len({r.job_id for r in results}) == 1
    assert await count_rows(app, "jobs") == 1


async def test_concurrent_enqueuers_of_one_identity_with_unique_for_create_exactly_one_job(
    app: sweepq.App,
) -> None:
    t = register(app)
    results = await enqueue_at_once(app, t, identity_key="digest", unique_for=timedelta(hours=1))
    assert Counter(r.outcome for r in results) == {"created": 1, "existing_active": 15}
    assert len({r.job_id for r in results}) == 1
    assert await count_rows(app, "jobs") == 1


async def test_unique_for_still_dedups_concurrent_enqueuers_after_the_first_job_completed(
    app: sweepq.App,
) -> None:
    t = register(app)
    first = await app.enqueue(t, {"n": -1}, identity_key="digest", unique_for=3600)
    async with sweepq.Worker(app, concurrency=1) as worker:
        assert await worker.run_until_idle() == 1
    job = await app.get_job(first.job_id)
    assert job is not None
    assert job.state is sweepq.JobState.COMPLETED
    results = await enqueue_at_once(app, t, identity_key="digest", unique_for=3600)
    assert results == [sweepq.Enqueued(first.job_id, "existing_terminal")] * ENQUEUERS
    assert await count_rows(app, "jobs") == 1


async def test_without_unique_for_a_completed_identity_admits_exactly_one_new_job(
    app: sweepq.App,
) -> None:
    t = register(app)
    first = await app.enqueue(t, {"n": -1}, identity_key="rebuild")
    async with sweepq.Worker(app, concurrency=1) as worker:
        assert await worker.run_until_idle() == 1
    results = await enqueue_at_once(app, t, identity_key="rebuild")
    assert Counter(r.outcome for r in results) == {"created": 1, "existing_active": 15}
    (new_id,) = {r.job_id for r in results}
    assert new_id != first.job_id
    assert await count_rows(app, "jobs") == 2


async def test_concurrent_enqueue_many_calls_sharing_keys_create_each_job_once(
    app: sweepq.App,
) -> None:
    """Callers listing the same keys in different orders neither deadlock nor duplicate."""
    t = register(app)
    keys = 300
    specs = [sweepq.JobSpec(t, {"n": i}, idempotency_key=f"k{i}") for i in range(keys)]
    results: list[dict[int, sweepq.Enqueued]] = []
    line = StartLine(8)

    async def one(c: Conn, n: int) -> None:
        order = list(range(keys))
        random.Random(n).shuffle(order)
        await line.reached()
        got = await app.enqueue_many([specs[i] for i in order], conn=c)
        results.append(dict(zip(order, got, strict=True)))

    async with connections(app, 8) as conns, anyio.create_task_group() as tg:
        for n, c in enumerate(conns):
            tg.start_soon(one, c, n)
        await line.release()
    assert len(results) == 8
    assert await count_rows(app, "jobs") == keys
    for i in range(keys):
        column = [r[i] for r in results]
        assert len({r.job_id for r in column}) == 1
        assert sorted(r.outcome for r in column) == ["created"] + ["existing_active"] * 7
        job = await app.get_job(column[0].job_id)
        assert job is not None
        assert job.args == {"n": i}


async def test_unique_for_without_identity_key_is_refused_and_writes_nothing(
    tx_app: sweepq.App, conn: Conn
) -> None:
    t = register(tx_app)
    before = await count_rows(tx_app, "jobs", on=conn)
    with pytest.raises(sweepq.InvalidJobOptionError, match="pass identity_key"):
        await tx_app.enqueue(t, {"n": 1}, unique_for=timedelta(minutes=5), conn=conn)
    with pytest.raises(sweepq.InvalidJobOptionError, match="unique_for needs identity_key"):
        await tx_app.enqueue_many(
            [
                sweepq.JobSpec(t, {"n": 1}),
                sweepq.JobSpec(t, {"n": 2}, idempotency_key="k", unique_for=60),
            ],
            conn=conn,
        )
    assert await count_rows(tx_app, "jobs", on=conn) == before == 0
