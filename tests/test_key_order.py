"""Ordered keys (`set_concurrency_limit(key, 1, ordered=True)`): the key's jobs start one at a
time, strictly in enqueue order; a head that waits (a retry's backoff) holds the rest back."""

from __future__ import annotations

import anyio
import pytest

import sweepq
from runtime_workers import runtime_workers
from statements import claim, finish, row_versions
from sweepq.core.ident import ident


def _register(app: sweepq.App) -> None:
    @app.task(name="noop")  # the worker processes' own (runtime_proc.py)
    async def noop(ctx: sweepq.Context) -> None:
        return None

    @app.task(name="slow")  # holds its slot until killed, in the worker processes only
    async def slow(ctx: sweepq.Context) -> None:
        raise AssertionError("runs in tests/runtime_proc.py's workers, not here")


async def _enqueue(app: sweepq.App, *specs: sweepq.JobSpec) -> list[int]:
    return [r.job_id for r in await app.enqueue_many(list(specs))]


async def test_an_ordered_key_starts_its_jobs_in_enqueue_order_whatever_their_priority(
    app: sweepq.App,
) -> None:
    _register(app)
    await app.set_concurrency_limit("account-7", 1, ordered=True)
    ids = await _enqueue(
        app,
        *[sweepq.JobSpec("noop", concurrency_key="account-7", priority=p) for p in (0, 9, 5, 9, 0)],
    )
    started = []
    for _ in range(5):
        jobs = await claim(app, 10)
        assert len(jobs) == 1  # one at a time
        started.append(jobs[0].id)
        assert await claim(app, 10) == []  # the next waits for this one to end
        assert await finish(app, jobs[0])
    assert started == ids
    [key] = await app.concurrency_keys()
    assert (key.ordered, key.max_running) == (True, 1)


async def test_a_retrying_head_holds_the_rest_back_and_nothing_is_written_meanwhile(
    app: sweepq.App,
) -> None:
    _register(app)
    await app.set_concurrency_limit("account-7", 1, ordered=True)
    first, second, third = await _enqueue(
        app, *[sweepq.JobSpec("noop", concurrency_key="account-7") for _ in range(3)]
    )
    [head] = await claim(app, 10)
    assert head.id == first
    assert await finish(app, head, "available", delay=3600.0)  # a retry, an hour from now
    # The jobs behind it are due, and wait: the key is placed at its head's run_at.
    assert await claim(app, 10) == []
    place = await app.pool.fetchval(
        f"SELECT k.next_run_at = j.run_at FROM {ident(app.schema)}.concurrency_keys AS k,"
        f" {ident(app.schema)}.jobs AS j WHERE k.key = 'account-7' AND j.id = $1",
        first,
    )
    assert place is True
    before = [await row_versions(app, t) for t in ("jobs", "concurrency_keys")]
    for _ in range(10):
        assert await claim(app, 10) == []
    assert [await row_versions(app, t) for t in ("jobs", "concurrency_keys")] == before
    # Its backoff over (moved into the past here, as an hour would): the head runs again first.
    await app.pool.execute(
        f"UPDATE {ident(app.schema)}.jobs SET run_at = now() WHERE id = $1;"
        .replace("$1", str(first))
        + f" UPDATE {ident(app.schema)}.concurrency_keys SET next_run_at = now()"
    )  # fmt: skip
    order = []
    for _ in range(3):
        [job] = await claim(app, 10)
        order.append(job.id)
        assert await finish(app, job)
    assert order == [first, second, third]


async def test_a_head_in_another_queue_holds_back_the_jobs_of_this_one(app: sweepq.App) -> None:
    _register(app)
    await app.set_concurrency_limit("account-7", 1, ordered=True)
    first, second = await _enqueue(
        app,
        sweepq.JobSpec("noop", concurrency_key="account-7", queue="other"),
        sweepq.JobSpec("noop", concurrency_key="account-7"),
    )
    assert await claim(app, 10) == []  # asks for `default` only: its job is not the head
    [job] = await claim(app, 10, queues=("other", "default"))
    assert job.id == first
    assert await finish(app, job)
    assert [j.id for j in await claim(app, 10)] == [second]


