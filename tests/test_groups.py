"""Closing a job group (`App.close_group`): a closed group takes no more jobs, by any path, and its
`then` is enqueued exactly once, when every job of the group has ended: whoever ends the last job
(a worker, a cancel, a rescue or a deadline), under races with enqueuers and with other firers,
and when the worker recording the last outcomes is killed."""

from __future__ import annotations

import contextlib
import random
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import msgspec
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

import sweepq
from factories import expire_deadline, expire_lease, table_counts
from group_close_worker_proc import ITEM_TASK, THEN_TASK
from group_close_worker_proc import register as register_proc_tasks
from statements import claim, finish
from sweepq.core import groups
from sweepq.core.decision import Decision
from sweepq.core.ident import ident
from sweepq.core.maintenance import Maintenance
from sweepq.core.queries import Conn
from sweepq.core.rows import Claimed, FinishBatch
from waiting import StartLine, wait_until

FAST: dict[str, Any] = {"poll_seconds": 0.02, "listen": False, "prune_every": None}


def register(app: sweepq.App) -> tuple[sweepq.Task, sweepq.Task]:
    @app.task(name="item", max_attempts=1)
    async def item(ctx: sweepq.Context, n: int = 0, fail: bool = False) -> None:
        if fail:
            raise RuntimeError(f"item {n} fails")

    @app.task(name="report", queue="reports")
    async def report(ctx: sweepq.Context, batch: int = 0) -> int:
        return batch

    return item, report


async def group_row(app: sweepq.App, group: str, conn: Conn | None = None) -> dict[str, Any]:
    row = await (conn or app.pool).fetchrow(
        f"SELECT * FROM {ident(app.schema)}.job_groups WHERE name = $1", group
    )
    assert row is not None, f"group {group!r} has no row"
    return dict(row)


async def jobs_of(
    app: sweepq.App, task: str, conn: Conn | None = None, **args: object
) -> list[sweepq.Job]:
    """Every job of `task` (any state) whose args contain `args`, oldest first."""
    ids = await (conn or app.pool).fetch(
        f"SELECT id FROM {ident(app.schema)}.jobs WHERE task = $1 AND args::jsonb @> $2::jsonb"
        " ORDER BY id",
        task,
        msgspec.json.encode(args).decode(),
    )
    found = [await app.get_job(r[0], conn=conn) for r in ids]
    return [j for j in found if j is not None]


async def end_directly(app: sweepq.App, group: str) -> None:
    """End the group's jobs behind the queue's back: no statement of sweepq's, so nothing fires
    (as a worker killed between its outcome and its firing step leaves it)."""
    await app.pool.execute(
        f"UPDATE {ident(app.schema)}.jobs SET state = 'completed', finished_at = now(),"
        " worker_id = NULL, lease_expires_at = NULL WHERE job_group = $1",
        group,
    )


# closing and firing --------------------------------------------------------------------------


async def test_a_closed_group_enqueues_then_once_when_its_last_job_ends(app: sweepq.App) -> None:
    item, report = register(app)
    await app.enqueue_many([sweepq.JobSpec(item, {"n": n}, group="import-42") for n in range(10)])
    then = sweepq.JobSpec(report, {"batch": 42}, priority=3, max_attempts=2)
    closure = await app.close_group("import-42", then=then)
    assert closure == sweepq.GroupClosure("import-42", None, fired=False, already_closed=False)
    async with sweepq.Worker(app, queues=["default", "reports"], concurrency=4, **FAST) as w:
        assert await w.run_until_idle() == 11  # the ten items, then the report they ended
    (job,) = await jobs_of(app, "report")
    assert (job.state, job.result, job.args) == (sweepq.JobState.COMPLETED, 42, {"batch": 42})
    assert (job.queue, job.priority, job.max_attempts, job.group) == ("reports", 3, 2, None)
    row = await group_row(app, "import-42")
    assert row["then_job"] == job.id
    finished = await app.pool.fetchval(
        f"SELECT max(finished_at) FROM {ident(app.schema)}.jobs WHERE job_group = 'import-42'"
    )
    assert finished < row["fired_at"]
    again = await app.close_group("import-42", then=sweepq.JobSpec(report, {"batch": 7}))
    assert again == sweepq.GroupClosure("import-42", job.id, fired=True, already_closed=True)
    assert len(await jobs_of(app, "report")) == 1


