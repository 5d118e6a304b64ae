"""Concurrency keys are admitted inside the claim, and the claim hands each job out once."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import anyio
import anyio.lowlevel
import asyncpg
import pytest

import sweepq
from factories import (
    count_jobs,
    count_rows,
    expire_lease,
    key_next_run_at,
    key_running,
    set_key_next_run_at,
    table_counts,
)
from statements import claim, finish, job_counts, make_due
from sweepq.core.decision import Decision
from sweepq.core.ident import ident
from sweepq.core.queries import Conn, Executor
from sweepq.core.rows import FinishBatch
from waiting import StartLine

COMPLETED = Decision(state="completed")


@contextlib.asynccontextmanager
async def connections(app: sweepq.App, n: int) -> AsyncIterator[list[Conn]]:
    opened: list[Conn] = []
    try:
        for _ in range(n):
            opened.append(await asyncpg.connect(app.dsn))
        yield opened
    finally:
        for c in opened:
            await c.close()


async def waiting_rows(
    app: sweepq.App, key: str, *, on: Executor | None = None
) -> dict[int, tuple[str, str]]:
    """{id: (xmin, ctid)} of the available jobs on `key`: any write to a row gives it a new
    ctid (and, in another transaction, a new xmin)."""
    rows = await (on or app.pool).fetch(
        f"SELECT id, xmin::text, ctid::text FROM {ident(app.schema)}.jobs"
        " WHERE state = 'available' AND concurrency_key = $1",
        key,
    )
    return {r[0]: (r[1], r[2]) for r in rows}


async def key_row_version(app: sweepq.App, key: str, *, on: Executor) -> str:
    """xmin and ctid of the key's row, as `waiting_rows` reads a job's."""
    version = await on.fetchval(
        f"SELECT xmin::text || ctid::text FROM {ident(app.schema)}.concurrency_keys WHERE key = $1",
        key,
    )
    assert version is not None
    return str(version)


class Gauge:
    """Counts handlers running at once and remembers the peak."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    @contextlib.contextmanager
    def running(self) -> Any:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            yield
        finally:
            self.now -= 1


async def test_a_key_limited_to_two_never_runs_more_than_two_and_waiting_writes_nothing(
    app: sweepq.App,
) -> None:
    gauge = Gauge()
    done: list[int] = []
    first_started = anyio.Event()

    @app.task(name="limited")
    async def limited(ctx: sweepq.Context, n: int) -> None:
        with gauge.running():
            first_started.set()
            await anyio.sleep(0.02)
        done.append(n)

    await app.set_concurrency_limit("stripe", 2)
    await app.enqueue_many(
        [sweepq.JobSpec(limited, {"n": i}, concurrency_key="stripe") for i in range(30)]
    )
    samples: list[dict[str, int]] = []
    finished = anyio.Event()

    async def sample() -> None:
        async with connections(app, 1) as (c,):
            await first_started.wait()
            while not finished.is_set():
                samples.append(await table_counts(app, on=c))
                await anyio.sleep(0.005)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sample)
            async with sweepq.Worker(app, concurrency=20) as worker:
                processed = await worker.run_until_idle()
            finished.set()
    assert processed == 30
    assert sorted(done) == list(range(30))
    assert gauge.peak == 2
    assert len(samples) >= 3
    # While jobs waited on the full key, no table of the schema gained a row.
    assert all(s == samples[0] for s in samples), samples
    assert samples[0]["jobs"] == 30
    assert await key_running(app, "stripe") == 0


