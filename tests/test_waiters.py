"""`App.wait_for`: woken by NOTIFY when its job ends, whichever statement ends it; race-free
against a finish in flight; quiet for jobs nobody waits for; clear when it cannot answer.

Timings are not asserted: each wait has a generous bound, and a wait that needed polling would
not end within it (a waiter renews its row every few minutes and never polls a job that is not
past its deadline)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import anyio
import asyncpg
import pytest

import sweepq
from conftest import migrated_app
from factories import count_rows, expire_deadline, expire_lease
from statements import claim, finish
from sweepq.core.decision import Decision
from sweepq.core.ident import ident
from sweepq.core.queries import finished_channel
from sweepq.core.rows import FinishBatch
from waiting import wait_until

BOUND = 20  # seconds: far beyond any wake-up by NOTIFY, far below a test's timeout


async def waiters(app: sweepq.App) -> int:
    return await count_rows(app, "job_waiters")


def register(app: sweepq.App) -> tuple[sweepq.Task, anyio.Event]:
    release = anyio.Event()

    @app.task(name="held")
    async def held(ctx: sweepq.Context, n: int = 0) -> dict[str, int]:
        await release.wait()
        return {"n": n}

    return held, release


class Waiting:
    """A `wait_for` running in the background; `job` once it returned, `error` if it raised."""

    def __init__(self) -> None:
        self.job: sweepq.Job | None = None
        self.error: BaseException | None = None
        self.done = anyio.Event()

    async def run(self, app: sweepq.App, job_id: int, timeout: float | None = None) -> None:
        # No timeout of its own: at its timeout a wait reads the job once more, so a wait that
        # was never woken would still return a job that ended; `result` bounds it instead.
        try:
            self.job = await app.wait_for(job_id, timeout=timeout)
        except Exception as exc:
            self.error = exc
        finally:
            self.done.set()

    async def result(self) -> sweepq.Job:
        with anyio.fail_after(BOUND):
            await self.done.wait()
        if self.error is not None:
            raise self.error
        assert self.job is not None
        return self.job


async def start_waiting(
    tg: anyio.abc.TaskGroup, app: sweepq.App, job_id: int, *, registered: int = 1
) -> Waiting:
    """Start a wait and return once its waiter row is in (it is then LISTENing and reading)."""
    waiting = Waiting()
    tg.start_soon(waiting.run, app, job_id)
    await wait_until(lambda: _at_least(app, registered))
    return waiting


async def _at_least(app: sweepq.App, n: int) -> bool:
    return await waiters(app) >= n


async def test_a_wait_is_woken_by_the_worker_finishing_the_job(app: sweepq.App) -> None:
    held, release = register(app)
    r = await app.enqueue(held, {"n": 7})
    worker = sweepq.Worker(app, concurrency=2, poll_seconds=60)
    async with worker, anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        waiting = await start_waiting(tg, app, r.job_id)
        await wait_until(lambda: _running(app, r.job_id))
        assert not waiting.done.is_set()
        release.set()
        job = await waiting.result()
        worker.stop()
    assert job.state is sweepq.JobState.COMPLETED
    assert job.result == {"n": 7}
    assert await waiters(app) == 0  # the waiter removed its row


async def _running(app: sweepq.App, job_id: int) -> bool:
    job = await app.get_job(job_id)
    return job is not None and job.state is sweepq.JobState.RUNNING


async def test_a_job_that_already_ended_is_returned_at_once(app: sweepq.App) -> None:
    held, release = register(app)
    release.set()
    r = await app.enqueue(held, {"n": 1})
    async with sweepq.Worker(app) as worker:
        await worker.run_until_idle()
    job = await app.wait_for(r.job_id, timeout=0)  # 0: look once, never wait
    assert (job.state, job.result) == (sweepq.JobState.COMPLETED, {"n": 1})


async def test_a_wait_that_times_out_says_where_the_job_is_and_cleans_up(app: sweepq.App) -> None:
    held, _ = register(app)
    r = await app.enqueue(held, delay=timedelta(hours=1))
    with pytest.raises(TimeoutError) as raised:
        await app.wait_for(r.job_id, timeout=timedelta(milliseconds=200))
    message = str(raised.value)
    assert f"job {r.job_id} (held) did not finish within 0.2s" in message
    assert "it is available (attempt 0 of 5 so far)" in message
    assert f"get_job({r.job_id})" in message
    assert await waiters(app) == 0


async def test_waiting_for_a_job_that_does_not_exist_is_a_clear_error(app: sweepq.App) -> None:
    with pytest.raises(sweepq.UnknownJobError, match=r"^no job 424242 in schema 't_") as raised:
        await app.wait_for(424242, timeout=5)
    assert "never existed, or retention pruned it" in str(raised.value)
    assert isinstance(raised.value, LookupError)
    assert await waiters(app) == 0


@pytest.mark.parametrize(
    ("job_id", "timeout", "match"),
    [("7", 1, "a job id is an int"), (1, -1, "timeout must be"), (1, float("nan"), "timeout")],
)
async def test_wait_for_checks_its_arguments(
    app: sweepq.App, job_id: Any, timeout: Any, match: str
) -> None:
    with pytest.raises(sweepq.InvalidJobOptionError, match=match):
        await app.wait_for(job_id, timeout=timeout)


async def test_a_cancel_wakes_the_wait(app: sweepq.App) -> None:
    held, _ = register(app)
    r = await app.enqueue(held, delay=timedelta(hours=1))
    async with anyio.create_task_group() as tg:
        waiting = await start_waiting(tg, app, r.job_id)
        await app.cancel(r.job_id, reason="not needed")
        job = await waiting.result()
    assert job.state is sweepq.JobState.CANCELLED
    assert job.errors[-1].error == "not needed"


async def test_cancelling_a_running_job_wakes_the_wait(app: sweepq.App) -> None:
    held, _ = register(app)
    r = await app.enqueue(held)
    (claimed,) = await claim(app)
    async with anyio.create_task_group() as tg:
        waiting = await start_waiting(tg, app, r.job_id)
        await app.cancel(claimed.id)
        assert (await waiting.result()).state is sweepq.JobState.CANCELLED


async def test_a_rescue_past_the_last_attempt_wakes_the_wait(app: sweepq.App) -> None:
    held, _ = register(app)
    r = await app.enqueue(held, max_attempts=1)
    await claim(app)
    async with anyio.create_task_group() as tg:
        waiting = await start_waiting(tg, app, r.job_id)
        await expire_lease(app, r.job_id)
        assert await app.rescue_lapsed(grace_seconds=0) == 1
        job = await waiting.result()
    assert (job.state, job.failure_reason) == (sweepq.JobState.FAILED, "max_attempts_exceeded")
    assert job.errors[-1].kind == "worker_died"  # the claim's worker "w" has no connection


async def test_a_deadline_expired_by_maintenance_wakes_the_wait(app: sweepq.App) -> None:
    held, _ = register(app)
    r = await app.enqueue(held, delay=timedelta(hours=1), deadline=timedelta(hours=2))
    async with anyio.create_task_group() as tg:
        waiting = await start_waiting(tg, app, r.job_id)
        # Once its read is over: expiry skips a row locked that instant (it takes it next round).
        await wait_until(lambda: _idle_after_reading(app))
        await expire_deadline(app, r.job_id)
        assert await app.expire_deadlines() == 1
        job = await waiting.result()
    assert (job.state, job.failure_reason) == (sweepq.JobState.FAILED, "deadline_exceeded")


async def test_a_deadline_expired_by_a_claim_ends_the_wait_too(app: sweepq.App) -> None:
    # The claim that fails it notifies the waiter, as maintenance's expiry does.
    held, _ = register(app)
    r = await app.enqueue(held, deadline=timedelta(seconds=1))
    async with anyio.create_task_group() as tg:
        waiting = await start_waiting(tg, app, r.job_id)
        await wait_until(
            lambda: _idle_after_reading(app)
        )  # a claim skips a row locked that instant
        await wait_until(lambda: _deadline_passed(app, r.job_id))
        assert await claim(app) == []  # it fails the job instead of running it
        job = await waiting.result()
    assert (job.state, job.failure_reason) == (sweepq.JobState.FAILED, "deadline_exceeded")


async def _deadline_passed(app: sweepq.App, job_id: int) -> bool:
    table = f"{ident(app.schema)}.jobs"
    return bool(
        await app.pool.fetchval(f"SELECT deadline_at <= now() FROM {table} WHERE id = $1", job_id)
    )


async def test_many_waits_on_many_jobs_finished_concurrently_all_end(app: sweepq.App) -> None:
    held, release = register(app)
    jobs = await app.enqueue_many([sweepq.JobSpec(held, {"n": n}) for n in range(40)])
    ids = [r.job_id for r in jobs]
    # Two waiters on the first job, one on each of the others.
    waits = [Waiting() for _ in range(len(ids) + 1)]
    async with sweepq.Worker(app, concurrency=10) as worker, anyio.create_task_group() as tg:
        for waiting, job_id in zip(waits, [ids[0], *ids], strict=True):
            tg.start_soon(waiting.run, app, job_id)
        await wait_until(lambda: _at_least(app, len(waits)))
        release.set()
        tg.start_soon(worker.run_until_idle)
        ended = [await w.result() for w in waits]
    assert [j.id for j in ended] == [ids[0], *ids]
    assert {j.state for j in ended} == {sweepq.JobState.COMPLETED}
    assert [j.result for j in ended[1:]] == [{"n": n} for n in range(40)]
    assert await waiters(app) == 0


async def test_a_wait_that_starts_while_the_finish_is_in_flight_sees_it_commit(
    app: sweepq.App, dsn: str
) -> None:
    # The finishing statement has run (its notification found no waiter) but not committed: the
    # waiter's FOR SHARE read waits for that commit, then returns the finished job.
    held, _ = register(app)
    r = await app.enqueue(held)
    (claimed,) = await claim(app, worker="w")
    other = await asyncpg.connect(dsn)
    try:
        tx = other.transaction()
        await tx.start()
        out = FinishBatch()
        out.add(claimed.token, Decision(state="completed", result='{"late": true}'))
        assert (await app.queries.job_finish_many(other, "w", out)).tokens == {claimed.token}
        async with anyio.create_task_group() as tg:
            waiting = await start_waiting(tg, app, r.job_id)
            await anyio.sleep(0.2)
            assert not waiting.done.is_set()  # its read waits for the finish to commit
            await tx.commit()
            job = await waiting.result()
    finally:
        await other.close()
    assert (job.state, job.result) == (sweepq.JobState.COMPLETED, {"late": True})


async def test_a_cancel_in_a_repeatable_read_transaction_still_wakes_the_wait(
    app: sweepq.App, dsn: str
) -> None:
    # Its snapshot predates the waiter's row, so it cannot see it: it notifies every id instead.
    held, _ = register(app)
    r = await app.enqueue(held, delay=timedelta(hours=1))
    other = await asyncpg.connect(dsn)
    try:
        tx = other.transaction(isolation="repeatable_read")
        await tx.start()
        await other.fetchval("SELECT count(*) FROM pg_class")  # the snapshot is taken here
        async with anyio.create_task_group() as tg:
            waiting = await start_waiting(tg, app, r.job_id)
            await app.cancel(r.job_id, conn=other)
            await tx.commit()
            assert (await waiting.result()).state is sweepq.JobState.CANCELLED
    finally:
        await other.close()


@pytest.fixture
async def heard(app: sweepq.App, dsn: str) -> AsyncIterator[list[str]]:
    """Every notification on the app's "finished" channel, as it arrives."""
    payloads: list[str] = []
    listener = await asyncpg.connect(dsn)

    def received(_c: Any, _pid: int, _channel: str, payload: object) -> None:
        payloads.append(str(payload))

    await listener.add_listener(finished_channel(app.schema), received)
    try:
        yield payloads
    finally:
        await listener.close()


