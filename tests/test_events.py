"""Observers hear jobs claimed, started and finished, sweep links committed and runs ended."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

import sweepq
from factories import create_items
from sweep_worker_proc import items_sweep
from sweepq.events import (
    Event,
    JobClaimed,
    JobFinished,
    JobStarted,
    SweepLinkCommitted,
    SweepRunEnded,
)
from sweepq.testing import drain


async def test_an_observer_hears_each_execution_claimed_started_and_finished(
    app: sweepq.App,
) -> None:
    heard: list[Event] = []
    app.observe(heard.append)

    @app.task(name="flaky", max_attempts=3)
    async def flaky(ctx: sweepq.Context) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("first try fails")

    job = await app.enqueue(flaky)
    assert await drain(app) == {"retry": 1, "completed": 1}

    kinds = [(type(e).__name__, getattr(e, "attempt", None)) for e in heard]
    assert kinds == [
        ("JobClaimed", 1),
        ("JobStarted", 1),
        ("JobFinished", 1),
        ("JobClaimed", 2),
        ("JobStarted", 2),
        ("JobFinished", 2),
    ]
    claimed = heard[0]
    assert isinstance(claimed, JobClaimed)
    assert (claimed.job_id, claimed.task, claimed.queue) == (job.job_id, "flaky", "default")
    assert 0 <= claimed.waited < 30
    assert isinstance(heard[1], JobStarted)
    first, second = heard[2], heard[5]
    assert isinstance(first, JobFinished)
    assert isinstance(second, JobFinished)
    assert (first.outcome, first.error) == ("retry", "RuntimeError: first try fails")
    assert (second.outcome, second.error, second.failure_reason) == ("completed", None, None)
    assert first.duration > 0
    assert first.worker_id == claimed.worker_id


async def test_an_observer_that_raises_is_logged_and_the_work_goes_on(
    app: sweepq.App, caplog: pytest.LogCaptureFixture
) -> None:
    heard: list[Event] = []

    def broken(event: Event) -> None:
        raise ValueError("observer bug")

    app.observe(broken)
    app.observe(heard.append)

    @app.task(name="noop")
    async def noop(ctx: sweepq.Context) -> None:
        return None

    await app.enqueue(noop)
    with caplog.at_level(logging.ERROR, logger="sweepq.events"):
        assert await drain(app) == {"completed": 1}
    assert len(heard) == 3  # the second observer heard everything
    assert any("observer" in r.getMessage() and "failed on JobClaimed" in r.getMessage()
               for r in caplog.records)  # fmt: skip

    app.unobserve(broken)
    app.unobserve(heard.append)
    assert app.observers == ()
    with pytest.raises(sweepq.ConfigurationError, match="function of one event"):
        app.observe("not a function")  # type: ignore[arg-type]  # the mistake


async def test_an_observer_hears_sweep_links_and_the_end_of_the_run(app: sweepq.App) -> None:
    heard: list[Event] = []
    app.observe(heard.append)
    await create_items(app, 25, failing=range(7, 8))
    app.register_sweep(items_sweep(app.schema, page_size=10, window=30, max_attempts=1))
    started = await app.start_sweep("items")
    await drain(app)

    links = [e for e in heard if isinstance(e, SweepLinkCommitted)]
    assert [(e.items, e.enqueued, e.draining) for e in links] == [
        (10, 10, False),
        (10, 20, False),
        (5, 25, True),
    ]
    assert {e.run_id for e in links} == {started.run_id}
    (ended,) = [e for e in heard if isinstance(e, SweepRunEnded)]
    # One item is undone: the run ends failed, and the event says so.
    assert (ended.run_id, ended.sweep, ended.state) == (started.run_id, "items", "failed")
    assert (ended.completed, ended.failed, ended.cancelled) == (24, 1, 0)
    assert ended.failure is not None
    assert ended.failure.startswith("the walk reached the end, but of its 25 items 1 failed")
    leaves = [e for e in heard if isinstance(e, JobFinished) and e.task.endswith(".leaf")]
    assert len(leaves) == 25


async def test_a_scheduled_job_waited_from_when_it_was_due(app: sweepq.App) -> None:
    heard: list[Event] = []
    app.observe(heard.append)

    @app.task(name="noop")
    async def noop(ctx: sweepq.Context) -> None:
        return None

    await app.enqueue(noop, delay=timedelta(hours=1))
    await drain(app)  # made due now: it waited (almost) nothing past its due time
    (claimed,) = [e for e in heard if isinstance(e, JobClaimed)]
    assert 0 <= claimed.waited < 5


async def test_the_enqueuers_trace_context_reaches_the_execution(app: sweepq.App) -> None:
    heard: list[Event] = []
    app.observe(heard.append)
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    app.trace_context_source = lambda: parent

    @app.task(name="noop")
    async def noop(ctx: sweepq.Context) -> None:
        return None

    given = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    traced = await app.enqueue(noop)
    own = await app.enqueue(noop, trace_context=given)  # given wins over the source
    app.trace_context_source = None
    plain = await app.enqueue(noop)
    stored: dict[int, str | None] = {}
    for job_id in (traced.job_id, own.job_id, plain.job_id):
        job = await app.get_job(job_id)
        assert job is not None
        stored[job_id] = job.trace_context
    assert stored == {traced.job_id: parent, own.job_id: given, plain.job_id: None}
    await drain(app)
    started = {e.job_id: e.trace_context for e in heard if isinstance(e, JobStarted)}
    assert started == stored