async def test_an_empty_group_fires_at_once_inside_the_closing_transaction(
    tx_app: sweepq.App, conn: Conn
) -> None:
    item, report = register(tx_app)
    closure = await tx_app.close_group("nothing-yet", then=sweepq.JobSpec(report), conn=conn)
    assert (closure.fired, closure.already_closed) == (True, False)
    assert closure.then_job is not None
    job = await tx_app.get_job(closure.then_job, conn=conn)
    assert job is not None
    assert (job.task, job.state) == ("report", sweepq.JobState.AVAILABLE)
    # Jobs of a group enqueued earlier in the same transaction are counted: not fired.
    await tx_app.enqueue(item, group="busy", conn=conn)
    busy = await tx_app.close_group("busy", then=sweepq.JobSpec(report), conn=conn)
    assert (busy.fired, busy.then_job) == (False, None)


async def test_closing_without_then_seals_the_group_only(app: sweepq.App) -> None:
    item, _ = register(app)
    await app.enqueue(item, group="sealed")
    closure = await app.close_group("sealed")
    assert (closure.fired, closure.then_job) == (False, None)
    with pytest.raises(sweepq.GroupClosedError):
        await app.enqueue(item, group="sealed")
    async with sweepq.Worker(app, concurrency=2, **FAST) as worker:
        assert await worker.run_until_idle() == 1
    row = await group_row(app, "sealed")
    assert (row["fired_at"] is not None, row["then_job"]) == (True, None)
    assert await app.close_group("sealed") == sweepq.GroupClosure("sealed", None, True, True)
    assert await app.pool.fetchval(f"SELECT count(*) FROM {ident(app.schema)}.jobs") == 1


async def test_closing_a_closed_group_returns_the_earlier_closure_unchanged(
    tx_app: sweepq.App, conn: Conn
) -> None:
    item, report = register(tx_app)
    await tx_app.enqueue(item, group="g", delay=3600, conn=conn)
    first = await tx_app.close_group("g", then=sweepq.JobSpec(report, {"batch": 1}), conn=conn)
    second = await tx_app.close_group("g", then=sweepq.JobSpec(report, {"batch": 2}), conn=conn)
    assert (first.already_closed, second.already_closed) == (False, True)
    assert (second.fired, second.then_job) == (False, None)
    assert await tx_app.close_group("g", conn=conn) == second  # nor does closing it without `then`
    assert await tx_app.cancel_group("g", conn=conn) == 1
    (job,) = await jobs_of(tx_app, "report", conn)
    assert job.args == {"batch": 1}  # the first close's `then`, not the later ones'
    assert await tx_app.close_group("g", conn=conn) == sweepq.GroupClosure("g", job.id, True, True)


async def test_a_reopened_group_takes_jobs_and_fires_again_when_closed_again(
    app: sweepq.App,
) -> None:
    item, report = register(app)
    assert await app.reopen_group("never-closed") is False
    first = await app.close_group("run-1", then=sweepq.JobSpec(report, {"batch": 1}))
    assert first.fired
    assert await app.reopen_group("run-1") is True
    await app.enqueue_many([sweepq.JobSpec(item, {"n": n}, group="run-1") for n in range(3)])
    again = await app.close_group("run-1", then=sweepq.JobSpec(report, {"batch": 2}))
    assert (again.already_closed, again.fired) == (False, False)
    async with sweepq.Worker(app, queues=["default", "reports"], concurrency=2, **FAST) as w:
        await w.run_until_idle()
    reports = await jobs_of(app, "report")
    assert [(j.args, j.state) for j in reports] == [
        ({"batch": 1}, sweepq.JobState.COMPLETED),
        ({"batch": 2}, sweepq.JobState.COMPLETED),
    ]
    assert (await group_row(app, "run-1"))["then_job"] == reports[1].id
    # Reopening a group whose `then` has not fired drops it.
    await app.reopen_group("run-1")
    await app.enqueue(item, group="run-1", delay=3600)
    await app.close_group("run-1", then=sweepq.JobSpec(report, {"batch": 3}))
    assert await app.reopen_group("run-1") is True
    await app.cancel_group("run-1")
    assert await app.fire_closed_groups() == 0
    assert len(await jobs_of(app, "report")) == 2


