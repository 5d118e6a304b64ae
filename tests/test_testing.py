"""`sweepq.testing`: perform, drain, assert_enqueued / refute_enqueued, step_sweep, isolated."""

from __future__ import annotations

import re
from datetime import timedelta

import anyio
import pytest

import sweepq
from factories import count_jobs, create_items, handled_items, schema_exists
from sweep_worker_proc import items_sweep
from sweepq.testing import (
    assert_enqueued,
    drain,
    isolated,
    perform,
    refute_enqueued,
    step_sweep,
)


def register(app: sweepq.App) -> None:
    @app.task(name="ok", max_attempts=3)
    async def ok(ctx: sweepq.Context, n: int) -> int:
        return n * 2

    @app.task(name="flaky", max_attempts=3)
    async def flaky(ctx: sweepq.Context) -> None:
        if ctx.attempt < 3:
            raise RuntimeError(f"attempt {ctx.attempt} failed")

    @app.task(name="sleepy")
    def sleepy(ctx: sweepq.Context) -> None:  # a def handler: performed in a thread
        raise sweepq.Snooze(30)

    @app.task(name="gone")
    async def gone(ctx: sweepq.Context) -> None:
        raise sweepq.Cancel("customer deleted")


async def test_perform_runs_the_handler_inline_and_says_what_the_queue_would_decide(
    app: sweepq.App,
) -> None:
    register(app)
    done = await perform(app, "ok", {"n": 21})
    assert (done.outcome, done.returned, done.raised) == ("completed", 42, None)

    retry = await perform(app, "flaky", attempt=1)
    assert retry.outcome == "retry"
    assert 0.75 <= retry.delay <= 1.25  # the first backoff: 1 s, +-25 %
    assert isinstance(retry.raised, RuntimeError)
    assert retry.error is not None
    assert "attempt 1 failed" in retry.error

    last = await perform(app, "flaky", attempt=2, max_attempts=2)
    assert (last.outcome, last.failure_reason) == ("failed", "max_attempts_exceeded")

    snooze = await perform(app, "sleepy")
    assert (snooze.outcome, snooze.delay) == ("snooze", 30)
    late = await perform(app, "sleepy", deadline_in=10)
    assert (late.outcome, late.failure_reason) == ("failed", "deadline_exceeded")

    cancel = await perform(app, "gone")
    assert (cancel.outcome, cancel.error) == ("cancel", "customer deleted")

    # Args the queue would refuse are refused here too, and no job is ever written.
    with pytest.raises(sweepq.InvalidArgumentsError, match="n"):
        await perform(app, "ok", {"n": "twenty"})
    assert await count_jobs(app) == 0


async def test_perform_fails_at_once_what_the_tasks_policy_discards(dsn: str) -> None:
    app = sweepq.App(dsn)  # perform writes nothing: the app need not be open

    @app.task(name="charge", retry=sweepq.RetryPolicy(discard_on=(ValueError,)))
    async def charge(ctx: sweepq.Context) -> None:
        raise ValueError("card declined")

    performed = await perform(app, "charge")
    assert (performed.outcome, performed.failure_reason) == ("failed", "error")
    assert isinstance(performed.raised, ValueError)


async def test_perform_waits_the_backoff_of_the_tasks_policy_or_else_the_apps(dsn: str) -> None:
    app = sweepq.App(dsn, retry=sweepq.RetryPolicy(backoff=lambda attempt, error: 7.0 * attempt))

    @app.task(name="own", retry=sweepq.RetryPolicy(backoff=lambda attempt, error: 60.0))
    async def own(ctx: sweepq.Context) -> None:
        raise RuntimeError("down")

    @app.task(name="inherits")
    def inherits(ctx: sweepq.Context) -> None:
        raise RuntimeError("down")

    assert (await perform(app, "own")).delay == 60.0
    assert (await perform(app, "inherits", attempt=2)).delay == 14.0
    # Past the deadline the policy's backoff would reach, the job fails now, as in a worker.
    late = await perform(app, "own", deadline_in=30)
    assert (late.outcome, late.failure_reason) == ("failed", "deadline_exceeded")


async def test_perform_cuts_a_handler_off_at_its_timeout(dsn: str) -> None:
    app = sweepq.App(dsn)

    @app.task(name="slow", timeout=0.05, max_attempts=1)
    async def slow(ctx: sweepq.Context) -> None:
        await anyio.sleep(10)

    performed = await perform(app, "slow")
    assert (performed.outcome, performed.failure_reason) == ("failed", "timeout")


async def test_drain_runs_retries_without_waiting_their_backoff_and_counts_outcomes(
    app: sweepq.App,
) -> None:
    register(app)
    flaky = await app.enqueue("flaky")
    await app.enqueue("ok", {"n": 1}, delay=timedelta(hours=1))
    counts = await drain(app)
    assert counts == {"retry": 2, "completed": 2}
    job = await app.get_job(flaky.job_id)
    assert job is not None
    assert (job.state, job.attempt) == (sweepq.JobState.COMPLETED, 3)


