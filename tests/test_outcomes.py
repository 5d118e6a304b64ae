"""What each way of ending an execution does to the job: the one deferral contract."""

from __future__ import annotations

from datetime import datetime, timedelta

import anyio
import pytest

import sweepq
from factories import backdate_jobs, expire_deadline
from statements import claim
from statements import make_due as make_job_due
from sweepq.core.ident import ident
from sweepq.core.queries import Conn
from sweepq.testing import drain
from waiting import wait_until


async def run_until_terminal(app: sweepq.App, job_id: int, timeout: float = 20.0) -> sweepq.Job:
    """Run a worker until the job is terminal, letting each backoff or snooze pass."""
    last: list[sweepq.Job] = []
    async with sweepq.Worker(app, concurrency=4) as worker:

        async def terminal() -> bool:
            await worker.run_until_idle()
            job = await app.get_job(job_id)
            assert job is not None
            last[:] = [job]
            return job.state.terminal

        await wait_until(terminal, timeout=timeout, what=f"job {job_id} ends")
    return last[0]


async def get(app: sweepq.App, job_id: int, conn: Conn | None = None) -> sweepq.Job:
    job = await app.get_job(job_id, conn=conn)
    assert job is not None
    return job


def at(error: sweepq.JobError) -> datetime:
    return datetime.fromisoformat(error.at)


async def test_a_job_that_returns_completes_on_its_first_attempt(app: sweepq.App) -> None:
    @app.task(name="ok")
    async def ok(ctx: sweepq.Context) -> None:
        return None

    r = await app.enqueue(ok)
    job = await run_until_terminal(app, r.job_id)
    assert job.state is sweepq.JobState.COMPLETED
    assert (job.attempt, job.max_attempts, job.snoozes) == (1, 5, 0)
    assert job.errors == []
    assert job.failure_reason is None
    assert job.finished_at is not None
    assert job.attempted_at is not None
    assert job.worker_id is None
    assert job.lease_expires_at is None


@pytest.mark.parametrize(
    "defer",
    [
        pytest.param(lambda: sweepq.Snooze(0), id="snooze"),
        pytest.param(
            lambda: sweepq.RetryAfter(timedelta(0), consume_budget=False),
            id="retry_after_without_budget",
        ),
    ],
)
async def test_a_job_deferred_three_times_then_succeeding_is_charged_one_attempt(
    app: sweepq.App, defer: type[Exception]
) -> None:
    seen: list[tuple[int, int]] = []

    @app.task(name="flaky", max_attempts=3)
    async def flaky(ctx: sweepq.Context) -> None:
        seen.append((ctx.attempt, ctx.snoozes))
        if len(seen) <= 3:
            raise defer()

    r = await app.enqueue(flaky)
    job = await run_until_terminal(app, r.job_id)
    assert job.state is sweepq.JobState.COMPLETED
    assert (job.attempt, job.snoozes, job.max_attempts) == (1, 3, 3)
    # Every execution ran as attempt 1: deferring charged nothing.
    assert seen == [(1, 0), (1, 1), (1, 2), (1, 3)]
    assert job.errors == []


async def test_retry_after_with_budget_charges_attempts_and_fails_at_the_budget(
    app: sweepq.App,
) -> None:
    seen: list[int] = []

    @app.task(name="throttled", max_attempts=3)
    async def throttled(ctx: sweepq.Context) -> None:
        seen.append(ctx.attempt)
        raise sweepq.RetryAfter(timedelta(0))

    r = await app.enqueue(throttled)
    job = await run_until_terminal(app, r.job_id)
    assert job.state is sweepq.JobState.FAILED
    assert job.failure_reason == "max_attempts_exceeded"
    assert (job.attempt, job.max_attempts, job.snoozes) == (3, 3, 0)
    assert seen == [1, 2, 3]
    assert [(e.attempt, e.kind) for e in job.errors] == [(n, "retry_after") for n in (1, 2, 3)]