async def test_then_is_enqueued_from_its_stored_spec_by_a_process_that_lacks_its_task(
    app: sweepq.App, dsn: str
) -> None:
    item, report = register(app)
    await app.enqueue(item, group="g")
    then = sweepq.JobSpec(
        report, {"batch": 5}, delay=3600, deadline=7200, identity_key="report-5", queue="late"
    )
    await app.close_group("g", then=then)
    await end_directly(app, "g")
    stranger = sweepq.App(dsn, schema=app.schema)  # no task registered at all
    async with stranger:
        assert await stranger.fire_closed_groups() == 1
    (job,) = await jobs_of(app, "report")
    row = await group_row(app, "g")
    assert (job.queue, job.identity_key, row["then_job"]) == ("late", "report-5", job.id)
    # The delay and the deadline count from the firing, not from the close.
    assert job.created_at > row["sealed_at"]
    assert job.run_at - job.created_at == timedelta(hours=1)
    assert job.deadline_at is not None
    assert job.deadline_at - job.created_at == timedelta(hours=2)


async def test_a_group_retried_after_it_fired_runs_again_without_a_second_then(
    app: sweepq.App,
) -> None:
    item, report = register(app)
    await app.enqueue_many(
        [sweepq.JobSpec(item, {"n": n, "fail": n == 0}, group="g") for n in range(3)]
    )
    await app.close_group("g", then=sweepq.JobSpec(report))
    async with sweepq.Worker(app, queues=["default", "reports"], concurrency=2, **FAST) as w:
        await w.run_until_idle()
        assert len(await jobs_of(app, "report")) == 1
        assert await app.retry_group_failures("g") == 1
        assert await app.group_outstanding(["g"]) == {"g": 1}
        await w.run_until_idle()
    assert await app.group_counts("g") == sweepq.GroupCounts(completed=2, failed=1)
    assert len(await jobs_of(app, "report")) == 1


async def test_jobs_retried_before_a_group_fires_delay_its_then(app: sweepq.App) -> None:
    item, report = register(app)
    failing = await app.enqueue(item, {"fail": True}, group="g")
    waiting = await app.enqueue(item, group="g", delay=3600)
    await app.close_group("g", then=sweepq.JobSpec(report))
    async with sweepq.Worker(app, concurrency=2, **FAST) as worker:
        await worker.run_until_idle()
        await app.retry(failing.job_id)  # failed, and back: the group is not over
        await app.cancel(waiting.job_id)
        assert await jobs_of(app, "report") == []
        await worker.run_until_idle()  # it fails again: now every job of the group has ended
    (job,) = await jobs_of(app, "report")
    assert (await group_row(app, "g"))["then_job"] == job.id


# who fires ----------------------------------------------------------------------------------


async def test_cancelling_the_last_jobs_of_a_closed_group_fires_it(
    tx_app: sweepq.App, conn: Conn
) -> None:
    item, report = register(tx_app)
    one = await tx_app.enqueue(item, group="a", delay=3600, conn=conn)
    await tx_app.enqueue_many(
        [sweepq.JobSpec(item, group="b", delay=3600) for _ in range(3)], conn=conn
    )
    await tx_app.close_group("a", then=sweepq.JobSpec(report, {"batch": 1}), conn=conn)
    await tx_app.close_group("b", then=sweepq.JobSpec(report, {"batch": 2}), conn=conn)
    await tx_app.cancel(one.job_id, conn=conn)
    assert [j.args for j in await jobs_of(tx_app, "report", conn)] == [{"batch": 1}]
    assert await tx_app.cancel_group("b", conn=conn) == 3
    assert [j.args for j in await jobs_of(tx_app, "report", conn)] == [{"batch": 1}, {"batch": 2}]