async def test_claims_denied_by_a_full_key_write_nothing_for_the_waiting_jobs(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context, n: int) -> None:
        return None

    await tx_app.set_concurrency_limit("k", 2, conn=conn)
    await tx_app.enqueue_many(
        [sweepq.JobSpec(t, {"n": i}, concurrency_key="k") for i in range(10)], conn=conn
    )
    first = await claim(tx_app, 10, worker="w1", on=conn)
    assert len(first) == 2
    assert await key_running(tx_app, "k", on=conn) == 2
    waiting = await waiting_rows(tx_app, "k", on=conn)
    assert len(waiting) == 8
    key_row = await key_row_version(tx_app, "k", on=conn)
    for n in range(5):
        assert await claim(tx_app, 10, worker=f"w{n + 2}", on=conn) == []
    # Neither the waiting jobs nor the key's row were written by the denied claims.
    assert await waiting_rows(tx_app, "k", on=conn) == waiting
    assert await key_row_version(tx_app, "k", on=conn) == key_row
    # Finishing one frees exactly one place.
    assert await finish(tx_app, first[0], worker="w1", on=conn)
    assert await key_running(tx_app, "k", on=conn) == 1
    assert len(await claim(tx_app, 10, worker="w9", on=conn)) == 1
    assert await key_running(tx_app, "k", on=conn) == 2


async def test_a_key_limited_to_zero_is_never_claimed_until_its_limit_is_raised(
    app: sweepq.App,
) -> None:
    gauge = Gauge()
    ran: list[str] = []

    @app.task(name="t")
    async def t(ctx: sweepq.Context, label: str) -> None:
        with gauge.running():
            await anyio.sleep(0.01)
        ran.append(label)

    await app.set_concurrency_limit("paused", 0)
    await app.enqueue_many(
        [sweepq.JobSpec(t, {"label": f"k{i}"}, concurrency_key="paused") for i in range(5)]
        + [sweepq.JobSpec(t, {"label": f"u{i}"}) for i in range(3)]
    )
    waiting = await waiting_rows(app, "paused")
    assert len(waiting) == 5
    async with sweepq.Worker(app, concurrency=10) as worker:
        assert await worker.run_until_idle() == 3
        assert sorted(ran) == ["u0", "u1", "u2"]
        assert await waiting_rows(app, "paused") == waiting
        assert await worker.run_until_idle() == 0
        assert await waiting_rows(app, "paused") == waiting

        gauge.peak = 0
        await app.set_concurrency_limit("paused", 1)
        assert await worker.run_until_idle() == 5
    assert gauge.peak == 1
    assert sorted(ran) == ["k0", "k1", "k2", "k3", "k4", "u0", "u1", "u2"]
    keys = {k.key: k for k in await app.concurrency_keys()}
    assert keys["paused"].max_running == 1
    assert (keys["paused"].running, keys["paused"].waiting) == (0, 0)


async def test_a_key_without_a_limit_runs_its_jobs_at_once(app: sweepq.App) -> None:
    started = 0
    all_started = anyio.Event()

    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        nonlocal started
        started += 1
        if started == 6:
            all_started.set()
        # Completes only if all six run at the same time.
        with anyio.fail_after(10):
            await all_started.wait()

    await app.enqueue_many([sweepq.JobSpec(t, concurrency_key="free") for _ in range(6)])
    async with sweepq.Worker(app, concurrency=10) as worker:
        assert await worker.run_until_idle() == 6
    counts = await job_counts(app)
    assert counts == {"completed": 6}