async def test_jobs_nobody_waits_for_send_no_notification(
    app: sweepq.App, heard: list[str]
) -> None:
    held, release = register(app)
    release.set()
    jobs = await app.enqueue_many([sweepq.JobSpec(held, {"n": n}) for n in range(30)])
    cancelled = await app.enqueue(held, delay=60)
    await app.cancel(cancelled.job_id)
    async with sweepq.Worker(app, concurrency=5) as worker:
        assert await worker.run_until_idle() == 30
    watched = await app.enqueue(held, {"n": 99})
    async with anyio.create_task_group() as tg:
        waiting = await start_waiting(tg, app, watched.job_id)
        async with sweepq.Worker(app, concurrency=5) as worker:
            await worker.run_until_idle()
        await waiting.result()
    await wait_until(lambda: _heard_something(heard))
    assert heard == [str(watched.job_id)]
    assert jobs  # 30 jobs and a cancel went by without a word


async def _heard_something(heard: list[str]) -> bool:
    return bool(heard)


async def test_a_long_list_of_waited_jobs_is_notified_in_payloads_under_8000_bytes(
    app: sweepq.App, heard: list[str]
) -> None:
    ids = list(range(10_000_000, 10_002_000))  # 2,000 ids of 8 digits: 18,000 bytes
    table = f"{ident(app.schema)}.job_waiters"
    await app.pool.execute(f"INSERT INTO {table} (job_id) SELECT unnest($1::bigint[])", ids)
    notified = await app.pool.fetchval(
        f"SELECT {ident(app.schema)}.job_waiters_notify($1::bigint[])", [*ids, 1, 2]
    )
    assert notified == len(ids)
    await wait_until(lambda: _heard_all(heard, len(ids)))
    assert len(heard) >= 3
    assert all(len(p.encode()) < 8000 for p in heard)
    assert sorted(int(i) for p in heard for i in p.split(",")) == ids