async def test_retry_after_waits_the_given_delay(app: sweepq.App) -> None:
    @app.task(name="throttled")
    async def throttled(ctx: sweepq.Context) -> None:
        raise sweepq.RetryAfter(timedelta(seconds=90))

    r = await app.enqueue(throttled)
    async with sweepq.Worker(app, concurrency=1) as worker:
        assert await worker.run_until_idle() == 1
    job = await get(app, r.job_id)
    assert job.state is sweepq.JobState.AVAILABLE
    assert job.attempt == 1
    (error,) = job.errors
    # The delay and the error's time come from one now() in one statement.
    assert job.run_at - at(error) == timedelta(seconds=90)


async def test_a_raising_handler_retries_with_backoff_then_fails_keeping_the_newest_ten_errors(
    app: sweepq.App,
) -> None:
    seen: list[int] = []

    @app.task(name="broken", max_attempts=12)
    async def broken(ctx: sweepq.Context) -> None:
        seen.append(ctx.attempt)
        raise RuntimeError(f"boom on attempt {ctx.attempt}")

    r = await app.enqueue(broken)
    async with sweepq.Worker(app, concurrency=1) as worker:
        assert await worker.run_until_idle() == 1
    job = await get(app, r.job_id)
    assert job.state is sweepq.JobState.AVAILABLE
    (error,) = job.errors
    # Backoff of the first retry: 1 s with +-25 % jitter, after the failure was recorded.
    assert timedelta(seconds=0.75) <= job.run_at - at(error) <= timedelta(seconds=1.25)

    # The testing kit runs the rest without waiting the backoffs.
    assert await drain(app) == {"retry": 10, "failed": 1}
    job = await get(app, r.job_id)
    assert job.state is sweepq.JobState.FAILED
    assert job.failure_reason == "max_attempts_exceeded"
    assert (job.attempt, job.max_attempts, job.snoozes) == (12, 12, 0)
    assert seen == list(range(1, 13))
    assert [e.attempt for e in job.errors] == list(range(3, 13))
    assert all(e.kind == "exception" for e in job.errors)
    assert all(f"boom on attempt {e.attempt}" in e.error for e in job.errors)
    assert all("RuntimeError" in e.error for e in job.errors)


async def test_the_backoff_grows_with_the_attempt(app: sweepq.App) -> None:
    @app.task(name="broken")
    async def broken(ctx: sweepq.Context) -> None:
        raise RuntimeError("boom")

    r = await app.enqueue(broken)
    async with sweepq.Worker(app, concurrency=1) as worker:
        for _ in range(3):
            assert await worker.run_until_idle() == 1
            await make_job_due(app, r.job_id)
        assert await worker.run_until_idle() == 1
    job = await get(app, r.job_id)
    assert job.attempt == 4
    last = job.errors[-1]
    assert last.attempt == 4
    # Attempt 4 waits 8 s +-25 %.
    assert timedelta(seconds=6) <= job.run_at - at(last) <= timedelta(seconds=10)


async def test_a_failure_then_a_success_completes_on_the_second_attempt(app: sweepq.App) -> None:
    @app.task(name="once_broken")
    async def once_broken(ctx: sweepq.Context) -> None:
        if ctx.attempt == 1:
            raise ValueError("first time fails")

    r = await app.enqueue(once_broken)
    assert await drain(app) == {"retry": 1, "completed": 1}
    job = await get(app, r.job_id)
    assert job.state is sweepq.JobState.COMPLETED
    assert job.attempt == 2
    assert job.failure_reason is None
    assert [(e.attempt, e.kind) for e in job.errors] == [(1, "exception")]


async def test_cancel_raised_by_the_handler_ends_the_job_cancelled_not_failed(
    app: sweepq.App,
) -> None:
    calls: list[int] = []

    @app.task(name="gone")
    async def gone(ctx: sweepq.Context) -> None:
        calls.append(ctx.attempt)
        raise sweepq.Cancel("customer deleted")

    r = await app.enqueue(gone)
    job = await run_until_terminal(app, r.job_id)
    assert job.state is sweepq.JobState.CANCELLED
    assert job.failure_reason is None
    assert job.finished_at is not None
    assert job.attempt == 1
    assert calls == [1]
    assert [(e.kind, e.error) for e in job.errors] == [("cancelled", "customer deleted")]