async def test_the_leader_fires_groups_whose_last_job_a_rescue_or_a_deadline_failed(
    app: sweepq.App,
) -> None:
    item, report = register(app)
    await app.enqueue(item, group="rescued")
    expired = await app.enqueue(item, group="expired", deadline=60, delay=30)
    await app.enqueue(item, group="direct")
    for group in ("rescued", "expired", "direct"):
        await app.close_group(group, then=sweepq.JobSpec(report, {"batch": len(group)}))
    # The rescued job's worker claimed its only attempt, and its lease lapsed; the other's
    # deadline passed before it was due.
    (claimed,) = await claim(app, 1, lease=30)
    await end_directly(app, "direct")
    await expire_lease(app, claimed.id)
    await expire_deadline(app, expired.job_id)
    leader = Maintenance(app, "leader", interval=0.1, leader_ttl=1.0, prune_every=None)
    leader.rescue_grace = 0.0
    assert await leader.step()
    counts = {g: await app.group_counts(g) for g in ("rescued", "expired", "direct")}
    assert counts["rescued"].failed == counts["expired"].failed == 1
    fired = {g: (await group_row(app, g))["then_job"] for g in counts}
    assert None not in fired.values()
    assert len(await jobs_of(app, "report")) == 3
    assert not await finish(app, claimed)  # the rescued execution is fenced out
    assert await leader.step()
    assert len(await jobs_of(app, "report")) == 3


async def test_a_then_whose_own_group_is_closed_waits_until_it_is_reopened(
    tx_app: sweepq.App, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    item, report = register(tx_app)
    await tx_app.close_group("closed", conn=conn)
    before = await table_counts(tx_app, on=conn)
    into_closed = sweepq.JobSpec(report, group="closed")
    with pytest.raises(sweepq.GroupClosedError, match="'closed'"):
        await tx_app.close_group("child", then=into_closed, conn=conn)
    assert await table_counts(tx_app, on=conn) == before  # nothing sealed: the close is refused
    job = await tx_app.enqueue(item, group="child", conn=conn)
    await tx_app.close_group("child", then=sweepq.JobSpec(report, group="parent"), conn=conn)
    await tx_app.close_group("parent", conn=conn)  # after child's close: its `then` cannot join
    await tx_app.cancel(job.job_id, conn=conn)
    assert "its own group 'parent' is closed" in caplog.text
    assert (await group_row(tx_app, "child", conn))["fired_at"] is None
    await tx_app.reopen_group("parent", conn=conn)
    assert await tx_app.fire_closed_groups(conn=conn) == 1
    (then,) = await jobs_of(tx_app, "report", conn)
    assert then.group == "parent"


async def test_a_close_inside_a_repeatable_read_transaction_is_fired_by_the_leader(
    app: sweepq.App,
) -> None:
    _, report = register(app)
    async with app.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        closure = await app.close_group("rr", then=sweepq.JobSpec(report), conn=conn)
    assert (closure.fired, closure.already_closed) == (False, False)
    assert await app.fire_closed_groups() == 1
    assert len(await jobs_of(app, "report")) == 1


# every enqueue path is refused --------------------------------------------------------------


async def enqueue_sql(app: sweepq.App, group: str) -> None:
    await app.pool.fetchval(
        f"SELECT job_id FROM {app.enqueue_function}('item', '{{}}', $1::jsonb)",
        msgspec.json.encode({"group": group}).decode(),
    )


PATHS: dict[str, Callable[[sweepq.App, str], Awaitable[object]]] = {
    "enqueue": lambda app, g: app.enqueue("item", group=g),
    "enqueue keyed": lambda app, g: app.enqueue("item", group=g, identity_key="k"),
    "enqueue_many insert": lambda app, g: app.enqueue_many(
        [sweepq.JobSpec("item", {"n": n}, group=g, idempotency_key=str(n)) for n in range(3)]
    ),
    "enqueue_many copy": lambda app, g: app.enqueue_many(
        [sweepq.JobSpec("item", {"n": n}, group=g) for n in range(20)]
    ),
    "enqueue_many copy, one job closed": lambda app, g: app.enqueue_many(
        [sweepq.JobSpec("item", {"n": n}, group="open") for n in range(20)]
        + [sweepq.JobSpec("item", group=g)]
    ),
    "sql function": enqueue_sql,
}


@pytest.mark.parametrize("path", list(PATHS))
async def test_every_enqueue_into_a_closed_group_is_refused_and_writes_nothing(
    app: sweepq.App, path: str
) -> None:
    register(app)
    await app.enqueue("item", group="open")  # its row exists: nothing new to write either
    await app.close_group("import-42")
    before = await table_counts(app)
    if path == "sql function":
        with pytest.raises(asyncpg.PostgresError, match="group 'import-42' is closed") as raised:
            await PATHS[path](app, "import-42")
        assert (raised.value.sqlstate, raised.value.detail) == ("55SQ1", "import-42")
    else:
        with pytest.raises(sweepq.GroupClosedError, match="group 'import-42' is closed") as err:
            await PATHS[path](app, "import-42")
        assert err.value.group == "import-42"
        assert "reopen_group('import-42')" in str(err.value)
        assert isinstance(err.value, sweepq.InvalidJobOptionError)
    assert await table_counts(app) == before


async def test_a_closed_group_refuses_an_enqueue_inside_the_callers_transaction(
    tx_app: sweepq.App, conn: Conn
) -> None:
    register(tx_app)
    await tx_app.close_group("g", conn=conn)
    with pytest.raises(sweepq.GroupClosedError):
        async with conn.transaction():  # a savepoint, so that the test's transaction goes on
            await tx_app.enqueue_many([sweepq.JobSpec("item", group="g")] * 16, conn=conn)
    assert await tx_app.group_counts("g", conn=conn) == sweepq.GroupCounts()


# bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("group", "then", "error", "says"),
    [
        ("", None, sweepq.InvalidJobOptionError, "group must be a non-empty string"),
        (42, None, sweepq.InvalidJobOptionError, "group must be a non-empty string"),
        ("x" * 513, None, sweepq.InvalidJobOptionError, "at most 512 characters"),
        ("sweep:7", None, sweepq.InvalidJobOptionError, "kept for sweepq's own jobs"),
        ("g", {"task": "report"}, sweepq.InvalidJobOptionError, "then must be a sweepq.JobSpec"),
        ("g", sweepq.JobSpec("nope"), sweepq.UnknownTaskError, "no task named 'nope'"),
        ("g", sweepq.JobSpec("report", {"batch": "x"}), sweepq.InvalidArgumentsError, "batch"),
        ("g", sweepq.JobSpec("report", priority=10**6), sweepq.InvalidJobOptionError, "priority"),
        ("g", sweepq.JobSpec("report", group="g"), sweepq.InvalidJobOptionError, "it follows"),
        ("g", sweepq.JobSpec("report", group="sweep:1"), sweepq.InvalidJobOptionError, "kept"),
    ],
)
async def test_a_close_with_bad_input_is_refused_and_writes_nothing(
    tx_app: sweepq.App, conn: Conn, group: Any, then: Any, error: type[Exception], says: str
) -> None:
    register(tx_app)
    before = await table_counts(tx_app, on=conn)
    with pytest.raises(error, match=says):
        await tx_app.close_group(group, then=then, conn=conn)
    assert await table_counts(tx_app, on=conn) == before