async def test_one_claim_admits_each_key_up_to_its_own_limit(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    await tx_app.set_concurrency_limit("a", 1, conn=conn)
    await tx_app.set_concurrency_limit("b", 2, conn=conn)
    keys = ["a"] * 3 + ["b"] * 3 + [None] * 2
    made = await tx_app.enqueue_many(
        [sweepq.JobSpec(t, concurrency_key=key) for key in keys], conn=conn
    )
    key_of = {r.job_id: key for r, key in zip(made, keys, strict=True)}
    claimed = await claim(tx_app, 10, on=conn)
    assert Counter(key_of[c.id] for c in claimed) == {"a": 1, "b": 2, None: 2}
    assert await key_running(tx_app, "a", on=conn) == 1
    assert await key_running(tx_app, "b", on=conn) == 2


async def claim_at_once(app: sweepq.App, claimers: int, *, prefix: str) -> list[int]:
    """Job ids claimed by `claimers` connections released together."""
    claimed: list[int] = []
    line = StartLine(claimers)

    async def one(c: Conn, n: int) -> None:
        await line.reached()
        got = await claim(app, 10, worker=f"{prefix}:{n}", on=c)
        claimed.extend(j.id for j in got)

    async with connections(app, claimers) as conns, anyio.create_task_group() as tg:
        for n, c in enumerate(conns):
            tg.start_soon(one, c, n)
        await line.release()
    return claimed


async def test_concurrent_claims_never_admit_more_than_the_limit(app: sweepq.App) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    await app.set_concurrency_limit("k", 2)
    await app.enqueue_many([sweepq.JobSpec(t, concurrency_key="k") for _ in range(40)])
    for round_ in range(5):
        claimed = await claim_at_once(app, 6, prefix=f"r{round_}")
        assert 1 <= len(claimed) <= 2
        assert len(set(claimed)) == len(claimed)
        assert await key_running(app, "k") == len(claimed)
        assert await count_jobs(app, "running") == len(claimed)
        # Hand them back for the next round.
        await expire_lease(app)
        assert await app.rescue_lapsed() == len(claimed)
        assert await key_running(app, "k") == 0


Handler = Callable[[sweepq.Context], Any]


def _complete(ctx: sweepq.Context) -> None:
    return None


def _snooze_once(ctx: sweepq.Context) -> None:
    if ctx.snoozes == 0:
        raise sweepq.Snooze(0)


def _retry_once(ctx: sweepq.Context) -> None:
    if ctx.attempt == 1:
        raise sweepq.RetryAfter(0)


def _defer_without_budget_once(ctx: sweepq.Context) -> None:
    if ctx.snoozes == 0:
        raise sweepq.RetryAfter(0, consume_budget=False)


def _fail(ctx: sweepq.Context) -> None:
    raise RuntimeError("always fails")


def _fail_by_retry_after(ctx: sweepq.Context) -> None:
    raise sweepq.RetryAfter(0)


def _cancel(ctx: sweepq.Context) -> None:
    raise sweepq.Cancel("no longer wanted")


@pytest.mark.parametrize(
    ("behaviour", "state"),
    [
        (_complete, "completed"),
        (_snooze_once, "completed"),
        (_retry_once, "completed"),
        (_defer_without_budget_once, "completed"),
        (_fail, "failed"),
        (_fail_by_retry_after, "failed"),
        (_cancel, "cancelled"),
    ],
)
async def test_the_keys_running_count_returns_to_zero_after_every_outcome(
    app: sweepq.App, behaviour: Handler, state: str
) -> None:
    observed: list[int] = []

    @app.task(name="t", max_attempts=2)
    async def t(ctx: sweepq.Context) -> None:
        observed.append(await key_running(app, "k"))
        behaviour(ctx)

    await app.set_concurrency_limit("k", 3)
    await app.enqueue_many([sweepq.JobSpec(t, concurrency_key="k") for _ in range(3)])
    with anyio.fail_after(20):
        async with sweepq.Worker(app, concurrency=5) as worker:
            while await worker.run_until_idle():
                await make_due(app)  # skip the backoff of retried jobs
    assert await job_counts(app) == {state: 3}
    assert observed
    assert all(1 <= n <= 3 for n in observed)
    assert await key_running(app, "k") == 0


async def test_four_workers_execute_each_of_500_jobs_exactly_once(app: sweepq.App) -> None:
    executions: list[int] = []

    @app.task(name="t")
    async def t(ctx: sweepq.Context, n: int) -> None:
        executions.append(n)
        await anyio.lowlevel.checkpoint()

    await app.enqueue_many([sweepq.JobSpec(t, {"n": i}) for i in range(500)])
    processed: list[int] = []

    async def work() -> None:
        async with sweepq.Worker(app, concurrency=5) as worker:
            processed.append(await worker.run_until_idle())

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(work)
    assert sorted(executions) == list(range(500))
    assert sum(processed) == 500
    assert await job_counts(app) == {"completed": 500}
    attempts = await app.pool.fetchval(
        f"SELECT array_agg(DISTINCT attempt) FROM {ident(app.schema)}.jobs"
    )
    assert attempts == [1]


async def test_four_connections_claiming_at_once_hand_out_each_job_once(app: sweepq.App) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    # Half of them on a key with room for all: both heads of the claim are raced.
    await app.enqueue_many(
        [sweepq.JobSpec(t, concurrency_key="k" if i % 2 else None) for i in range(500)]
    )
    claimed: list[list[int]] = [[], [], [], []]

    async def claimer(c: Conn, n: int) -> None:
        worker_id = f"w{n}"
        while True:
            got = await claim(app, 7, worker=worker_id, on=c)
            if not got:
                return
            claimed[n].extend(j.id for j in got)
            out = FinishBatch()
            for j in got:
                out.add(j.token, COMPLETED)
            assert len((await app.queries.job_finish_many(c, worker_id, out)).tokens) == len(got)

    with anyio.fail_after(60):
        async with connections(app, 4) as conns, anyio.create_task_group() as tg:
            for n, c in enumerate(conns):
                tg.start_soon(claimer, c, n)
    everything = [i for ids in claimed for i in ids]
    assert len(everything) == 500
    assert len(set(everything)) == 500
    assert sum(1 for ids in claimed if ids) >= 2
    assert await job_counts(app) == {"completed": 500}
    assert await key_running(app, "k") == 0


def rows_touched(node: dict[str, Any], table: str = "jobs") -> int:
    """Rows the scans of `table` in an EXPLAIN ANALYZE plan produced or filtered away."""
    own = 0
    if node.get("Relation Name") == table and "Scan" in node["Node Type"]:
        loops = node.get("Actual Loops", 0)
        own = node.get("Actual Rows", 0) * loops + node.get("Rows Removed by Filter", 0)
    return own + sum(rows_touched(child, table) for child in node.get("Plans", []))


async def explain_claim(app: sweepq.App, *, worker_id: str) -> list[dict[str, Any]]:
    """EXPLAIN ANALYZE of a claim of 10 from `default`, rolled back (after the keys of the jobs
    enqueued so far were woken, as the claims before it would have done)."""
    await app.queries.concurrency_wakeup_apply(app.pool, 100_000)
    async with app.pool.acquire() as c:
        tx = c.transaction()
        await tx.start()
        try:
            plan: list[dict[str, Any]] = json.loads(
                await c.fetchval(
                    "EXPLAIN (ANALYZE, FORMAT JSON) " + app.queries.sql["job_claim"],
                    ["default"],
                    10,
                    worker_id,
                    30.0,
                    True,
                )
            )
        finally:
            await tx.rollback()
    return plan


async def test_the_claim_reads_none_of_the_jobs_waiting_behind_full_keys(
    app: sweepq.App,
) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    await app.set_concurrency_limit("zero", 0)
    await app.set_concurrency_limit("busy", 1)
    await app.enqueue(t, concurrency_key="busy")
    assert len(await claim(app, 10)) == 1
    await app.enqueue_many(
        [sweepq.JobSpec(t, concurrency_key="zero") for _ in range(2_500)]
        + [sweepq.JobSpec(t, concurrency_key="busy") for _ in range(2_500)]
        + [sweepq.JobSpec(t) for _ in range(20)]
    )
    await app.pool.execute(f"ANALYZE {ident(app.schema)}.jobs")
    plan = await explain_claim(app, worker_id="w2")
    top = plan[0]["Plan"]
    assert top["Actual Rows"] == 10 + 1  # ten unkeyed jobs claimed; no key in play: 'light'
    # Ten claimed rows are read a few times over; the 5,000 waiting ones are never read.
    assert rows_touched(top) <= 60, json.dumps(plan, indent=1)


async def test_the_claim_reads_none_of_the_jobs_scheduled_for_later(app: sweepq.App) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    # Fewer jobs due than the claim asks for, behind thousands scheduled for tomorrow, at two
    # priorities: the claim must stop at run_at <= now() instead of reading the rest.
    await app.enqueue_many(
        [sweepq.JobSpec(t, delay=86_400, priority=p) for p in (0, 5) for _ in range(2_500)]
        + [sweepq.JobSpec(t, priority=p) for p in (0, 5) for _ in range(3)]
    )
    await app.pool.execute(f"ANALYZE {ident(app.schema)}.jobs")
    plan = await explain_claim(app, worker_id="w")
    top = plan[0]["Plan"]
    assert top["Actual Rows"] == 6 + 1  # the six due jobs, and only those; the 'light' advice
    assert rows_touched(top) <= 60, json.dumps(plan, indent=1)


async def test_the_claim_takes_higher_priority_first_across_queues(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    async def enqueue(priority: int, queue: str) -> list[sweepq.Enqueued]:
        specs = [sweepq.JobSpec(t, priority=priority, queue=queue) for _ in range(3)]
        return await tx_app.enqueue_many(specs, conn=conn)

    low, high, mid = await enqueue(-1, "a"), await enqueue(7, "b"), await enqueue(2, "a")
    got = await claim(tx_app, 5, queues=["a", "b"], on=conn)
    assert [j.id for j in got] == sorted([r.job_id for r in high] + [r.job_id for r in mid][:2])
    assert not {j.id for j in got} & {r.job_id for r in low}


async def test_the_claim_reads_none_of_the_keys_that_have_nothing_waiting(
    app: sweepq.App,
) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    # Keys used once and idle since (until retention removes them): 3,000 rows of their own.
    await app.pool.execute(
        f"INSERT INTO {ident(app.schema)}.concurrency_keys (key)"
        " SELECT 'idle-' || g FROM generate_series(1, 3000) AS g"
    )
    await app.enqueue_many(
        [sweepq.JobSpec(t, concurrency_key="live") for _ in range(3)]
        + [sweepq.JobSpec(t) for _ in range(3)]
    )
    await app.pool.execute(f"ANALYZE {ident(app.schema)}.concurrency_keys")
    plan = await explain_claim(app, worker_id="w")
    top = plan[0]["Plan"]
    assert top["Actual Rows"] == 6
    assert rows_touched(top, "concurrency_keys") <= 10, json.dumps(plan, indent=1)


async def test_a_flood_of_wake_ups_for_keys_with_nothing_waiting_costs_a_claim_little(
    app: sweepq.App,
) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    # 10,000 wake-ups of keys whose jobs are gone (cancelled, say), or that a role allowed to
    # write the table made up: one claim folds at most 1,000 of them, makes no key row for a key
    # with no job waiting, and still claims the due jobs.
    schema = ident(app.schema)
    await app.pool.execute(
        f"INSERT INTO {schema}.concurrency_wakeups (key, run_at)"
        " SELECT 'ghost-' || g, now() FROM generate_series(1, 10000) AS g"
    )
    await app.enqueue_many([sweepq.JobSpec(t) for _ in range(20)])
    async with app.pool.acquire() as c:
        batch = await app.queries.job_claim(c, ["default"], 10, "w", 30.0)
    assert len(batch.jobs) == 10
    assert await count_rows(app, "concurrency_wakeups") == 9_000
    assert await count_rows(app, "concurrency_keys") == 0
    async with sweepq.Worker(app, concurrency=20) as worker:
        assert await worker.run_until_idle() == 10
    assert await count_rows(app, "concurrency_wakeups") == 0
    assert await count_rows(app, "concurrency_keys") == 0


async def test_a_claim_reads_a_bounded_number_of_keys_with_nothing_due(
    app: sweepq.App,
) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    # 3,000 keys in the walk (due now, room to run) whose jobs were all removed: one claim reads
    # 256 of them at most (and moves them out of the walk), whatever their number.
    await app.pool.execute(
        f"INSERT INTO {ident(app.schema)}.concurrency_keys (key, next_run_at)"
        " SELECT 'emptied-' || g, now() - interval '1 minute' FROM generate_series(1, 3000) AS g"
    )
    await app.enqueue_many([sweepq.JobSpec(t) for _ in range(3)])
    await app.pool.execute(f"ANALYZE {ident(app.schema)}.concurrency_keys")
    plan = await explain_claim(app, worker_id="w")
    top = plan[0]["Plan"]
    assert top["Actual Rows"] == 3
    # Each key the walk reads is read a few times over (walk, lock, settle).
    assert rows_touched(top, "concurrency_keys") <= 4 * 256, json.dumps(plan, indent=1)


async def test_a_key_leaves_the_walk_when_nothing_of_it_is_due(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    now = await tx_app.queries.runtime.clock_now(conn)
    later = await tx_app.enqueue(t, concurrency_key="k", delay=3600, conn=conn)
    due = await tx_app.enqueue(t, concurrency_key="k", conn=conn)
    (job,) = await claim(tx_app, 10, on=conn)
    assert job.id == due.job_id
    assert await finish(tx_app, job, on=conn)
    # The next claim finds nothing due on k and moves it to its job scheduled in an hour.
    assert await claim(tx_app, 10, on=conn) == []
    scheduled = await tx_app.get_job(later.job_id, conn=conn)
    assert scheduled is not None
    assert await key_next_run_at(tx_app, "k", on=conn) == scheduled.run_at
    await tx_app.cancel(later.job_id, conn=conn)
    await make_due(tx_app, on=conn)  # nothing available: nothing to wake
    assert await claim(tx_app, 10, on=conn) == []
    # Cancelled: k still points at the hour; when it comes, a claim takes k out of the walk.
    await set_key_next_run_at(tx_app, "k", now, on=conn)
    assert await claim(tx_app, 10, on=conn) == []
    assert await key_next_run_at(tx_app, "k", on=conn) is None


async def test_a_job_of_a_key_out_of_the_walk_puts_it_back(app: sweepq.App) -> None:
    ran: list[int] = []

    @app.task(name="t")
    async def t(ctx: sweepq.Context, n: int) -> None:
        ran.append(n)

    await app.set_concurrency_limit("k", 1)
    async with sweepq.Worker(app, concurrency=4) as worker:
        await app.enqueue(t, {"n": 1}, concurrency_key="k")
        assert await worker.run_until_idle() == 1
        assert await key_next_run_at(app, "k") is None
        # Inside the caller's transaction: claimable once it commits.
        async with app.connection() as c, c.transaction():
            await app.enqueue(t, {"n": 2}, concurrency_key="k", conn=c)
            assert await worker.run_until_idle() == 0
        assert await worker.run_until_idle() == 1
        failed = await app.enqueue(t, {"n": 3}, concurrency_key="k")
        await app.cancel(failed.job_id)
        assert await worker.run_until_idle() == 0
        # A retried job wakes its key, as an enqueue does.
        await app.retry(failed.job_id)
        assert await worker.run_until_idle() == 1
    assert ran == [1, 2, 3]


async def test_a_worker_passes_over_keys_whose_due_jobs_are_in_other_queues(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    # Older keys due only in queue b come first in the walk; a worker of queue a still finds
    # its own keys behind them, and leaves theirs in place for b's workers. (Older by a minute:
    # one transaction's now() does not move, and ties are walked in key order.)
    now = await tx_app.queries.runtime.clock_now(conn)
    older = now - timedelta(minutes=1)
    await tx_app.enqueue_many(
        [sweepq.JobSpec(t, queue="b", concurrency_key=f"b{i}", run_at=older) for i in range(30)],
        conn=conn,
    )
    mine = await tx_app.enqueue_many(
        [sweepq.JobSpec(t, queue="a", concurrency_key=f"a{i}") for i in range(3)], conn=conn
    )
    got = await claim(tx_app, 10, queues=["a"], on=conn)
    assert sorted(j.id for j in got) == [r.job_id for r in mine]
    theirs = await claim(tx_app, 50, queues=["b"], on=conn)
    assert len(theirs) == 30


async def test_a_key_with_a_long_backlog_takes_turns_with_older_jobs_of_other_keys(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    now = await tx_app.queries.runtime.clock_now(conn)
    # Key a (no limit): one job 10 minutes old and 200 a minute old; key b: one job 5 minutes
    # old. b's job is older than a's backlog, so it is claimed right after a's oldest.
    await tx_app.enqueue(t, concurrency_key="a", run_at=now - timedelta(minutes=10), conn=conn)
    await tx_app.enqueue_many(
        [
            sweepq.JobSpec(t, concurrency_key="a", run_at=now - timedelta(minutes=1))
            for _ in range(200)
        ],
        conn=conn,
    )
    b = await tx_app.enqueue(t, concurrency_key="b", run_at=now - timedelta(minutes=5), conn=conn)
    seen: list[int] = []
    for _ in range(3):
        seen.extend(j.id for j in await claim(tx_app, 10, on=conn))
    assert b.job_id in seen


async def test_keys_take_turns_so_an_older_backlog_of_one_key_holds_back_no_other_key(
    tx_app: sweepq.App, conn: Conn
) -> None:
    """One tenant's 300 jobs a day old, 20 tenants' 3 jobs an hour old, claims of 10: every
    small tenant starts within the round after the big one's first turn (FIFO by run_at would
    start none before the 30th claim)."""

    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    now = await tx_app.queries.runtime.clock_now(conn)
    await tx_app.enqueue_many(
        [
            sweepq.JobSpec(t, concurrency_key="big", run_at=now - timedelta(days=1))
            for _ in range(300)
        ],
        conn=conn,
    )
    await tx_app.enqueue_many(
        [
            sweepq.JobSpec(t, concurrency_key=f"small-{n}", run_at=now - timedelta(hours=1))
            for n in range(20)
            for _ in range(3)
        ],
        conn=conn,
    )
    key_of = f"SELECT concurrency_key FROM {ident(tx_app.schema)}.jobs WHERE id = $1"
    first_start: dict[str, int] = {}
    for n in range(1, 10):
        for job in await claim(tx_app, 10, on=conn):
            first_start.setdefault(await conn.fetchval(key_of, job.id), n)
    assert first_start["big"] == 1  # the oldest jobs go first
    small = [first_start.get(f"small-{n}") for n in range(20)]
    assert None not in small, first_start
    assert max(n for n in small if n is not None) <= 8  # 60 jobs, 10 a claim, after big's turn


async def test_a_key_of_weight_three_takes_three_turns_for_one_of_a_key_of_weight_one(
    app: sweepq.App,
) -> None:
    """Two keys without a limit, 200 jobs each, at equal priority; claims of 5 (one key's share
    each): the key of weight 3 gets three claims in a row, then the other one, and so on."""

    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    await app.set_concurrency_limit("gold", None, weight=3)
    await app.enqueue_many(
        [sweepq.JobSpec(t, concurrency_key=key) for key in ("free", "gold") for _ in range(200)]
    )
    key_of = f"SELECT concurrency_key FROM {ident(app.schema)}.jobs WHERE id = $1"
    taken: list[str] = []
    for _ in range(40):
        for job in await claim(app, 5):
            taken.append(await app.pool.fetchval(key_of, job.id))
    counts = Counter(taken)
    assert counts["gold"] + counts["free"] == 200
    assert 145 <= counts["gold"] <= 155, counts  # 3:1, give or take the first turn
    [gold] = [k for k in await app.concurrency_keys() if k.key == "gold"]
    assert gold.weight == 3
    # None leaves the weight as it is; a weight is refused outside 1 to 1,000.
    await app.set_concurrency_limit("gold", 10)
    [gold] = [k for k in await app.concurrency_keys() if k.key == "gold"]
    assert (gold.max_running, gold.weight) == (10, 3)
    with pytest.raises(sweepq.InvalidJobOptionError, match="weight must be an int from 1"):
        await app.set_concurrency_limit("gold", 10, weight=0)


async def test_the_earliest_due_job_of_a_key_is_found_across_its_queues_and_priorities(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    now = await tx_app.queries.runtime.clock_now(conn)
    await tx_app.enqueue_many(
        [
            sweepq.JobSpec(
                t, queue=q, priority=p, concurrency_key="k", run_at=now + timedelta(hours=h)
            )
            for q, p, h in [("a", 5, 9), ("a", 0, 4), ("b", 7, 6), ("b", -3, 2), ("c", 0, 8)]
        ],
        conn=conn,
    )
    earliest_of = f"SELECT {ident(tx_app.schema)}.concurrency_key_next_run_at($1)"
    assert await conn.fetchval(earliest_of, "k") == now + timedelta(hours=2)
    assert await conn.fetchval(earliest_of, "nothing") is None