async def test_a_job_that_only_ever_snoozes_fails_at_its_deadline_with_no_attempt_charged(
    app: sweepq.App,
) -> None:
    calls: list[int] = []

    @app.task(name="waits_forever", max_attempts=1)
    async def waits_forever(ctx: sweepq.Context) -> None:
        calls.append(ctx.attempt)
        raise sweepq.Snooze(0.05)

    r = await app.enqueue(waits_forever, deadline=timedelta(seconds=1))
    job = await run_until_terminal(app, r.job_id, timeout=15)
    assert job.state is sweepq.JobState.FAILED
    assert job.failure_reason == "deadline_exceeded"
    assert job.attempt == 0
    assert job.max_attempts == 1
    assert job.snoozes == len(calls) >= 2
    assert set(calls) == {1}
    assert job.finished_at is not None
    assert job.deadline_at is not None
    # It ended when its next snooze could no longer start before the deadline.
    assert job.deadline_at - timedelta(seconds=0.1) <= job.finished_at
    # No reschedule ever landed past the deadline.
    assert job.run_at <= job.deadline_at


async def test_a_job_past_its_deadline_is_failed_instead_of_run(app: sweepq.App) -> None:
    calls: list[int] = []

    @app.task(name="late")
    async def late(ctx: sweepq.Context) -> None:
        calls.append(ctx.attempt)

    r = await app.enqueue(late, deadline=timedelta(seconds=60))
    await expire_deadline(app, r.job_id)
    job = await run_until_terminal(app, r.job_id)
    assert calls == []
    assert job.state is sweepq.JobState.FAILED
    assert job.failure_reason == "deadline_exceeded"
    assert job.attempt == 0


@pytest.mark.parametrize(
    "deferral",
    [
        sweepq.RetryAfter(timedelta(hours=1), consume_budget=False),
        sweepq.Snooze(timedelta(hours=1)),
    ],
    ids=["retry_after", "snooze"],
)
async def test_a_deferral_past_the_deadline_fails_the_job_at_once(
    app: sweepq.App, deferral: Exception
) -> None:
    @app.task(name="deferred")
    async def deferred(ctx: sweepq.Context) -> None:
        raise deferral

    r = await app.enqueue(deferred, deadline=timedelta(minutes=5))
    async with sweepq.Worker(app, concurrency=1) as worker:
        assert await worker.run_until_idle() == 1
    job = await get(app, r.job_id)
    # Waiting an hour cannot finish within five minutes: no point waiting for the deadline.
    assert (job.state, job.failure_reason) == (sweepq.JobState.FAILED, "deadline_exceeded")
    assert (job.attempt, job.snoozes) == (0, 1)
    assert job.finished_at is not None
    assert job.deadline_at is not None
    assert job.finished_at < job.deadline_at


async def test_a_backoff_past_the_deadline_fails_the_job_at_once(app: sweepq.App) -> None:
    calls: list[int] = []

    @app.task(name="flaky", max_attempts=5)
    async def flaky(ctx: sweepq.Context) -> None:
        calls.append(ctx.attempt)
        raise RuntimeError("upstream said no")

    # The first retry's backoff is 1 s ±25 %: it cannot start before a deadline 0.7 s away.
    r = await app.enqueue(flaky, deadline=timedelta(seconds=0.7))
    async with sweepq.Worker(app, concurrency=1) as worker:
        assert await worker.run_until_idle() == 1
    job = await get(app, r.job_id)
    assert calls == [1]
    assert (job.state, job.failure_reason) == (sweepq.JobState.FAILED, "deadline_exceeded")
    assert job.attempt == 1
    assert [e.kind for e in job.errors] == ["exception"]
    assert "upstream said no" in job.errors[0].error
    assert job.finished_at is not None
    assert job.deadline_at is not None
    assert job.finished_at < job.deadline_at


