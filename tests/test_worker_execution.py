"""Plain `def` handlers: they run in the worker's threads, under their own limit, with a Context
that works from the thread; cancelling them sets `ctx.stopping`, and a lease lost meanwhile
means their outcome is not recorded."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

import sweepq
from factories import count_jobs
from waiting import wait_until


async def _true(value: bool) -> bool:
    return value


async def get(app: sweepq.App, job_id: int) -> sweepq.Job:
    job = await app.get_job(job_id)
    assert job is not None
    return job


async def test_a_def_handler_runs_in_a_thread_and_enqueues_through_its_context(
    app: sweepq.App,
) -> None:
    loop_thread = threading.get_ident()
    seen: list[tuple[int, int, str]] = []

    @app.task(name="follow_up")
    async def follow_up(ctx: sweepq.Context, n: int) -> None:
        return None

    @app.task(name="blocking")
    def blocking(ctx: sweepq.Context, n: int) -> None:
        time.sleep(0.01)  # a blocking call: fine here, the event loop is elsewhere
        seen.append((threading.get_ident(), ctx.attempt, ctx.task))
        ctx.run_async(ctx.app.enqueue, "follow_up", {"n": n + 1})

    r = await app.enqueue(blocking, {"n": 1})
    async with sweepq.Worker(app, concurrency=2) as worker:
        assert await worker.run_until_idle() == 2
    ((thread, attempt, task),) = seen
    assert thread != loop_thread
    assert (attempt, task) == (1, "blocking")
    assert (await get(app, r.job_id)).state is sweepq.JobState.COMPLETED
    assert await count_jobs(app, "completed", task="follow_up") == 1


@pytest.mark.parametrize(
    ("raised", "state", "attempt", "kind"),
    [
        (RuntimeError("boom"), sweepq.JobState.AVAILABLE, 1, "exception"),
        (sweepq.Snooze(60), sweepq.JobState.AVAILABLE, 0, None),
        (sweepq.Cancel("gone"), sweepq.JobState.CANCELLED, 1, "cancelled"),
    ],
)
async def test_what_a_def_handler_raises_is_decided_as_for_an_async_one(
    app: sweepq.App,
    raised: Exception,
    state: sweepq.JobState,
    attempt: int,
    kind: str | None,
) -> None:
    @app.task(name="raising")
    def raising(ctx: sweepq.Context) -> None:
        raise raised

    r = await app.enqueue(raising)
    async with sweepq.Worker(app, concurrency=1) as worker:
        assert await worker.run_until_idle() == 1
    job = await get(app, r.job_id)
    assert (job.state, job.attempt) == (state, attempt)
    assert [e.kind for e in job.errors] == ([kind] if kind else [])


async def test_def_handlers_run_at_most_threads_at_once_and_async_ones_are_not_held_up(
    app: sweepq.App,
) -> None:
    lock = threading.Lock()
    release = threading.Event()
    active = [0]
    peak = [0]
    quick_done: list[int] = []

    @app.task(name="cpu")
    def cpu(ctx: sweepq.Context) -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        release.wait(30)  # held until the test has seen what runs beside it
        with lock:
            active[0] -= 1

    @app.task(name="quick")
    async def quick(ctx: sweepq.Context) -> None:
        quick_done.append(ctx.job_id)

    # Three def jobs for two threads: the third waits for a thread in its slot, and the two
    # slots left run the async jobs.
    for _ in range(3):
        await app.enqueue(cpu)
    for _ in range(3):
        await app.enqueue(quick, priority=-1)  # claimed after the cpu jobs

    def busy() -> bool:
        with lock:
            return active[0] == 2 and len(quick_done) == 3

    async with (
        sweepq.Worker(app, concurrency=5, threads=2, poll_seconds=0.05) as worker,
        anyio.create_task_group() as tg,
    ):
        assert worker.threads == 2
        tg.start_soon(worker.run_until_idle)
        try:
            # Two def jobs hold the two threads, and the async jobs ran meanwhile.
            await wait_until(lambda: _true(busy()), what="both threads busy", every=0.01)
            assert peak[0] == 2
        finally:
            release.set()
    assert peak[0] == 2
    assert await count_jobs(app, "completed") == 6


async def test_a_def_handler_whose_job_is_cancelled_is_told_to_stop_and_nothing_is_recorded(
    app: sweepq.App,
) -> None:
    told = threading.Event()
    started = threading.Event()

    @app.task(name="long")
    def long(ctx: sweepq.Context) -> None:
        started.set()
        deadline = time.monotonic() + 10
        while not ctx.stopping and time.monotonic() < deadline:
            time.sleep(0.01)
        told.set()  # and return: the work counts as done, but the job is no longer ours

    r = await app.enqueue(long, concurrency_key="k")
    async with (
        sweepq.Worker(app, concurrency=1, lease_seconds=3, heartbeat_seconds=0.1) as worker,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run_until_idle)
        await wait_until(lambda: anyio.to_thread.run_sync(started.is_set))
        await app.cancel(r.job_id, reason="operator")
        # The heartbeat finds the lease gone and sets ctx.stopping; the thread returns.
        await wait_until(lambda: anyio.to_thread.run_sync(told.is_set), timeout=5)
    job = await get(app, r.job_id)
    assert job.state is sweepq.JobState.CANCELLED
    assert [(e.kind, e.error) for e in job.errors] == [("cancelled", "operator")]
    key = await app.concurrency_keys()
    assert [(k.key, k.running) for k in key] == [("k", 0)]


async def test_a_def_handler_that_gives_up_when_the_worker_stops_is_handed_back_uncharged(
    app: sweepq.App,
) -> None:
    started = threading.Event()
    calls: list[int] = []

    @app.task(name="long")
    def long(ctx: sweepq.Context) -> None:
        calls.append(ctx.attempt)
        if len(calls) > 1:
            return
        started.set()
        while not ctx.stopping:
            time.sleep(0.01)
        raise InterruptedError("asked to stop")

    r = await app.enqueue(long)
    worker = sweepq.Worker(app, concurrency=1, grace_seconds=0.2, poll_seconds=0.1)
    async with worker, anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await wait_until(lambda: anyio.to_thread.run_sync(started.is_set))
        worker.stop()  # the grace period passes; then the thread is told to stop
    job = await get(app, r.job_id)
    assert (job.state, job.attempt) == (sweepq.JobState.AVAILABLE, 0)
    assert [e.kind for e in job.errors] == ["interrupted"]

    async with sweepq.Worker(app, concurrency=1) as second:
        assert await second.run_until_idle() == 1
    done = await get(app, r.job_id)
    assert (done.state, done.attempt, calls) == (sweepq.JobState.COMPLETED, 1, [1, 1])


def test_a_generator_is_not_a_handler_and_threads_must_be_positive(dsn: str) -> None:
    app = sweepq.App(dsn)

    def gen(ctx: sweepq.Context):  # type: ignore[no-untyped-def]  # the mistake
        yield 1

    with pytest.raises(sweepq.ConfigurationError, match="not a generator"):
        app.task(gen)
    with pytest.raises(sweepq.ConfigurationError, match="threads must be an int >= 1"):
        sweepq.Worker(app, threads=0)