async def test_drain_without_scheduled_jobs_leaves_them_waiting(app: sweepq.App) -> None:
    register(app)
    await app.enqueue("ok", {"n": 1})
    later = await app.enqueue("ok", {"n": 2}, delay=timedelta(hours=1))
    assert await drain(app, include_scheduled=False) == {"completed": 1}
    job = await app.get_job(later.job_id)
    assert job is not None
    assert job.state is sweepq.JobState.AVAILABLE


async def test_drain_leaves_the_jobs_of_a_paused_queue_as_production_would(
    app: sweepq.App,
) -> None:
    register(app)
    await app.pause_queue("default")
    waiting = await app.enqueue("ok", {"n": 1})
    await app.enqueue("ok", {"n": 2}, delay=timedelta(hours=1))
    assert await drain(app) == {}
    job = await app.get_job(waiting.job_id)
    assert job is not None
    assert job.state is sweepq.JobState.AVAILABLE
    await app.resume_queue("default")
    assert await drain(app) == {"completed": 2}


async def test_drain_gives_up_on_a_job_that_snoozes_for_ever(app: sweepq.App) -> None:
    register(app)
    await app.enqueue("sleepy")
    with pytest.raises(AssertionError, match="jobs still waited after 3 rounds"):
        await drain(app, max_rounds=3)


async def test_assert_enqueued_matches_args_by_containment_and_fields_by_equality(
    app: sweepq.App,
) -> None:
    register(app)
    first = await app.enqueue("ok", {"n": 1}, queue="math", priority=5)
    await app.enqueue("ok", {"n": 2})
    found = await assert_enqueued(app, "ok", {"n": 1}, queue="math")
    assert found.id == first.job_id
    assert (await assert_enqueued(app, "ok")).id == first.job_id  # any args: the oldest
    await refute_enqueued(app, "ok", {"n": 3})
    await refute_enqueued(app, "ok", {"n": 1}, priority=0)

    with pytest.raises(AssertionError) as missing:
        await assert_enqueued(app, "ok", {"n": 3})
    message = str(missing.value)
    assert "no job of task 'ok' with args containing {'n': 3} is enqueued" in message
    assert f"job {first.job_id}: args={{'n': 1}} queue='math'" in message

    with pytest.raises(AssertionError, match=re.escape("1 job(s) of task 'ok'")):
        await refute_enqueued(app, "ok", {"n": 2})
    with pytest.raises(sweepq.ConfigurationError, match="colour is not a Job field"):
        await assert_enqueued(app, "ok", colour="red")

    # A job that ran is no longer enqueued.
    await drain(app)
    await refute_enqueued(app, "ok")


async def test_step_sweep_moves_a_run_one_link_at_a_time(app: sweepq.App) -> None:
    await create_items(app, 25)
    app.register_sweep(items_sweep(app.schema, page_size=10, window=20))
    started = await app.start_sweep("items")
    leaf = "sweepq.sweep.items.leaf"

    first = await step_sweep(app, started.run_id)
    assert (first.links, first.enqueued, first.draining) == (1, 10, False)
    assert await count_jobs(app, "available", task=leaf) == 10
    await assert_enqueued(app, leaf, {"item": {"id": 1}})
    await refute_enqueued(app, leaf, {"item": {"id": 11}})

    second = await step_sweep(app, started.run_id)
    assert (second.links, second.enqueued) == (2, 20)
    # The window (20) is full: a third page must wait for leaves to finish.
    assert (await step_sweep(app, started.run_id)).links == 2

    await drain(app)  # runs the leaves, and the rest of the walk with them
    run = await app.sweep_status(started.run_id)
    assert run is not None
    assert (run.state, run.completed) == (sweepq.SweepState.COMPLETED, 25)
    assert sorted(await handled_items(app)) == list(range(1, 26))


async def test_step_sweep_ends_a_drained_run_once_its_leaves_are_done(app: sweepq.App) -> None:
    await create_items(app, 5)
    app.register_sweep(items_sweep(app.schema, page_size=10, window=20))
    started = await app.start_sweep("items")
    short = await step_sweep(app, started.run_id)
    assert (short.enqueued, short.draining, short.state) == (5, True, "running")
    # Leaves outstanding: nothing to do yet.
    assert (await step_sweep(app, started.run_id)).state == "running"
    await drain(app)
    run = await app.sweep_status(started.run_id)
    assert run is not None
    assert (run.state, run.completed) == (sweepq.SweepState.COMPLETED, 5)


async def test_isolated_gives_an_app_a_fresh_migrated_schema_and_drops_it(
    app: sweepq.App, dsn: str
) -> None:
    user_app = sweepq.App(dsn, schema="shop")
    register(user_app)
    async with isolated(user_app, dsn) as inside:
        schema = inside.schema
        assert schema.startswith("sweepq_test_")
        await inside.enqueue("ok", {"n": 1})
        assert await drain(inside) == {"completed": 1}
    assert user_app.schema == "shop"
    assert not await schema_exists(app, schema)