async def test_stored_args_that_do_not_fit_the_handler_fail_the_job_invalid_args(
    app: sweepq.App,
) -> None:
    calls: list[int] = []

    @app.task(name="greet")
    async def greet(ctx: sweepq.Context, name: str) -> None:
        calls.append(ctx.attempt)

    r = await app.enqueue(greet, {"name": "ada"})
    # As an enqueuer that cannot check them (SQL, another language) might have stored them.
    await app.pool.execute(
        f"UPDATE {ident(app.schema)}.jobs SET args = '{{\"nom\": 1}}' WHERE id = $1", r.job_id
    )
    async with sweepq.Worker(app, concurrency=1) as worker:
        assert await worker.run_until_idle() == 1
    job = await get(app, r.job_id)
    assert calls == []
    assert (job.state, job.failure_reason, job.attempt) == (
        sweepq.JobState.FAILED,
        "invalid_args",
        1,
    )
    assert "do not fit the handler of task 'greet'" in job.errors[0].error
    assert "(it accepts: name)" in job.errors[0].error


# cancel and retry ---------------------------------------------------------------------------


async def test_cancel_of_an_available_job_makes_it_cancelled_and_it_never_runs(
    app: sweepq.App,
) -> None:
    calls: list[int] = []

    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        calls.append(ctx.attempt)

    r = await app.enqueue(t)
    job = await app.cancel(r.job_id, reason="not needed")
    assert job is not None
    assert job.state is sweepq.JobState.CANCELLED
    assert job.finished_at is not None
    assert job.failure_reason is None
    assert [(e.kind, e.error) for e in job.errors] == [("cancelled", "not needed")]
    async with sweepq.Worker(app, concurrency=1) as worker:
        assert await worker.run_until_idle() == 0
    assert calls == []


async def test_cancel_of_a_terminal_job_changes_nothing(app: sweepq.App) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    r = await app.enqueue(t)
    done = await run_until_terminal(app, r.job_id)
    assert done.state is sweepq.JobState.COMPLETED
    assert await app.cancel(r.job_id) == done


async def test_cancel_and_retry_of_a_missing_job_return_none(
    tx_app: sweepq.App, conn: Conn
) -> None:
    assert await tx_app.cancel(123_456_789, conn=conn) is None
    assert await tx_app.retry(123_456_789, conn=conn) is None


async def test_retry_of_a_failed_job_resets_attempt_and_keeps_max_attempts(
    app: sweepq.App,
) -> None:
    fail = True

    @app.task(name="t", max_attempts=2)
    async def t(ctx: sweepq.Context) -> None:
        if fail:
            raise sweepq.RetryAfter(0)

    r = await app.enqueue(t)
    failed = await run_until_terminal(app, r.job_id)
    assert failed.state is sweepq.JobState.FAILED
    assert failed.attempt == 2

    retried = await app.retry(r.job_id)
    assert retried is not None
    assert retried.state is sweepq.JobState.AVAILABLE
    assert (retried.attempt, retried.max_attempts) == (0, 2)
    assert retried.failure_reason is None
    assert retried.finished_at is None
    assert retried.errors == failed.errors  # history is kept

    fail = False
    job = await run_until_terminal(app, r.job_id)
    assert job.state is sweepq.JobState.COMPLETED
    assert (job.attempt, job.max_attempts) == (1, 2)


async def test_retry_of_a_job_that_missed_its_deadline_rearms_the_deadline(
    app: sweepq.App,
) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    r = await app.enqueue(t, deadline=timedelta(minutes=10))
    # As if it had been enqueued 11 minutes ago.
    await backdate_jobs(app, timedelta(minutes=11), "created_at", "deadline_at", ids=[r.job_id])
    failed = await run_until_terminal(app, r.job_id)
    assert failed.failure_reason == "deadline_exceeded"
    job = await app.retry(r.job_id)
    assert job is not None
    assert job.deadline_at is not None
    # Re-armed for the same duration, from the retry (run_at is the retry's now()).
    assert job.deadline_at - job.run_at == timedelta(minutes=10)
    job = await run_until_terminal(app, r.job_id)
    assert job.state is sweepq.JobState.COMPLETED


