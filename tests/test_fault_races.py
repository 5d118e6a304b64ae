"""Races the queue must settle by itself (committed tier, real PostgreSQL, several connections):
a job cancelled, retried and claimed again by the same worker while its first execution still
runs; a worker's heartbeat and its outcome write over the same jobs; pruning that removes a
concurrency key's row under enqueues of that key; and concurrent enqueuers, and starters of a
sweep, that must end up with exactly one job, or one run.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import anyio
import asyncpg
import pytest

import sweepq
from factories import create_items
from statements import claim
from sweep_worker_proc import items_sweep, sweeps_app
from sweepq.core.decision import Decision
from sweepq.core.ident import ident
from sweepq.core.queries import Conn
from sweepq.core.rows import FinishBatch
from sweepq.sweeps.app import App
from waiting import wait_until

# In-process (several connections, no worker processes): a group of its own (tests/conftest.py).
pytestmark = [pytest.mark.fault, pytest.mark.committed, pytest.mark.xdist_group("races")]

REFUSED = "not recorded: their claims were no longer held by this worker"

COMPLETED = Decision(state="completed")


@pytest.fixture
async def app(dsn: str) -> AsyncIterator[App]:
    async with sweeps_app(dsn) as fresh:
        yield fresh


async def get(app: App, job_id: int) -> sweepq.Job:
    job = await app.get_job(job_id)
    assert job is not None
    return job


async def claims(app: App, job_id: int) -> int:
    return int(
        await app.pool.fetchval(
            f"SELECT claims FROM {ident(app.schema)}.jobs WHERE id = $1", job_id
        )
    )


async def key_running(app: App, key: str) -> int:
    return int(
        await app.pool.fetchval(
            f"SELECT running FROM {ident(app.schema)}.concurrency_keys WHERE key = $1", key
        )
    )


@contextlib.asynccontextmanager
async def connections(app: App, n: int) -> AsyncIterator[list[Conn]]:
    opened: list[Conn] = []
    try:
        for _ in range(n):
            opened.append(await asyncpg.connect(app.dsn))
        yield opened
    finally:
        for c in opened:
            await c.close()


# cancel, retry and claim again while the first execution runs ---------------------------------


@pytest.mark.parametrize("finishes_first", ["second execution", "first execution"])
async def test_the_first_execution_of_a_job_cancelled_retried_and_claimed_again_records_nothing(
    app: App, caplog: pytest.LogCaptureFixture, finishes_first: str
) -> None:
    caplog.set_level(logging.WARNING, logger="sweepq.worker")
    started: list[int] = []  # executions, numbered in the order they started
    release = {1: anyio.Event(), 2: anyio.Event()}
    returned: list[int] = []

    @app.task(name="twice")
    async def twice(ctx: sweepq.Context) -> None:
        execution = len(started) + 1
        started.append(execution)
        with anyio.fail_after(20):
            await release[execution].wait()
        returned.append(execution)
        if execution == 2:
            raise sweepq.Cancel("second")

    await app.set_concurrency_limit("k", 1)
    job_id = (await app.enqueue(twice, concurrency_key="k")).job_id

    async def started_are(expected: list[int]) -> bool:
        return started == expected

    async def refused() -> bool:
        return any(
            REFUSED in r.getMessage() and f"[{job_id}]" in r.getMessage() for r in caplog.records
        )

    processed: list[int] = []
    # The heartbeat (every 10 s) never beats during the test: nothing but the claim token
    # tells the two executions apart.
    worker = sweepq.Worker(
        app, concurrency=2, lease_seconds=30, heartbeat_seconds=10, poll_seconds=0.02
    )
    with anyio.fail_after(30):
        async with worker, anyio.create_task_group() as tg:

            async def run() -> None:
                processed.append(await worker.run_until_idle())

            tg.start_soon(run)
            await wait_until(lambda: started_are([1]))
            cancelled = await app.cancel(job_id, reason="operator")
            assert cancelled is not None
            assert cancelled.state is sweepq.JobState.CANCELLED
            retried = await app.retry(job_id)
            assert retried is not None
            assert retried.state is sweepq.JobState.AVAILABLE
            # The same worker claims the job again while execution 1 still runs.
            await wait_until(lambda: started_are([1, 2]))
            again = await get(app, job_id)
            assert (again.state, again.worker_id, again.attempt) == (
                sweepq.JobState.RUNNING,
                worker.id,
                1,
            )
            assert await claims(app, job_id) == 2
            assert await key_running(app, "k") == 1

            if finishes_first == "second execution":
                release[2].set()

                async def second_recorded() -> bool:
                    return (await get(app, job_id)).state is sweepq.JobState.CANCELLED

                await wait_until(second_recorded)
                recorded = await get(app, job_id)
                release[1].set()
                await wait_until(refused)
                assert await get(app, job_id) == recorded
            else:
                release[1].set()
                await wait_until(refused)
                # Execution 1's outcome changed nothing: execution 2 still holds the job.
                assert await get(app, job_id) == again
                release[2].set()
    assert returned == ([2, 1] if finishes_first == "second execution" else [1, 2])
    assert processed == [2]
    job = await get(app, job_id)
    assert (job.state, job.attempt, job.failure_reason) == (sweepq.JobState.CANCELLED, 1, None)
    assert [(e.kind, e.error) for e in job.errors] == [
        ("cancelled", "operator"),
        ("cancelled", "second"),
    ]
    assert job.finished_at is not None
    assert job.worker_id is None
    assert await claims(app, job_id) == 2
    assert await key_running(app, "k") == 0
    # Exactly one outcome was refused: execution 1's.
    assert sum(REFUSED in r.getMessage() for r in caplog.records) == 1


# a worker's heartbeat racing its own outcome write ------------------------------------------------


async def test_a_workers_heartbeat_and_its_outcome_write_over_the_same_jobs_never_deadlock(
    app: App,
) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    schema = ident(app.schema)
    await app.enqueue_many([sweepq.JobSpec(t), sweepq.JobSpec(t)])
    # The worker's own pool: its statements run with the worker's plans.
    async with sweepq.Worker(app, lease_seconds=30) as worker:
        first, second = sorted(
            await claim(app, 2, worker=worker.id, on=worker.pool), key=lambda c: c.id
        )
        # The flusher records outcomes in the order handlers finished; the heartbeat renews
        # the same claims (finished, not yet recorded) in its own order.
        outcomes = FinishBatch()
        outcomes.add(first.token, COMPLETED)
        outcomes.add(second.token, COMPLETED)
        results: dict[str, set[tuple[int, int]]] = {}
        errors: list[asyncpg.PostgresError] = []

        async def record() -> None:
            try:
                written = await app.queries.job_finish_many(worker.pool, worker.id, outcomes)
                results["recorded"] = written.tokens
            except asyncpg.PostgresError as exc:
                errors.append(exc)

        async def renew() -> None:
            try:
                results["renewed"] = await app.queries.job_heartbeat(
                    worker.pool, worker.id, 30.0, [second.token, first.token]
                )
            except asyncpg.PostgresError as exc:
                errors.append(exc)

        async def waiting(n: int) -> bool:
            found = await app.pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE application_name = $1 AND wait_event_type = 'Lock'",
                worker.application_name,
            )
            return int(found) == n

        # Another session holds the first job's row for a moment (as a cancel, a rescue or
        # the leader's maintenance may): both statements line up behind it.
        async with (
            connections(app, 1) as (other,),
            anyio.create_task_group() as tg,
            other.transaction(),
        ):
            await other.execute(f"SELECT 1 FROM {schema}.jobs WHERE id = $1 FOR UPDATE", first.id)
            tg.start_soon(record)
            await wait_until(lambda: waiting(1))
            # The heartbeat never waits on a locked row: it answers while the write waits, and
            # both claims are still held.
            with anyio.fail_after(5):
                await renew()
            assert results["renewed"] == {first.token, second.token}
            assert await waiting(1)
    if errors:
        raise errors[0]  # the server broke a deadlock by failing one of them
    assert results["recorded"] == {first.token, second.token}


# prune racing enqueues of a key ---------------------------------------------------------------

ROUNDS = 200
MODES = ("prune before the commit", "prune at the commit", "prune and claim at the commit")


async def key_row(app: App, key: str) -> asyncpg.Record | None:
    return await app.pool.fetchrow(
        f"SELECT max_running, running, next_run_at, updated_at"
        f" FROM {ident(app.schema)}.concurrency_keys WHERE key = $1",
        key,
    )


async def available_jobs(app: App) -> list[int]:
    rows = await app.pool.fetch(
        f"SELECT id FROM {ident(app.schema)}.jobs WHERE state = 'available' ORDER BY id"
    )
    return [r["id"] for r in rows]


@pytest.mark.parametrize("cutoff", [timedelta(0), timedelta(days=1)], ids=["zero", "a day"])
async def test_jobs_of_a_key_enqueued_while_prune_removes_the_keys_row_are_never_stranded(
    app: App, cutoff: timedelta
) -> None:
    ran: list[int] = []

    @app.task(name="keyed")
    async def keyed(ctx: sweepq.Context) -> None:
        ran.append(ctx.job_id)

    schema = ident(app.schema)
    rng = random.Random()
    enqueued: list[int] = []
    stranded: list[tuple[int, str, int]] = []  # (round, mode, job) not run after its round
    not_prunable: list[tuple[int, Any]] = []  # rounds whose key row could not be pruned
    removed: Counter[str] = Counter()  # rounds in which prune removed the key's row, by mode
    present: Counter[str] = Counter()  # rounds that began with the key's row present, by mode
    async with (
        connections(app, 1) as (tx_conn,),
        sweepq.Worker(app, concurrency=1, poll_seconds=0.02) as worker,
    ):

        async def enqueue_and_commit(delay: float) -> None:
            async with tx_conn.transaction():
                r = await app.enqueue(keyed, concurrency_key="k", conn=tx_conn)
                enqueued.append(r.job_id)
                await anyio.sleep(delay)

        async def prune(delay: float, mode: str) -> None:
            await anyio.sleep(delay)
            if (await app.prune(older_than=cutoff))["concurrency_keys"]:
                removed[mode] += 1

        async def claim(delay: float) -> None:
            await anyio.sleep(delay)
            await worker.run_until_idle()

        for n in range(ROUNDS):
            mode = MODES[n % len(MODES)]
            if cutoff:
                # The key's last job finished long ago, and the key was last touched then.
                await app.pool.execute(
                    f"UPDATE {schema}.concurrency_keys SET updated_at = now() - interval '2 days'"
                    " WHERE key = 'k';"
                    f" UPDATE {schema}.jobs SET finished_at = now() - interval '2 days'"
                    " WHERE state = 'completed'"
                )
            # The key's row is absent, or prunable: no limit, nothing running or waiting.
            row = await key_row(app, "k")
            present[mode] += row is not None
            if row is not None and (row["max_running"], row["running"], row["next_run_at"]) != (
                None,
                0,
                None,
            ):
                not_prunable.append((n, dict(row)))
            if mode == "prune before the commit":
                async with tx_conn.transaction():
                    r = await app.enqueue(keyed, concurrency_key="k", conn=tx_conn)
                    enqueued.append(r.job_id)
                    await prune(0, mode)
            else:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(enqueue_and_commit, rng.uniform(0, 0.004))
                    tg.start_soon(prune, rng.uniform(0, 0.006), mode)
                    if mode == "prune and claim at the commit":
                        tg.start_soon(claim, rng.uniform(0, 0.006))
            await worker.run_until_idle()
            if enqueued[-1] not in ran:
                stranded.append((n, mode, enqueued[-1]))
        # Whatever a round left behind, a worker must run now.
        await worker.run_until_idle()
        left = await available_jobs(app)

    print(
        f"prune racing enqueues (cutoff {cutoff}): rounds={ROUNDS} key row present at the"
        f" start: {dict(present)}, removed by prune: {dict(removed)},"
        f" stranded after their round: {len(stranded)}"
    )
    assert not_prunable == []
    assert stranded == []
    assert left == []
    assert sorted(ran) == sorted(enqueued)
    assert len(set(enqueued)) == ROUNDS
    for job_id in set(enqueued):
        job = await app.get_job(job_id)
        assert job is None or job.state is sweepq.JobState.COMPLETED
    row = await key_row(app, "k")
    assert row is None or row["running"] == 0
    # The race was real: with the enqueue in flight, prune removed the key's row whenever it
    # was there, and it was there in most rounds.
    before = MODES[0]
    assert removed[before] == present[before] > len(range(0, ROUNDS, len(MODES))) // 2


# concurrent enqueuers and starters --------------------------------------------------------------

ENQUEUERS = 32
STARTERS = 16


async def at_once(conns: list[Conn], call: Callable[[Conn], Awaitable[Any]]) -> list[Any]:
    """`call(conn)` on every connection, released together once every caller waits."""
    results: list[Any] = []
    waiting = 0
    go = anyio.Event()

    async def one(c: Conn) -> None:
        nonlocal waiting
        waiting += 1
        await go.wait()
        results.append(await call(c))

    async def all_waiting() -> bool:
        return waiting == len(conns)

    async with anyio.create_task_group() as tg:
        for c in conns:
            tg.start_soon(one, c)
        await wait_until(all_waiting)
        go.set()
    assert len(results) == len(conns)
    return results


@pytest.mark.parametrize(
    "options",
    [
        {"idempotency_key": "pay:42"},
        {"identity_key": "rebuild:7"},
        {"identity_key": "digest", "unique_for": timedelta(hours=1)},
    ],
    ids=["idempotency_key", "identity_key", "identity_key+unique_for"],
)
async def test_thirty_two_concurrent_enqueuers_of_one_key_create_exactly_one_job(
    app: App, options: dict[str, Any]
) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context, n: int) -> None:
        return None

    async with connections(app, ENQUEUERS) as conns:
        numbers = {id(c): n for n, c in enumerate(conns)}
        results: list[sweepq.Enqueued] = await at_once(
            conns, lambda c: app.enqueue(t, {"n": numbers[id(c)]}, conn=c, **options)
        )
    assert Counter(r.outcome for r in results) == {"created": 1, "existing_active": ENQUEUERS - 1}
    assert len({r.job_id for r in results}) == 1
    jobs = await app.pool.fetch(f"SELECT id FROM {ident(app.schema)}.jobs")
    assert [r["id"] for r in jobs] == [results[0].job_id]


async def test_sixteen_concurrent_starts_of_one_sweep_start_exactly_one_run(app: App) -> None:
    await create_items(app, 10)
    cls = app.register_sweep(items_sweep(app.schema))
    params = {"delay": 0}
    async with connections(app, STARTERS) as conns:
        results: list[sweepq.SweepStarted] = await at_once(
            conns, lambda c: app.start_sweep(cls.name, params, conn=c)
        )
    assert Counter(r.outcome for r in results) == {"started": 1, "already_running": STARTERS - 1}
    assert len({r.run_id for r in results}) == 1
    schema = ident(app.schema)
    runs = await app.pool.fetch(f"SELECT id, state::text AS state FROM {schema}.sweep_runs")
    assert [(r["id"], r["state"]) for r in runs] == [(results[0].run_id, "running")]
    # One root link: the run's walk starts once.
    links = await app.pool.fetchval(f"SELECT count(*) FROM {schema}.jobs")
    assert links == 1
