"""The worker runtime: wake-ups, shutdown, reconnects, leader election, cron, rate limits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import pytest

import sweepq
from factories import count_jobs, count_rows
from statements import job_counts, leader
from sweepq.core.errors import ConfigurationError
from waiting import wait_until

PROC = Path(__file__).with_name("runtime_proc.py")


@asynccontextmanager
async def running(worker: sweepq.Worker) -> AsyncIterator[sweepq.Worker]:
    """Run `worker.run()` in the background for the block, then stop it."""
    async with worker, anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        try:
            yield worker
        finally:
            worker.stop()


async def state_of(app: sweepq.App, job_id: int) -> str | None:
    job = await app.get_job(job_id)
    return None if job is None else job.state.value


@contextmanager
def worker_proc(app: sweepq.App, grace: float = 0.5) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A worker subprocess (tests/runtime_proc.py); yields it and its worker id."""
    with subprocess.Popen(
        [sys.executable, str(PROC), app.dsn, app.schema, str(grace)],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().split()
            assert line[:1] == ["ready"], line
            yield proc, line[1]
        finally:
            proc.kill()


async def test_an_idle_worker_is_woken_by_notify_long_before_its_poll(app: sweepq.App) -> None:
    started = anyio.Event()

    @app.task(name="ping")
    async def ping(ctx: sweepq.Context) -> None:
        started.set()

    worker = sweepq.Worker(app, poll_seconds=60)
    async with running(worker):
        await wait_until(lambda: _true(worker.listening))
        await wait_until(lambda: _has_claimed(app, worker), what="the first (empty) claim")
        await app.enqueue(ping)
        with anyio.fail_after(10):  # far below the 60 s poll: only NOTIFY can explain it
            await started.wait()


async def _true(value: bool) -> bool:
    return value


async def _has_claimed(app: sweepq.App, worker: sweepq.Worker) -> bool:
    """Whether a connection of `worker` ran a claim and is idle since (the claim's text stays
    in pg_stat_activity until its next statement)."""
    return bool(
        await app.pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"
            " AND state = 'idle' AND left(query, 200) IN (left($2, 200), left($3, 200))",
            worker.application_name,
            app.queries.sql["job_claim"],
            app.queries.sql["job_claim_light"],
        )
    )


async def test_without_notifications_a_worker_still_finds_jobs_by_polling(
    app: sweepq.App,
) -> None:
    started = anyio.Event()

    @app.task(name="ping")
    async def ping(ctx: sweepq.Context) -> None:
        started.set()

    worker = sweepq.Worker(app, poll_seconds=0.2, listen=False)
    async with running(worker):
        # After the first claim: only a later poll can find the job.
        await wait_until(lambda: _has_claimed(app, worker), what="the first (empty) claim")
        await app.enqueue(ping)
        with anyio.fail_after(10):
            await started.wait()
        assert not worker.listening


async def test_stop_hands_a_long_job_back_and_the_next_worker_completes_it(
    app: sweepq.App,
) -> None:
    release = anyio.Event()
    seen: list[int] = []

    @app.task(name="long")
    async def long(ctx: sweepq.Context) -> None:
        seen.append(ctx.attempt)
        if len(seen) == 1:
            await anyio.sleep(60)
        release.set()

    job = await app.enqueue(long)
    worker = sweepq.Worker(app, poll_seconds=0.1, grace_seconds=0.2)
    async with running(worker):
        await wait_until(lambda: _eq(state_of(app, job.job_id), "running"))
    after_stop = await app.get_job(job.job_id)
    assert after_stop is not None
    assert after_stop.state is sweepq.JobState.AVAILABLE
    assert after_stop.attempt == 0  # the interrupted execution is not charged
    assert after_stop.failure_reason is None
    assert after_stop.errors[-1].kind == "interrupted"
    async with sweepq.Worker(app) as second:
        await second.run_until_idle()
    done = await app.get_job(job.job_id)
    assert done is not None
    assert done.state is sweepq.JobState.COMPLETED
    assert done.attempt == 1


