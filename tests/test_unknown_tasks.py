"""A job for a task the worker does not know (a rolling deploy: an older worker claims a job of a
task added by the newer code) is handed back uncharged for a worker that knows it, ten times at
most, thirty seconds apart, then fails `unknown_task`."""

from __future__ import annotations

from datetime import datetime

import pytest

import sweepq
from statements import make_due
from sweepq.core.decision import UNKNOWN_TASK_HANDBACKS, UNKNOWN_TASK_RETRY_SECONDS
from sweepq.core.ident import ident
from sweepq.testing import drain

pytestmark = pytest.mark.committed


async def enqueue_from_sql(app: sweepq.App, task: str) -> int:
    """A job of `task` as newer code (or another service) enqueues it."""
    return int(await app.pool.fetchval(f"SELECT job_id FROM {ident(app.schema)}.enqueue($1)", task))


async def test_a_job_of_a_task_this_worker_does_not_know_is_handed_back_uncharged(
    app: sweepq.App, dsn: str
) -> None:
    job_id = await enqueue_from_sql(app, "added_later")
    assert await drain(app, include_scheduled=False) == {"handed_back": 1}
    job = await app.get_job(job_id)
    assert job is not None
    assert (job.state, job.attempt, job.failure_reason) == (sweepq.JobState.AVAILABLE, 0, None)
    assert [e.kind for e in job.errors] == ["unknown_task"]
    assert "no handler for task 'added_later' is registered in this worker" in job.errors[0].error
    waits = (job.run_at - datetime.fromisoformat(job.errors[0].at)).total_seconds()
    assert UNKNOWN_TASK_RETRY_SECONDS - 1 <= waits <= UNKNOWN_TASK_RETRY_SECONDS + 1

    # A worker of the newer code, which has the task, runs it.
    newer = sweepq.App(dsn, schema=app.schema)

    @newer.task(name="added_later")
    async def added_later(ctx: sweepq.Context) -> str:
        return f"attempt {ctx.attempt}"

    async with newer:
        await make_due(newer, job_id)
        assert await drain(newer) == {"completed": 1}
        done = await newer.get_job(job_id)
    assert done is not None
    assert (done.state, done.result, done.attempt) == (
        sweepq.JobState.COMPLETED,
        "attempt 1",
        1,
    )


async def test_a_job_no_worker_knows_fails_unknown_task_after_its_last_hand_back(
    app: sweepq.App,
) -> None:
    job_id = await enqueue_from_sql(app, "nobody_has_it")
    # drain() makes what is scheduled due, round after round: each round is one more worker.
    assert await drain(app) == {"handed_back": UNKNOWN_TASK_HANDBACKS - 1, "failed": 1}
    job = await app.get_job(job_id)
    assert job is not None
    assert (job.state, job.failure_reason, job.attempt) == (
        sweepq.JobState.FAILED,
        "unknown_task",
        0,  # it never ran
    )
    assert [e.kind for e in job.errors] == ["unknown_task"] * UNKNOWN_TASK_HANDBACKS
    assert "register the task in the workers' app" in job.errors[-1].error
    # Retrying it starts the count over.
    await app.retry(job_id)
    assert await drain(app, include_scheduled=False) == {"handed_back": 1}


async def test_hand_backs_are_counted_in_a_row_only(app: sweepq.App, dsn: str) -> None:
    job_id = await enqueue_from_sql(app, "flaky")
    # Nine hand-backs by workers without the task, then a failure in one that has it: the next
    # worker without it hands it back again, for the count of hand-backs in a row starts over.
    await app.pool.execute(
        f"UPDATE {ident(app.schema)}.jobs SET handbacks = $2 WHERE id = $1",
        job_id,
        UNKNOWN_TASK_HANDBACKS - 1,
    )
    newer = sweepq.App(dsn, schema=app.schema)

    @newer.task(name="flaky", max_attempts=20)
    async def flaky(ctx: sweepq.Context) -> None:
        raise RuntimeError("not this time")

    async with newer:
        assert await drain(newer, include_scheduled=False) == {"retry": 1}
    await make_due(app, job_id)
    assert await drain(app, include_scheduled=False) == {"handed_back": 1}
    job = await app.get_job(job_id)
    assert job is not None
    assert [e.kind for e in job.errors] == ["exception", "unknown_task"]
    assert (job.state, job.handbacks) == (sweepq.JobState.AVAILABLE, 1)