async def _heard_all(heard: list[str], n: int) -> bool:
    return sum(len(p.split(",")) for p in heard) >= n


async def test_the_finished_channel_of_a_long_schema_name_is_the_same_in_sql_and_python(
    dsn: str,
) -> None:
    schema = "w" + "x" * 62
    assert len(finished_channel(schema)) < 63
    async with migrated_app(dsn, schema) as app:
        listener = await asyncpg.connect(dsn)
        got: list[str] = []
        try:
            await listener.add_listener(
                finished_channel(schema), lambda *args: got.append(str(args[3]))
            )
            await app.pool.execute(f"INSERT INTO {ident(schema)}.job_waiters (job_id) VALUES (5)")
            await app.pool.fetchval(f"SELECT {ident(schema)}.job_waiters_notify(ARRAY[5::bigint])")
            await wait_until(lambda: _heard_something(got))
        finally:
            await listener.close()
    assert got == ["5"]


async def test_losing_the_connection_while_waiting_is_a_clear_error(app: sweepq.App) -> None:
    held, _ = register(app)
    r = await app.enqueue(held, delay=3600)
    async with anyio.create_task_group() as tg:
        waiting = await start_waiting(tg, app, r.job_id)
        await wait_until(lambda: _idle_after_reading(app))  # waiting, not in a statement
        # This test's waiter only (its last statement names this test's schema): other tests
        # wait at the same time.
        killed = await app.pool.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = 'sweepq wait_for' AND datname = current_database()"
            " AND strpos(query, $1) > 0",
            app.schema,
        )
        assert killed >= 1
        with pytest.raises(sweepq.DatabaseUnavailableError) as raised:
            await waiting.result()
    assert f"the connection closed while waiting for job {r.job_id}" in str(raised.value)
    assert "check that it is running and reachable" in str(raised.value)