# retention -----------------------------------------------------------------------------------


async def test_retention_removes_old_group_rows_but_those_waiting_to_fire(app: sweepq.App) -> None:
    item, report = register(app)
    await app.enqueue(item, group="open-done")
    await app.enqueue(item, group="open-live", delay=3600)
    await app.enqueue(item, group="waiting", delay=3600)
    await app.close_group("waiting", then=sweepq.JobSpec(report))
    await app.close_group("fired", then=sweepq.JobSpec(report, queue="elsewhere"))
    async with sweepq.Worker(app, concurrency=2, **FAST) as worker:
        await worker.run_until_idle()
    await app.cancel_group("elsewhere")  # nothing: the report is on its own queue
    schema = ident(app.schema)
    await app.pool.execute(
        f"UPDATE {schema}.job_groups SET created_at = now() - interval '2 days',"
        " fired_at = fired_at - interval '2 days'"
    )
    await app.pool.execute(
        f"UPDATE {schema}.jobs SET finished_at = now() - interval '2 days'"
        " WHERE finished_at IS NOT NULL"
    )
    removed = await app.prune(older_than=timedelta(days=1), batch_size=1)
    left = {r[0] for r in await app.pool.fetch(f"SELECT name FROM {schema}.job_groups")}
    # Jobs of open-live and waiting are still there; waiting is closed and has not fired.
    assert left == {"open-live", "waiting"}
    assert removed["job_groups"] == 2
    # A closed group whose row retention removed takes jobs again.
    await app.enqueue(item, group="fired")