async def test_repeated_retries_rearm_the_same_deadline_each_time(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    r = await tx_app.enqueue(t, deadline=timedelta(minutes=10), conn=conn)
    for _ in range(3):
        await tx_app.cancel(r.job_id, conn=conn)
        job = await tx_app.retry(r.job_id, conn=conn)
        assert job is not None
        assert job.deadline_at is not None
        assert job.deadline_at - job.run_at == timedelta(minutes=10)


async def test_retry_of_a_terminal_job_whose_identity_is_held_by_an_active_job_is_refused(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    first = await tx_app.enqueue(t, identity_key="nightly", conn=conn)
    cancelled = await tx_app.cancel(first.job_id, conn=conn)
    second = await tx_app.enqueue(t, identity_key="nightly", conn=conn)
    assert second.outcome == "created"
    # In a savepoint: the refusal is a unique violation, which aborts the transaction it is in.
    with pytest.raises(sweepq.InvalidJobOptionError, match="another active job holds"):
        async with conn.transaction():
            await tx_app.retry(first.job_id, conn=conn)
    assert await tx_app.get_job(first.job_id, conn=conn) == cancelled


async def test_retry_of_a_running_job_changes_nothing(tx_app: sweepq.App, conn: Conn) -> None:
    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    r = await tx_app.enqueue(t, conn=conn)
    (claimed,) = await claim(tx_app, on=conn)
    assert claimed.id == r.job_id
    running = await get(tx_app, r.job_id, conn)
    assert await tx_app.retry(r.job_id, conn=conn) == running
    assert running.state is sweepq.JobState.RUNNING


async def test_retry_of_a_snoozed_job_makes_it_due_now(app: sweepq.App) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        if ctx.snoozes == 0:
            raise sweepq.Snooze(timedelta(hours=1))

    r = await app.enqueue(t)
    async with sweepq.Worker(app, concurrency=1) as worker:
        assert await worker.run_until_idle() == 1
        assert await worker.run_until_idle() == 0
        job = await app.retry(r.job_id)
        assert job is not None
        assert (job.state, job.snoozes, job.attempt) == (sweepq.JobState.AVAILABLE, 1, 0)
        assert await worker.run_until_idle() == 1
    job = await get(app, r.job_id)
    assert (job.state, job.attempt, job.snoozes) == (sweepq.JobState.COMPLETED, 1, 1)


async def test_every_outcome_is_recorded_when_jobs_finish_at_different_times(
    app: sweepq.App,
) -> None:
    """A job still running while earlier outcomes are written gets its own outcome written."""

    @app.task(name="t")
    async def t(ctx: sweepq.Context, pause: float) -> None:
        await anyio.sleep(pause)

    results = await app.enqueue_many(
        [sweepq.JobSpec(t, {"pause": p}) for p in (0.0, 0.05, 0.1, 0.15)]
    )
    async with sweepq.Worker(app, concurrency=4) as worker:
        assert await worker.run_until_idle() == 4
    for r in results:
        job = await get(app, r.job_id)
        assert (job.state, job.attempt) == (sweepq.JobState.COMPLETED, 1)


async def test_an_error_message_holding_nul_is_recorded(app: sweepq.App) -> None:
    @app.task(name="t", max_attempts=1)
    async def t(ctx: sweepq.Context) -> None:
        raise ValueError("bad\x00byte")

    r = await app.enqueue(t)
    job = await run_until_terminal(app, r.job_id)
    assert job.state is sweepq.JobState.FAILED
    assert "bad\\x00byte" in job.errors[-1].error