async def _idle_after_reading(app: sweepq.App) -> bool:
    state = await app.pool.fetchval(
        "SELECT state FROM pg_stat_activity WHERE application_name = 'sweepq wait_for'"
        " AND datname = current_database() AND query LIKE '%job_settled%'"
        " AND strpos(query, $1) > 0",
        app.schema,
    )
    return bool(state == "idle")


async def test_waiting_on_an_unreachable_database_is_a_clear_error() -> None:
    app = sweepq.App("postgresql://nobody:secret@127.0.0.1:1/none")
    with pytest.raises(sweepq.DatabaseUnavailableError) as raised:
        await app.wait_for(1, timeout=1)
    assert "127.0.0.1:1" in str(raised.value)
    assert "secret" not in str(raised.value)


async def test_waiting_on_a_schema_that_lacks_the_migration_says_to_migrate(
    app: sweepq.App, dsn: str
) -> None:
    # As if the schema were one version behind: no waiters table.
    await app.pool.execute(f"DROP TABLE {ident(app.schema)}.job_waiters")
    await app.pool.execute(
        f"DELETE FROM {ident(app.schema)}.schema_migrations"
        " WHERE component = 'core' AND version = 9"
    )
    with pytest.raises(sweepq.SchemaNotMigratedError, match="core/0009_results"):
        await app.wait_for(1, timeout=1)