async def _eq(value: Awaitable[object], expected: object) -> bool:
    return await value == expected


async def test_sigterm_during_a_long_job_hands_it_back_not_failed(app: sweepq.App) -> None:

    @app.task(name="slow")
    async def slow(ctx: sweepq.Context) -> None:
        return None  # the next worker (this process) completes it quickly

    job = await app.enqueue(slow)
    with worker_proc(app, grace=0.3) as (proc, _):
        await wait_until(lambda: _eq(state_of(app, job.job_id), "running"))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    handed_back = await app.get_job(job.job_id)
    assert handed_back is not None
    assert handed_back.state is sweepq.JobState.AVAILABLE
    assert handed_back.attempt == 0
    async with sweepq.Worker(app) as worker:
        assert await worker.run_until_idle() == 1
    done = await app.get_job(job.job_id)
    assert done is not None
    assert done.state is sweepq.JobState.COMPLETED


async def test_terminated_connections_are_replaced_and_no_job_is_lost(app: sweepq.App) -> None:
    done: set[int] = set()

    @app.task(name="work")
    async def work(ctx: sweepq.Context, n: int) -> None:
        await anyio.sleep(0.005)
        done.add(n)

    total = 400
    await app.enqueue_many([sweepq.JobSpec(work, {"n": i}) for i in range(total)])
    worker = sweepq.Worker(app, concurrency=8, poll_seconds=0.1, lease_seconds=3)
    kills = 0
    async with running(worker):
        for _ in range(3):
            await anyio.sleep(0.15)
            async with app.connection() as conn:
                kills += await conn.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = $1",
                    worker.application_name,
                )

        async def finished() -> bool:
            counts = await job_counts(app)
            return counts.get("completed", 0) == total

        await wait_until(finished, timeout=60)
    assert kills > 0
    assert done == set(range(total))


async def test_two_workers_enqueue_each_cron_tick_exactly_once(app: sweepq.App) -> None:
    @app.task(name="tick")
    async def tick(ctx: sweepq.Context) -> None:
        return None

    app.cron("every-second", "* * * * * *", tick)  # six fields: seconds first
    first = sweepq.Worker(app, maintenance_seconds=0.1, leader_ttl_seconds=1, poll_seconds=0.1)
    second = sweepq.Worker(app, maintenance_seconds=0.1, leader_ttl_seconds=1, poll_seconds=0.1)

    async def jobs() -> list[str]:
        rows = await app.pool.fetch(
            f'SELECT idempotency_key FROM "{app.schema}".jobs WHERE task = $1', "tick"
        )
        return [r[0] for r in rows]

    async with running(first), running(second):
        await wait_until(lambda: _at_least(jobs(), 3), timeout=20)
    keys = await jobs()
    assert len(keys) == len(set(keys)) >= 3  # one job per tick, whatever the number of workers
    assert all(k.startswith("every-second@") for k in keys)


async def _at_least(value: Awaitable[list[str]], n: int) -> bool:
    return len(await value) >= n


async def test_cron_skip_overlap_skips_ticks_while_the_previous_job_runs(
    app: sweepq.App,
) -> None:
    running_now = 0
    most = 0

    @app.task(name="slow_tick")
    async def slow_tick(ctx: sweepq.Context) -> None:
        nonlocal running_now, most
        running_now += 1
        most = max(most, running_now)
        await anyio.sleep(2.2)
        running_now -= 1

    app.cron("slow", "* * * * * *", slow_tick, overlap="skip")
    worker = sweepq.Worker(app, concurrency=5, maintenance_seconds=0.1, poll_seconds=0.1)

    async def outcomes() -> list[str]:
        return [s.last_outcome or "" for s in await app.cron_schedules()]

    async with running(worker):
        await wait_until(lambda: _contains(outcomes(), "skipped"), timeout=20)
        await wait_until(lambda: _at_least_jobs(app, "slow_tick", 2), timeout=20)
    assert most == 1  # never stacked
    schedules = await app.cron_schedules()
    assert schedules[0].next_run_at is not None  # still scheduled after skipping