# races -----------------------------------------------------------------------------------------


async def sql_function_job(app: sweepq.App, conn: Conn, group: str) -> list[int]:
    job_id = await conn.fetchval(
        f"SELECT job_id FROM {app.enqueue_function}('item', '{{}}', $1::jsonb)",
        msgspec.json.encode({"group": group}).decode(),
    )
    return [int(job_id)]


async def _ids(call: Awaitable[Any]) -> list[int]:
    done = await call
    return [e.job_id for e in (done if isinstance(done, list) else [done])]


def racing_enqueue(
    app: sweepq.App, conn: Conn, group: str, path: int, n: int
) -> Awaitable[list[int]]:
    """One enqueue into `group` on `conn`, by path `path` (each racer keeps to one)."""
    key = f"{group}-{path}-{n}"
    match path % 5:
        case 0:
            return _ids(app.enqueue("item", {"n": n}, group=group, conn=conn))
        case 1:
            return _ids(app.enqueue("item", {"n": n}, group=group, identity_key=key, conn=conn))
        case 2:
            specs = [
                sweepq.JobSpec("item", {"n": n}, group=group, idempotency_key=f"{key}-{k}")
                for k in range(3)
            ]
            return _ids(app.enqueue_many(specs, conn=conn))
        case 3:
            many = [sweepq.JobSpec("item", {"n": n}, group=group)] * 16
            return _ids(app.enqueue_many(many, conn=conn))
        case _:
            return sql_function_job(app, conn, group)


def refused(exc: BaseException) -> bool:
    if isinstance(exc, sweepq.GroupClosedError):
        return True
    return isinstance(exc, asyncpg.PostgresError) and exc.sqlstate == "55SQ1"


async def test_enqueuers_racing_a_close_never_get_a_job_in_after_it_fires(dsn: str) -> None:
    """Rounds of enqueuers, each committing its jobs a moment after inserting them, while a
    worker runs them as they come and the group is closed: a close that did not wait for the
    enqueues in flight would fire while one of them is still to commit its jobs."""
    rounds, racers = 25, 8
    rng = random.Random(7)
    app = sweepq.App(dsn, schema=f"t_{uuid.uuid4().hex[:12]}", pool_max_size=racers + 6)
    register(app)
    async with app:
        await app.migrate()
        try:
            async with sweepq.Worker(
                app, queues=["default"], concurrency=8, poll_seconds=0.01,
                maintenance_seconds=0.05, leader_ttl_seconds=1.0, prune_every=None,
            ) as worker, anyio.create_task_group() as tg:  # fmt: skip
                tg.start_soon(worker.run)
                for r in range(rounds):
                    await race_one_round(app, f"race-{r}", r, racers, rng)
                worker.stop()
        finally:
            await app.pool.execute(f"DROP SCHEMA {ident(app.schema)} CASCADE")


async def race_one_round(
    app: sweepq.App, group: str, r: int, racers: int, rng: random.Random
) -> None:
    got: list[int] = []
    refusals = 0

    async def racer(path: int) -> None:
        nonlocal refusals
        for n in range(1_000):
            try:
                async with app.pool.acquire() as conn, conn.transaction():
                    ids = await racing_enqueue(app, conn, group, path, n)
                    await anyio.sleep(0.02 + rng.random() * 0.04)  # inserted, not committed
                got.extend(ids)
            except Exception as exc:
                if not refused(exc):
                    raise
                refusals += 1
                return
            await anyio.sleep(rng.random() * 0.01)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for path in range(racers):
                tg.start_soon(racer, path)
            await anyio.sleep(0.01 + rng.random() * 0.04)
            await app.close_group(group, then=sweepq.JobSpec("report", {"batch": r}))
        await wait_until(lambda: _fired(app, group), what=f"group {group} fires", every=0.01)
    schema = ident(app.schema)
    row = await group_row(app, group)
    members = await app.pool.fetch(
        f"SELECT id, finished_at FROM {schema}.jobs WHERE job_group = $1", group
    )
    assert refusals == racers
    # Every job in the group is one an enqueue returned: a refused call wrote nothing.
    assert sorted(m["id"] for m in members) == sorted(got)
    # Each had ended before the group fired: none got in later, none was outstanding.
    late = [m["id"] for m in members if not m["finished_at"] or m["finished_at"] >= row["fired_at"]]
    assert late == [], (r, len(members))
    thens = await jobs_of(app, "report", batch=r)
    assert [j.id for j in thens] == [row["then_job"]]


