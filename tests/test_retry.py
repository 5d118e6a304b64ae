"""Task policies: execution timeouts, backoff functions, and the exceptions a task retries or
discards; the outcome decision applies them all."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import anyio
import pytest

import sweepq
from sweepq.core.decision import decide
from sweepq.testing import drain
from waiting import wait_until


async def get(app: sweepq.App, job_id: int) -> sweepq.Job:
    job = await app.get_job(job_id)
    assert job is not None
    return job


def at(error: sweepq.JobError) -> datetime:
    return datetime.fromisoformat(error.at)


# timeouts ---------------------------------------------------------------------------------------


async def test_a_hanging_handler_times_out_is_retried_then_fails_timeout_while_others_run(
    app: sweepq.App,
) -> None:
    @app.task(name="hang", timeout=0.3, max_attempts=2)
    async def hang(ctx: sweepq.Context) -> None:
        await anyio.sleep(3600)

    @app.task(name="quick")
    async def quick(ctx: sweepq.Context, n: int) -> None:
        return None

    hung = await app.enqueue(hang)
    for n in range(20):
        await app.enqueue(quick, {"n": n}, priority=-1)  # claimed after the hanging job
    assert await drain(app, concurrency=2) == {"retry": 1, "failed": 1, "completed": 20}
    job = await get(app, hung.job_id)
    assert (job.state, job.failure_reason, job.attempt) == (sweepq.JobState.FAILED, "timeout", 2)
    assert [e.kind for e in job.errors] == ["timeout", "timeout"]
    assert "ran past its timeout of 0.3 s" in job.errors[0].error
    assert job.timeout == 0.3


async def test_a_jobs_timeout_overrides_its_tasks(app: sweepq.App) -> None:
    @app.task(name="slow", max_attempts=1)
    async def slow(ctx: sweepq.Context) -> None:
        await anyio.sleep(0.6)  # past the hasty job's 0.2 s timeout, within none for the other

    patient = await app.enqueue(slow)  # no timeout: it finishes
    hasty = await app.enqueue(slow, timeout=timedelta(milliseconds=200))
    assert await drain(app) == {"completed": 1, "failed": 1}
    assert (await get(app, patient.job_id)).state is sweepq.JobState.COMPLETED
    failed = await get(app, hasty.job_id)
    assert (failed.failure_reason, failed.timeout) == ("timeout", 0.2)


async def _true(value: bool) -> bool:
    return value


async def test_a_def_handler_past_its_timeout_ends_timeout_and_frees_its_slot(
    app: sweepq.App,
) -> None:
    release = threading.Event()
    told: list[bool] = []

    @app.task(name="blocking", timeout=0.2, max_attempts=3)
    def blocking(ctx: sweepq.Context) -> int:
        release.wait(10)  # a call that cannot be interrupted
        told.append(ctx.stopping)
        return 1

    job = await app.enqueue(blocking)
    worker = sweepq.Worker(app, concurrency=1, lease_seconds=1, heartbeat_seconds=0.2)
    async with worker, anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        # Past its timeout the slot is free while the thread still runs ...
        await wait_until(lambda: _true(worker.processed > 0), what="the execution ends")
        assert worker.running == 0
        worker.stop()
    # ... and the execution ended `timeout` at once, charged, as an async handler's does.
    retried = await get(app, job.job_id)
    assert (retried.state, retried.attempt) == (sweepq.JobState.AVAILABLE, 1)
    assert [e.kind for e in retried.errors] == ["timeout"]
    assert worker.outcomes == {"retry": 1}
    release.set()
    await wait_until(lambda: _true(bool(told)), timeout=10, what="the thread returns")
    assert told == [True]  # the thread was told to stop; what it returned was not recorded
    assert (await get(app, job.job_id)).result is None


def test_a_bad_timeout_is_refused_at_registration(dsn: str) -> None:
    app = sweepq.App(dsn)
    with pytest.raises(sweepq.ConfigurationError, match="task 'x': timeout"):
        app.task(name="x", timeout=0)(_noop)


async def _noop(ctx: sweepq.Context) -> None:
    return None


# retry policies ---------------------------------------------------------------------------------


async def test_a_backoff_function_decides_when_the_job_runs_again(app: sweepq.App) -> None:
    @app.task(name="flaky", retry=sweepq.RetryPolicy(backoff=lambda attempt, error: 120 * attempt))
    async def flaky(ctx: sweepq.Context) -> None:
        raise ConnectionError("upstream down")

    job = await app.enqueue(flaky)
    async with sweepq.Worker(app, concurrency=1) as worker:
        assert await worker.run_until_idle() == 1
    waiting = await get(app, job.job_id)
    (error,) = waiting.errors
    assert timedelta(seconds=119) <= waiting.run_at - at(error) <= timedelta(seconds=121)


async def test_discard_on_fails_at_once_and_retry_on_retries_only_those_types(
    app: sweepq.App,
) -> None:
    class InvalidAddress(ValueError):
        pass

    policy = sweepq.RetryPolicy(retry_on=(ConnectionError,), discard_on=(InvalidAddress,))

    @app.task(name="send", retry=policy, max_attempts=5)
    async def send(ctx: sweepq.Context, fail_with: str) -> None:
        errors = {"connection": ConnectionError, "address": InvalidAddress, "type": TypeError}
        if ctx.attempt == 1 or fail_with != "connection":
            raise errors[fail_with](f"{fail_with} failure")

    retried = await app.enqueue(send, {"fail_with": "connection"})
    discarded = await app.enqueue(send, {"fail_with": "address"})
    not_listed = await app.enqueue(send, {"fail_with": "type"})
    assert await drain(app) == {"retry": 1, "completed": 1, "failed": 2}
    assert (await get(app, retried.job_id)).attempt == 2
    for job_id, kind in ((discarded.job_id, "InvalidAddress"), (not_listed.job_id, "TypeError")):
        job = await get(app, job_id)
        assert (job.state, job.failure_reason, job.attempt) == (
            sweepq.JobState.FAILED,
            "error",
            1,
        )
        assert kind in job.errors[0].error


async def test_the_apps_policy_applies_to_tasks_without_their_own(dsn: str) -> None:
    app = sweepq.App(dsn, retry=sweepq.RetryPolicy(discard_on=(KeyError,)))

    @app.task(name="plain")
    async def plain(ctx: sweepq.Context) -> None:
        raise KeyError("missing")

    own = sweepq.RetryPolicy(backoff=sweepq.backoff.constant(5, jitter=0))

    @app.task(name="own", retry=own)
    async def own_task(ctx: sweepq.Context) -> None:
        raise KeyError("missing")

    assert app.retry_policy is not None
    assert app.tasks["plain"].retry is None
    assert app.tasks["own"].retry is own
    discarded = decide(KeyError("k"), attempt=1, max_attempts=5, deadline_in=None,
                       policy=app.tasks["own"].retry or app.retry_policy)  # fmt: skip
    assert (discarded.state, discarded.delay) == ("available", 5.0)
    failed = decide(KeyError("k"), attempt=1, max_attempts=5, deadline_in=None,
                    policy=app.retry_policy)  # fmt: skip
    assert (failed.state, failed.failure_reason) == ("failed", "error")


def test_the_ready_made_backoffs_grow_as_documented() -> None:
    error = RuntimeError("x")
    exponential = sweepq.backoff.exponential(base=2, factor=3, cap=100, jitter=0)
    assert [exponential(a, error) for a in range(1, 6)] == [2, 6, 18, 54, 100]
    linear = sweepq.backoff.linear(step=10, cap=25, jitter=0)
    assert [linear(a, error) for a in range(1, 4)] == [10, 20, 25]
    assert sweepq.backoff.constant(7, jitter=0)(9, error) == 7
    jittered = [sweepq.backoff.constant(10, jitter=0.5)(1, error) for _ in range(200)]
    assert 5 <= min(jittered) < max(jittered) <= 15
    huge = sweepq.backoff.exponential(cap=60, jitter=0)(10_000, error)
    assert huge == 60  # no overflow at any attempt


def test_a_policy_that_cannot_work_is_refused() -> None:
    with pytest.raises(sweepq.ConfigurationError, match="backoff must be a function"):
        sweepq.RetryPolicy(backoff=5)  # type: ignore[arg-type]  # the mistake
    with pytest.raises(sweepq.ConfigurationError, match="discard_on must be a tuple"):
        sweepq.RetryPolicy(discard_on=ValueError)  # type: ignore[arg-type]  # the mistake
    with pytest.raises(sweepq.ConfigurationError, match="jitter must be in"):
        sweepq.backoff.exponential(jitter=1.5)
    bad = sweepq.RetryPolicy(backoff=lambda attempt, error: -1)
    with pytest.raises(sweepq.ConfigurationError, match="finite number of seconds >= 0"):
        decide(RuntimeError("x"), attempt=1, max_attempts=3, deadline_in=None, policy=bad)


def test_a_backoff_past_the_deadline_still_fails_deadline_exceeded() -> None:
    policy = sweepq.RetryPolicy(backoff=lambda attempt, error: 600)
    late = decide(RuntimeError("x"), attempt=1, max_attempts=3, deadline_in=60, policy=policy)
    assert (late.state, late.failure_reason) == ("failed", "deadline_exceeded")