async def test_an_app_that_is_not_open_can_wait(app: sweepq.App, dsn: str) -> None:
    held, release = register(app)
    release.set()
    r = await app.enqueue(held, {"n": 3})
    async with sweepq.Worker(app) as worker:
        await worker.run_until_idle()
    closed = sweepq.App(dsn, schema=app.schema)
    assert (await closed.wait_for(r.job_id, timeout=5)).result == {"n": 3}


async def test_a_retry_does_not_end_a_wait_the_completion_does(app: sweepq.App) -> None:
    # A job handed back (available again) is not terminal: the wait goes on until it ends.
    attempts: list[int] = []

    @app.task(name="flaky")
    async def flaky(ctx: sweepq.Context) -> int:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        return ctx.attempt

    r = await app.enqueue(flaky)
    async with anyio.create_task_group() as tg:
        waiting = await start_waiting(tg, app, r.job_id)
        async with sweepq.Worker(app) as worker:
            await worker.run_until_idle()  # the retry is scheduled in about a second
        assert not waiting.done.is_set()
        await app.retry(r.job_id)  # due now
        async with sweepq.Worker(app) as worker:
            await worker.run_until_idle()
        job = await waiting.result()
    assert (job.state, job.result, attempts) == (sweepq.JobState.COMPLETED, 2, [1, 2])


async def test_a_failure_decided_by_the_worker_wakes_the_wait(app: sweepq.App) -> None:
    held, _ = register(app)
    r = await app.enqueue(held)
    (claimed,) = await claim(app, worker="w")
    async with anyio.create_task_group() as tg:
        waiting = await start_waiting(tg, app, r.job_id)
        out = FinishBatch()
        failed = Decision(state="failed", failure_reason="error", error_kind="error", error="no")
        out.add(claimed.token, failed)
        assert (await app.queries.job_finish_many(app.pool, "w", out)).tokens == {claimed.token}
        job = await waiting.result()
    assert (job.state, job.failure_reason, job.result) == (sweepq.JobState.FAILED, "error", None)


async def test_a_retry_decided_by_the_worker_does_not_wake_the_wait(
    app: sweepq.App, heard: list[str]
) -> None:
    held, _ = register(app)
    r = await app.enqueue(held)
    (claimed,) = await claim(app, worker="w")
    async with anyio.create_task_group() as tg:
        waiting = await start_waiting(tg, app, r.job_id)
        assert await finish(app, claimed, "available", delay=3600)
        await anyio.sleep(0.2)
        assert heard == []
        assert not waiting.done.is_set()
        await app.cancel(r.job_id)
        assert (await waiting.result()).state is sweepq.JobState.CANCELLED
    assert heard == [str(r.job_id)]


async def test_waiting_for_a_cancel_of_ones_own_open_transaction_times_out_clearly(
    app: sweepq.App, dsn: str
) -> None:
    held, _ = register(app)
    r = await app.enqueue(held, delay=3600)
    other = await asyncpg.connect(dsn)
    try:
        async with other.transaction():
            await app.cancel(r.job_id, conn=other)
            with pytest.raises(TimeoutError, match="a transaction that is ending it has not"):
                await app.wait_for(r.job_id, timeout=0.3)
    finally:
        await other.close()
    assert (await app.wait_for(r.job_id, timeout=0)).state is sweepq.JobState.CANCELLED