async def _fired(app: sweepq.App, group: str) -> bool:
    return (await group_row(app, group))["fired_at"] is not None


async def at_once(calls: list[Callable[[], Awaitable[None]]]) -> None:
    """Start every call, then let them all go at the same instant."""
    line = StartLine(len(calls))

    async def one(call: Callable[[], Awaitable[None]]) -> None:
        await line.reached()
        await call()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for call in calls:
                tg.start_soon(one, call)
            await line.release()


def firer(
    app: sweepq.App, conn: asyncpg.Connection, group: str, fired: list[dict[str, Any]]
) -> Callable[[], Awaitable[None]]:
    async def fire() -> None:
        fired.append(await groups.fire_now(app.queries, conn, [group]))

    return fire


async def test_many_firers_at_once_enqueue_one_then_job(app: sweepq.App, dsn: str) -> None:
    item, report = register(app)
    conns = [await asyncpg.connect(dsn) for _ in range(12)]
    try:
        for r in range(10):
            group = f"g-{r}"
            await app.enqueue_many([sweepq.JobSpec(item, group=group) for _ in range(3)])
            await app.close_group(group, then=sweepq.JobSpec(report, {"batch": r}))
            await end_directly(app, group)
            fired: list[dict[str, Any]] = []
            await at_once([firer(app, conn, group, fired) for conn in conns])
            assert len([f for f in fired if f]) == 1
            assert len(await jobs_of(app, "report", batch=r)) == 1
    finally:
        for conn in conns:
            await conn.close()


async def test_many_workers_recording_the_last_jobs_at_once_fire_once(
    app: sweepq.App, dsn: str
) -> None:
    item, report = register(app)
    workers = 8
    conns = [await asyncpg.connect(dsn) for _ in range(workers)]

    def recorder(conn: asyncpg.Connection, job: Claimed, worker: str) -> Callable[[], Any]:
        async def record() -> None:
            # What a worker's flusher does: record the outcome, then fire what it names.
            out = FinishBatch()
            out.add(job.token, Decision(state="completed"))
            written = await app.queries.job_finish_many(conn, worker, out)
            assert written.tokens == {job.token}
            await groups.fire_now(app.queries, conn, written.sealed)

        return record

    try:
        for r in range(10):
            group = f"g-{r}"
            await app.enqueue_many([sweepq.JobSpec(item, group=group) for _ in range(workers)])
            await app.close_group(group, then=sweepq.JobSpec(report, {"batch": r}))
            claimed = [(await claim(app, 1, worker=f"w{n}"))[0] for n in range(workers)]
            await at_once(
                [
                    recorder(c, j, f"w{n}")
                    for n, (c, j) in enumerate(zip(conns, claimed, strict=True))
                ]
            )
            assert (await group_row(app, group))["fired_at"] is not None
            assert len(await jobs_of(app, "report", batch=r)) == 1
    finally:
        for conn in conns:
            await conn.close()


# a worker killed while it ends a group ------------------------------------------------------

PROC = Path(__file__).with_name("group_close_worker_proc.py")


@dataclass
class ProcWorker:
    process: Process
    queue: str
    stderr: Path


async def spawn(dsn: str, schema: str, queue: str, folder: Path) -> ProcWorker:
    stderr = folder / f"{queue}.stderr"
    with stderr.open("wb") as sink:
        process = await anyio.open_process(
            [sys.executable, str(PROC), dsn, schema, queue], stderr=sink
        )
    assert process.stdout is not None
    stdout = BufferedByteReceiveStream(process.stdout)
    try:
        with anyio.fail_after(30):
            line = await stdout.receive_until(b"\n", 500)
    except BaseException:
        process.kill()
        raise
    assert line.split()[0] == b"ready", (line, stderr.read_text())
    return ProcWorker(process, queue, stderr)


