"""Leases are fenced: a worker that lost its lease writes nothing, and lapsed leases are rescued."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import asyncpg
import pytest

import sweepq
from factories import connected_as, expire_deadline, expire_lease, key_running, lease_lapsed
from statements import claim, make_due
from statements import finish as record
from sweepq.core.queries import Conn
from sweepq.core.rows import Claimed
from waiting import wait_until

WORKER_PROC = Path(__file__).with_name("jobs_worker_proc.py")


async def get(app: sweepq.App, job_id: int, conn: Conn | None = None) -> sweepq.Job:
    job = await app.get_job(job_id, conn=conn)
    assert job is not None
    return job


async def claim_one(app: sweepq.App, conn: Conn, worker_id: str, *, lease: float = 30.0) -> Claimed:
    (claimed,) = await claim(app, worker=worker_id, lease=lease, on=conn)
    return claimed


async def finish(
    app: sweepq.App, conn: Conn, worker_id: str, job: Claimed, state: str = "completed"
) -> int:
    return int(await record(app, job, state, worker=worker_id, on=conn))


def register(app: sweepq.App, max_attempts: int = 5) -> sweepq.Task:
    @app.task(name="t", max_attempts=max_attempts)
    async def t(ctx: sweepq.Context) -> None:
        return None

    return t


@pytest.mark.parametrize("state", ["completed", "failed", "available"])
async def test_a_worker_whose_lease_lapsed_cannot_record_any_outcome(
    tx_app: sweepq.App, conn: Conn, state: str
) -> None:
    t = register(tx_app)
    r = await tx_app.enqueue(t, concurrency_key="k", conn=conn)
    claimed = await claim_one(tx_app, conn, "old-worker", lease=0.5)
    assert (claimed.id, claimed.attempt) == (r.job_id, 1)
    assert await key_running(tx_app, "k", on=conn) == 1
    await expire_lease(tx_app, r.job_id, on=conn)
    async with connected_as(tx_app, "old-worker"):  # stalled, not dead
        assert await tx_app.rescue_lapsed(conn=conn) == 1
    rescued = await get(tx_app, r.job_id, conn)
    assert rescued.state is sweepq.JobState.AVAILABLE
    assert rescued.attempt == 1  # the lapsed execution counts
    assert rescued.worker_id is None
    assert [(e.attempt, e.kind) for e in rescued.errors] == [(1, "lease_expired")]
    assert "old-worker" in rescued.errors[0].error
    assert await key_running(tx_app, "k", on=conn) == 0

    assert await finish(tx_app, conn, "old-worker", claimed, state) == 0
    assert await get(tx_app, r.job_id, conn) == rescued
    assert await key_running(tx_app, "k", on=conn) == 0
    held = await tx_app.queries.job_heartbeat(conn, "old-worker", 30.0, [claimed.token])
    assert held == set()
    assert await get(tx_app, r.job_id, conn) == rescued


async def test_the_old_attempt_cannot_finish_a_job_claimed_again_by_the_same_worker(
    tx_app: sweepq.App, conn: Conn
) -> None:
    t = register(tx_app)
    r = await tx_app.enqueue(t, conn=conn)
    first = await claim_one(tx_app, conn, "w")
    await expire_lease(tx_app, r.job_id, on=conn)
    assert await tx_app.rescue_lapsed(conn=conn) == 1
    second = await claim_one(tx_app, conn, "w")
    assert (second.id, second.attempt) == (r.job_id, 2)
    assert await finish(tx_app, conn, "w", first) == 0
    assert (await get(tx_app, r.job_id, conn)).state is sweepq.JobState.RUNNING
    assert await finish(tx_app, conn, "w", second) == 1
    job = await get(tx_app, r.job_id, conn)
    assert (job.state, job.attempt) == (sweepq.JobState.COMPLETED, 2)


async def test_another_worker_cannot_finish_a_job_it_does_not_hold(
    tx_app: sweepq.App, conn: Conn
) -> None:
    t = register(tx_app)
    r = await tx_app.enqueue(t, conn=conn)
    claimed = await claim_one(tx_app, conn, "holder")
    assert await finish(tx_app, conn, "intruder", claimed) == 0
    job = await get(tx_app, r.job_id, conn)
    assert (job.state, job.worker_id) == (sweepq.JobState.RUNNING, "holder")


async def test_a_rescued_job_on_its_last_attempt_fails_max_attempts_exceeded(
    tx_app: sweepq.App, conn: Conn
) -> None:
    t = register(tx_app, max_attempts=2)
    r = await tx_app.enqueue(t, concurrency_key="k", conn=conn)
    for n in (1, 2):
        claimed = await claim_one(tx_app, conn, f"w{n}")
        assert claimed.attempt == n
        await expire_lease(tx_app, r.job_id, on=conn)
        async with connected_as(tx_app, f"w{n}"):  # stalled, not dead
            assert await tx_app.rescue_lapsed(conn=conn) == 1
    job = await get(tx_app, r.job_id, conn)
    assert job.state is sweepq.JobState.FAILED
    assert job.failure_reason == "max_attempts_exceeded"
    assert (job.attempt, job.max_attempts) == (2, 2)
    assert [e.kind for e in job.errors] == ["lease_expired", "lease_expired"]
    assert job.finished_at is not None
    assert await key_running(tx_app, "k", on=conn) == 0


async def test_a_rescued_job_past_its_deadline_fails_deadline_exceeded(
    tx_app: sweepq.App, conn: Conn
) -> None:
    t = register(tx_app)
    r = await tx_app.enqueue(t, deadline=60, conn=conn)
    await claim_one(tx_app, conn, "w")
    await expire_lease(tx_app, r.job_id, on=conn)
    await expire_deadline(tx_app, r.job_id, on=conn)
    assert await tx_app.rescue_lapsed(conn=conn) == 1
    job = await get(tx_app, r.job_id, conn)
    assert job.state is sweepq.JobState.FAILED
    assert job.failure_reason == "deadline_exceeded"
    assert job.attempt == 1


async def test_rescue_leaves_jobs_with_a_live_lease_alone(tx_app: sweepq.App, conn: Conn) -> None:
    t = register(tx_app)
    r = await tx_app.enqueue(t, conn=conn)
    await claim_one(tx_app, conn, "w", lease=30.0)
    before = await get(tx_app, r.job_id, conn)
    assert await tx_app.rescue_lapsed(conn=conn) == 0
    assert await get(tx_app, r.job_id, conn) == before


async def test_a_cancelled_running_job_cannot_be_completed_by_its_worker(
    tx_app: sweepq.App, conn: Conn
) -> None:
    t = register(tx_app)
    r = await tx_app.enqueue(t, concurrency_key="k", conn=conn)
    claimed = await claim_one(tx_app, conn, "w")
    assert await key_running(tx_app, "k", on=conn) == 1
    cancelled = await tx_app.cancel(r.job_id, reason="operator", conn=conn)
    assert cancelled is not None
    assert cancelled.state is sweepq.JobState.CANCELLED
    assert cancelled.worker_id is None
    assert await key_running(tx_app, "k", on=conn) == 0
    for state in ("completed", "failed", "available"):
        assert await finish(tx_app, conn, "w", claimed, state) == 0
    assert await get(tx_app, r.job_id, conn) == cancelled
    assert await key_running(tx_app, "k", on=conn) == 0
    assert await tx_app.rescue_lapsed(conn=conn) == 0


async def test_a_job_cancelled_while_its_handler_runs_stays_cancelled(app: sweepq.App) -> None:
    release = anyio.Event()

    @app.task(name="slow")
    async def slow(ctx: sweepq.Context) -> None:
        with anyio.fail_after(10):
            await release.wait()

    r = await app.enqueue(slow, concurrency_key="k")

    async def running() -> bool:
        return (await get(app, r.job_id)).state is sweepq.JobState.RUNNING

    with anyio.fail_after(20):
        async with (
            sweepq.Worker(app, concurrency=1, lease_seconds=3, heartbeat_seconds=0.1) as worker,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(worker.run_until_idle)
            await wait_until(running)
            await app.cancel(r.job_id, reason="operator")
            release.set()
    job = await get(app, r.job_id)
    assert job.state is sweepq.JobState.CANCELLED
    assert job.failure_reason is None
    assert [(e.kind, e.error) for e in job.errors] == [("cancelled", "operator")]
    assert await key_running(app, "k") == 0


async def test_a_live_worker_keeps_its_lease_beyond_the_lease_length(app: sweepq.App) -> None:
    rescued_meanwhile: list[int] = []

    @app.task(name="long")
    async def long(ctx: sweepq.Context) -> None:
        first = (await get(app, ctx.job_id)).lease_expires_at
        assert first is not None

        async def first_lease_over() -> bool:
            return await app.queries.runtime.clock_now(app.pool) > first

        await wait_until(first_lease_over)
        rescued_meanwhile.append(await app.rescue_lapsed())

    r = await app.enqueue(long)
    async with sweepq.Worker(app, concurrency=1, lease_seconds=0.6, heartbeat_seconds=0.1) as w:
        assert await w.run_until_idle() == 1
    assert rescued_meanwhile == [0]
    job = await get(app, r.job_id)
    assert (job.state, job.attempt, job.errors) == (sweepq.JobState.COMPLETED, 1, [])


async def test_a_job_of_a_killed_worker_is_rescued_and_completed_by_another(
    app: sweepq.App,
) -> None:
    calls: list[int] = []

    @app.task(name="block")
    async def block(ctx: sweepq.Context) -> None:
        calls.append(ctx.attempt)

    r = await app.enqueue(block)
    process = await anyio.open_process(
        [sys.executable, str(WORKER_PROC), app.dsn, app.schema],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        async def running() -> bool:
            if process.returncode is not None:
                assert process.stderr is not None
                errors = (await process.stderr.receive()).decode(errors="replace")
                pytest.fail(f"the worker process exited early: {errors}")
            return (await get(app, r.job_id)).state is sweepq.JobState.RUNNING

        await wait_until(running, timeout=30)
        held = await get(app, r.job_id)
        assert held.worker_id is not None
        assert f":{process.pid}:" in held.worker_id
        os.kill(process.pid, signal.SIGKILL)
        with anyio.fail_after(10):
            assert await process.wait() == -signal.SIGKILL
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.aclose()

    await wait_until(lambda: lease_lapsed(app, r.job_id))
    async with sweepq.Worker(app, concurrency=1) as worker:
        assert await worker.run_until_idle() == 1
    job = await get(app, r.job_id)
    assert job.state is sweepq.JobState.COMPLETED
    assert job.attempt == 2
    assert calls == [2]
    assert [(e.attempt, e.kind) for e in job.errors] == [(1, "worker_died")]
    assert held.worker_id in job.errors[0].error
    assert job.crashes == 0  # it ran to its end since


async def test_an_execution_cancelled_then_retried_cannot_record_its_outcome_on_the_next(
    tx_app: sweepq.App, conn: Conn
) -> None:
    t = register(tx_app)
    r = await tx_app.enqueue(t, concurrency_key="k", conn=conn)
    first = await claim_one(tx_app, conn, "w")
    await tx_app.cancel(r.job_id, conn=conn)
    await tx_app.retry(r.job_id, conn=conn)
    # The same worker claims it again: retry() reset attempt, so worker + attempt match.
    second = await claim_one(tx_app, conn, "w")
    assert (second.id, second.attempt) == (first.id, first.attempt) == (r.job_id, 1)
    assert (first.claims, second.claims) == (1, 2)
    for state in ("completed", "failed", "available"):
        assert await finish(tx_app, conn, "w", first, state) == 0
    assert (await get(tx_app, r.job_id, conn)).state is sweepq.JobState.RUNNING
    held = await tx_app.queries.job_heartbeat(conn, "w", 30.0, [first.token, second.token])
    assert held == {second.token}
    assert await finish(tx_app, conn, "w", second) == 1
    job = await get(tx_app, r.job_id, conn)
    assert (job.state, job.attempt) == (sweepq.JobState.COMPLETED, 1)
    assert await key_running(tx_app, "k", on=conn) == 0


# The worker's statement that records outcomes, replaced for a while by one that loses its
# connection as an outage would (it takes the same ten parameters).
LOSE_CONNECTION = (
    "SELECT pg_terminate_backend(pg_backend_pid()), $1::text, $2::bigint[], $3::int[],"
    " $4::text[], $5::float8[], $6::boolean[], $7::boolean[], $8::text[], $9::text[], $10::text[]"
)


async def test_a_finished_job_keeps_its_lease_while_its_outcome_cannot_be_recorded(
    app: sweepq.App,
) -> None:
    finished = anyio.Event()

    @app.task(name="quick")
    async def quick(ctx: sweepq.Context) -> None:
        finished.set()

    r = await app.enqueue(quick)
    lease = 1.0
    real = app.queries.sql
    app.queries.sql = {**real, "job_finish_many": LOSE_CONNECTION}
    worker = sweepq.Worker(app, concurrency=1, lease_seconds=lease, heartbeat_seconds=0.2)
    with anyio.fail_after(20):
        async with worker, anyio.create_task_group() as tg:
            tg.start_soon(worker.run_until_idle)
            await finished.wait()
            for _ in range(3):
                await anyio.sleep(lease)
                # The outcome is still unrecorded, and the lease is live: nothing to rescue.
                assert await app.rescue_lapsed(grace_seconds=0) == 0
                assert (await get(app, r.job_id)).state is sweepq.JobState.RUNNING
            app.queries.sql = real
    job = await get(app, r.job_id)
    assert (job.state, job.attempt, job.errors) == (sweepq.JobState.COMPLETED, 1, [])


async def test_rescue_waits_for_live_workers_after_the_server_started(
    tx_app: sweepq.App, conn: Conn
) -> None:
    t = register(tx_app)
    r = await tx_app.enqueue(t, conn=conn)
    await claim_one(tx_app, conn, "w")
    await expire_lease(tx_app, r.job_id, on=conn)
    uptime = await conn.fetchval(
        "SELECT extract(epoch FROM now() - pg_postmaster_start_time())::float8"
    )
    # Within the grace after the server's start, a lapsed lease is left to its worker.
    assert await tx_app.rescue_lapsed(grace_seconds=uptime + 3600, conn=conn) == 0
    assert (await get(tx_app, r.job_id, conn)).state is sweepq.JobState.RUNNING
    assert await tx_app.rescue_lapsed(grace_seconds=0, conn=conn) == 1


@pytest.mark.parametrize(
    "error",
    [
        asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
        asyncpg.exceptions.AdminShutdownError("terminating connection"),
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed"),
        sweepq.DatabaseUnavailableError("127.0.0.1:1", ConnectionRefusedError("refused")),
    ],
    ids=["starting-up", "shutdown", "connection-lost", "unavailable"],
)
async def test_an_execution_that_lost_the_database_is_handed_back_without_an_attempt(
    app: sweepq.App, error: Exception
) -> None:
    calls: list[int] = []

    @app.task(name="flaky", max_attempts=1)
    async def flaky(ctx: sweepq.Context) -> None:
        calls.append(ctx.attempt)
        if len(calls) == 1:
            raise error

    r = await app.enqueue(flaky)
    async with sweepq.Worker(app, concurrency=1) as worker:
        assert await worker.run_until_idle() == 1
        job = await get(app, r.job_id)
        assert (job.state, job.attempt, job.snoozes) == (sweepq.JobState.AVAILABLE, 0, 0)
        assert [e.kind for e in job.errors] == ["database_unavailable"]
        await make_due(app, r.job_id)
        assert await worker.run_until_idle() == 1
    job = await get(app, r.job_id)
    # One attempt allowed, and it was the second execution's: the first was not charged.
    assert (job.state, job.attempt) == (sweepq.JobState.COMPLETED, 1)
    assert calls == [1, 1]


async def test_the_app_reports_an_unreachable_database_as_database_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = sweepq.App(f"postgresql://u:secret@127.0.0.1:{port}/db")
    with pytest.raises(sweepq.DatabaseUnavailableError) as raised:
        await app.open()
    assert isinstance(raised.value, ConnectionError)
    assert f"127.0.0.1:{port}" in str(raised.value)
    assert "secret" not in str(raised.value)


async def test_a_connection_error_counts_as_the_databases_only_when_the_driver_raised_it(
    app: sweepq.App,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]

    @app.task(name="driver", max_attempts=3)
    async def driver(ctx: sweepq.Context) -> None:
        await asyncpg.connect(f"postgresql://u@127.0.0.1:{closed}/db")

    @app.task(name="own", max_attempts=3)
    async def own(ctx: sweepq.Context) -> None:
        # An HTTP API refusing connections, say: the handler's failure, charged as usual.
        await anyio.connect_tcp("127.0.0.1", closed)

    lost = await app.enqueue(driver)
    failed = await app.enqueue(own)
    async with sweepq.Worker(app, concurrency=2) as worker:
        assert await worker.run_until_idle() == 2
    lost_job, failed_job = await get(app, lost.job_id), await get(app, failed.job_id)
    assert (lost_job.attempt, [e.kind for e in lost_job.errors]) == (0, ["database_unavailable"])
    assert (failed_job.attempt, [e.kind for e in failed_job.errors]) == (1, ["exception"])