async def test_the_order_and_the_limit_are_checked_and_bad_input_writes_nothing(
    app: sweepq.App,
) -> None:
    with pytest.raises(sweepq.InvalidJobOptionError, match="set its limit to 1"):
        await app.set_concurrency_limit("k", 2, ordered=True)
    with pytest.raises(sweepq.InvalidJobOptionError, match="ordered must be True, False"):
        await app.set_concurrency_limit("k", 1, ordered="yes")  # type: ignore[arg-type]
    assert await app.concurrency_keys() == []
    await app.set_concurrency_limit("k", 1, ordered=True)
    with pytest.raises(sweepq.InvalidJobOptionError, match="pass ordered=False"):
        await app.set_concurrency_limit("k", 3)
    [key] = await app.concurrency_keys()
    assert (key.max_running, key.ordered) == (1, True)
    await app.set_concurrency_limit("k", 3, ordered=False)
    [key] = await app.concurrency_keys()
    assert (key.max_running, key.ordered) == (3, False)


@pytest.mark.fault
async def test_the_order_holds_across_two_worker_processes_and_a_kill(app: sweepq.App) -> None:
    """Two worker processes (4 slots each): a slow head, killed with its worker (SIGKILL) and
    rescued, runs again before any job behind it; then the rest run one at a time, in order."""
    _register(app)
    await app.set_concurrency_limit("account-7", 1, ordered=True)
    ids = await _enqueue(
        app,
        sweepq.JobSpec("slow", concurrency_key="account-7"),
        *[sweepq.JobSpec("noop", concurrency_key="account-7") for _ in range(10)],
    )
    jobs = f"{ident(app.schema)}.jobs"
    with runtime_workers(app, 2) as procs:
        with anyio.fail_after(30):
            while (holder := await app.pool.fetchval(
                f"SELECT worker_id FROM {jobs} WHERE id = $1 AND state = 'running'", ids[0]
            )) is None:  # fmt: skip
                await anyio.sleep(0.05)
        # Kill the worker that runs the head, whichever it is: both, to be sure of it.
        for proc in procs:
            proc.kill()
            proc.wait()
    assert holder is not None
    # Its lease lapses (1.5 s); the rescue makes it available again, still the key's head.
    with anyio.fail_after(30):
        while not await app.rescue_lapsed(grace_seconds=0):
            await anyio.sleep(0.2)
    [job] = await claim(app, 10)
    assert job.id == ids[0]  # the head again, never a job behind it
    await app.cancel(job.id)  # the slow head ends, cancelled
    with runtime_workers(app, 2):
        with anyio.fail_after(30):
            while await app.pool.fetchval(
                f"SELECT count(*) FROM {jobs} WHERE state <> 'completed' AND id <> $1", ids[0]
            ):
                await anyio.sleep(0.05)
    rows = await app.pool.fetch(
        f"SELECT id, attempted_at FROM {jobs} WHERE id <> $1 ORDER BY id", ids[0]
    )
    # Started in enqueue order. (A claim's start time is its transaction's, taken before its
    # plan and snapshot: it may precede the previous job's end time by the planning, so the
    # one-at-a-time rule is the limit's, checked by its counter, not by these times.)
    assert [r["id"] for r in sorted(rows, key=lambda r: r["attempted_at"])] == ids[1:]
    [key] = await app.concurrency_keys()
    assert (key.running, key.waiting) == (0, 0)


async def test_cancelling_a_waiting_head_lets_the_next_job_start_now(app: sweepq.App) -> None:
    _register(app)
    await app.set_concurrency_limit("account-7", 1, ordered=True)
    first, second = await _enqueue(
        app, *[sweepq.JobSpec("noop", concurrency_key="account-7") for _ in range(2)]
    )
    [head] = await claim(app, 10)
    assert await finish(app, head, "available", delay=3600.0)  # its retry, in an hour
    assert await claim(app, 10) == []
    await app.cancel(first)
    assert [j.id for j in await claim(app, 10)] == [second]