@contextlib.asynccontextmanager
async def killed_afterwards(started: list[ProcWorker]) -> AsyncIterator[None]:
    try:
        yield
    finally:
        with anyio.CancelScope(shield=True):
            for worker in started:
                if worker.process.returncode is None:
                    worker.process.kill()
                await worker.process.wait()
                await worker.process.aclose()


@pytest.mark.fault
async def test_a_worker_killed_while_it_ends_a_group_leaves_exactly_one_then_job(
    app: sweepq.App, dsn: str, tmp_path: Path
) -> None:
    """20 times: a worker process runs a small closed group and is killed (SIGKILL) as its last
    jobs end: before, during or after it records them and runs the firing step. The test then
    rescues the jobs it held, runs what is left and runs the leader's round: one `then` each."""
    reps, size = 20, 6
    rng = random.Random(20)
    register_proc_tasks(app)
    schema = ident(app.schema)
    await app.pool.execute(
        f"CREATE UNLOGGED TABLE {schema}.handled (n bigserial PRIMARY KEY, job_id bigint NOT NULL)"
    )
    # The test's leader holds the role: the killed workers never lead.
    leader = Maintenance(app, "test-leader", interval=0.1, leader_ttl=600.0, prune_every=None)
    leader.rescue_grace = 0.0
    assert await leader.step()
    started: list[ProcWorker] = []
    kills_after: list[int] = []
    async with killed_afterwards(started):
        ahead = [await spawn(dsn, app.schema, f"q{n}", tmp_path) for n in range(2)]
        started.extend(ahead)
        for rep in range(reps):
            worker = ahead.pop(0)
            if rep + 2 < reps:
                started.append(nxt := await spawn(dsn, app.schema, f"q{rep + 2}", tmp_path))
                ahead.append(nxt)
            group = f"kill-{rep}"
            jobs = await app.enqueue_many(
                [sweepq.JobSpec(ITEM_TASK, {"n": n}, group=group, queue=worker.queue)
                 for n in range(size)]
            )  # fmt: skip
            ids = [e.job_id for e in jobs]
            await app.close_group(
                group, then=sweepq.JobSpec(THEN_TASK, {"rep": rep}, queue="reports")
            )
            threshold = rng.randint(size - 2, size)
            with anyio.fail_after(20):
                while (
                    await app.pool.fetchval(
                        f"SELECT count(DISTINCT job_id) FROM {schema}.handled"
                        " WHERE job_id = ANY($1::bigint[])",
                        ids,
                    )
                    < threshold
                ):
                    await anyio.sleep(0.002)
            await anyio.sleep(rng.random() * 0.03)
            worker.process.send_signal(signal.SIGKILL)
            assert await worker.process.wait() == -signal.SIGKILL
            done = await app.pool.fetchval(
                f"SELECT count(*) FROM {schema}.jobs WHERE job_group = $1 AND state = 'completed'",
                group,
            )
            kills_after.append(int(done))
            # Its leases lapse; the rescue gives its jobs back, a worker runs them.
            with anyio.fail_after(20):
                while await app.group_counts(group) != sweepq.GroupCounts(completed=size):
                    await app.rescue_lapsed(grace_seconds=0)
                    async with sweepq.Worker(
                        app, queues=[worker.queue], concurrency=4, **FAST
                    ) as survivor:
                        await survivor.run_until_idle()
                    await anyio.sleep(0.05)
            # A round skips a group row still locked by the killed worker's firing step (its
            # backend may not have seen the connection drop yet): a later round fires it.
            with anyio.fail_after(10):
                while (row := await group_row(app, group))["fired_at"] is None:
                    assert await leader.step()
                    await anyio.sleep(0.02)
            thens = await jobs_of(app, THEN_TASK, rep=rep)
            assert [j.id for j in thens] == [row["then_job"]], (rep, kills_after[-1])
    # The kills landed at several points of the group's end (how many jobs were recorded).
    assert len(set(kills_after)) >= 2, kills_after