async def _contains(value: Awaitable[list[str]], item: str) -> bool:
    return item in await value


async def _at_least_jobs(app: sweepq.App, task: str, n: int) -> bool:
    return await count_jobs(app, task=task) >= n


async def test_cron_buffer_one_keeps_at_most_one_tick_waiting(app: sweepq.App) -> None:
    running_now = 0
    most = 0

    @app.task(name="buffered")
    async def buffered(ctx: sweepq.Context) -> None:
        nonlocal running_now, most
        running_now += 1
        most = max(most, running_now)
        await anyio.sleep(1.5)
        running_now -= 1

    app.cron("buffered", "* * * * * *", buffered, overlap="buffer_one")
    worker = sweepq.Worker(app, concurrency=5, maintenance_seconds=0.1, poll_seconds=0.1)
    waiting_samples: list[int] = []
    async with running(worker):
        with anyio.move_on_after(4):
            while True:
                waiting_samples.append(await count_jobs(app, "available", task="buffered"))
                await anyio.sleep(0.05)
    assert most == 1
    assert max(waiting_samples) == 1


def test_invalid_cron_expressions_are_refused_at_registration() -> None:
    app = sweepq.App("postgresql://unused", schema="unused")

    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    with pytest.raises(sweepq.InvalidJobOptionError, match="not a valid cron expression"):
        app.cron("bad", "61 * * * *", t)
    with pytest.raises(sweepq.InvalidJobOptionError, match="overlap"):
        app.cron("bad", "* * * * *", t, overlap="stack")
    assert app.crons == {}


async def test_a_new_leader_takes_over_when_the_leader_is_killed(app: sweepq.App) -> None:
    with worker_proc(app) as (proc, proc_worker):
        await wait_until(lambda: _eq(leader(app),
                                   proc_worker))  # fmt: skip
        worker = sweepq.Worker(app, maintenance_seconds=0.1, leader_ttl_seconds=1)
        async with running(worker):
            await anyio.sleep(0.3)
            assert await leader(app) == proc_worker
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            await wait_until(lambda: _eq(leader(app), worker.id))


async def test_the_rate_limiter_holds_its_rate_across_two_workers(app: sweepq.App) -> None:
    grants: list[float] = []

    @app.task(name="call_api")
    async def call_api(ctx: sweepq.Context) -> None:
        await ctx.rate_limit("api", per_second=20)
        grants.append(time.monotonic())

    n = 16
    await app.enqueue_many([sweepq.JobSpec(call_api) for _ in range(n)])
    async with (
        sweepq.Worker(app, concurrency=8) as a,
        sweepq.Worker(app, concurrency=8) as b,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(a.run_until_idle)
        tg.start_soon(b.run_until_idle)
    assert len(grants) == n
    # 16 grants at 20/s (burst 1) cannot span less than 15 intervals of 50 ms.
    assert max(grants) - min(grants) >= (n - 1) / 20 * 0.9
    # One row per key, updated per grant: nothing per wait.
    assert await count_rows(app, "rate_limits") == 1


def test_settings_that_cannot_work_are_refused() -> None:
    app = sweepq.App("postgresql://unused", schema="unused")
    with pytest.raises(ConfigurationError, match="two heartbeats"):
        sweepq.Worker(app, lease_seconds=1, heartbeat_seconds=0.9)
    with pytest.raises(ConfigurationError, match="concurrency"):
        sweepq.Worker(app, concurrency=0)
    with pytest.raises(ConfigurationError, match="leader_ttl"):
        sweepq.Worker(app, maintenance_seconds=5, leader_ttl_seconds=6)
    with pytest.raises(ConfigurationError, match="list of queue names"):
        sweepq.Worker(app, queues="default")


async def test_a_stop_requested_before_run_starts_is_honoured(app: sweepq.App) -> None:
    async with sweepq.Worker(app, poll_seconds=30) as worker:
        worker.stop()
        with anyio.fail_after(10):
            await worker.run()  # returns at once instead of waiting for work
        # and the next run starts afresh
        await app.enqueue_many([])
        assert await worker.run_until_idle() == 0
