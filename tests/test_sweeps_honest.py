"""Sweeps that finish honestly: no item is dropped, the failure budget fits real data, ended
runs resume from their cursor, progress agrees with its counts, and a run says what it waits
for (a worker, a throttle check)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any, ClassVar

import anyio
import msgspec
import pytest
from typer.testing import CliRunner, Result

import sweepq
import sweepq.throttle
from factories import create_items, handled_items
from sweep_worker_proc import WORKER_OPTIONS, items_sweep, run_until_ended, wait_for_run
from sweepq.cli import cli
from sweepq.core.ident import ident
from sweepq.sweeps.app import App
from sweepq.testing import step_sweep
from waiting import wait_until

_runner_lock = anyio.Lock()


async def invoke(*args: str) -> Result:
    runner = CliRunner(env={"SWEEPQ_DSN": None, "DATABASE_URL": None, "COLUMNS": "120"})
    async with _runner_lock:
        return await anyio.to_thread.run_sync(lambda: runner.invoke(cli, list(args)))


def db(app: sweepq.App) -> list[str]:
    return ["--dsn", app.dsn, "--schema", app.schema]


# The newcomer's sweep: welcome every user, 1 % of whom break the handler until it is fixed.


class Welcome(sweepq.TableSweep):
    """Welcomes each user (sets welcomed_at) once; users whose profile is `broken` raise until
    the fix is deployed (`fixed`). Everything else is the defaults a newcomer keeps."""

    name = "welcome-users"
    key: ClassVar[tuple[str, ...]] = ("id",)
    fixed: ClassVar[bool] = False

    async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
        assert self.app is not None
        if item["broken"] and not type(self).fixed:
            raise ValueError(f"user {item['id']}: profile does not parse")
        await self.app.pool.execute(
            f"UPDATE {ident(self.app.schema)}.users SET welcomed_at = now(), "
            "welcomes = welcomes + 1 WHERE id = $1",
            item["id"],
        )


def welcome_sweep(app: App, **settings: Any) -> type[Welcome]:
    """The Welcome sweep over this test's users table, with other settings."""
    sweep: type[Welcome] = type("WelcomeUsers", (Welcome,), {"table": f"{app.schema}.users"})
    for attribute, value in settings.items():
        setattr(sweep, attribute, value)
    return sweep


async def create_users(app: App, count: int, *, broken_every: int) -> None:
    await app.pool.execute(
        f"""CREATE TABLE {ident(app.schema)}.users (
                id bigint PRIMARY KEY, broken boolean NOT NULL,
                welcomed_at timestamptz, welcomes integer NOT NULL DEFAULT 0);
            INSERT INTO {ident(app.schema)}.users (id, broken)
            SELECT i, i % {broken_every} = 0 FROM generate_series(1, {count}) AS i"""
    )


async def undone_users(app: App) -> int:
    return int(
        await app.pool.fetchval(
            f"SELECT count(*) FROM {ident(app.schema)}.users WHERE welcomed_at IS NULL"
        )
    )


async def test_the_newcomers_sweep_ends_with_every_row_done_after_a_fix_and_one_command(
    app: App,
) -> None:
    await create_users(app, 10_000, broken_every=100)  # 100 users (1 %) break the handler
    sweep = welcome_sweep(app)
    app.register_sweep(sweep)
    started = await app.start_sweep("welcome-users")

    run = await run_until_ended(app, started.run_id, concurrency=40, timeout=120)

    # 1 % is far under the default budget (20 % of the recent items): the walk reached the
    # end, and every failing user waited out its retries instead of being cancelled. The run
    # is not "completed": 100 users are undone, and it says so, with the one command to run.
    assert (run.state, run.walked) == (sweepq.SweepState.FAILED, True)
    assert (run.enqueued, run.completed, run.failed, run.cancelled) == (10_000, 9_900, 100, 0)
    assert run.failure == (
        "the walk reached the end, but of its 10,000 items 100 failed. Fix the cause (see "
        f"`sweepq sweep failures {run.id}`), then `sweepq sweep retry-failed {run.id}` runs "
        "them again"
    )
    before = await invoke("sweep", "status", str(run.id), *db(app))
    assert "9,900/10,000  99%  failed" in before.stdout, before.stdout
    assert "failed 100" in before.stdout
    print("\n--- before the fix ---\n" + before.stdout)
    listed = msgspec.json.decode(
        (
            await invoke("sweep", "failures", str(run.id), "--limit", "1000", *db(app), "--json")
        ).stdout
    )
    assert len(listed) == 100
    assert {f["state"] for f in listed} == {"failed"}
    assert await undone_users(app) == 100

    welcomes = f"SELECT id, welcomes FROM {ident(app.schema)}.users WHERE NOT broken ORDER BY id"
    done_before = [tuple(r) for r in await app.pool.fetch(welcomes)]
    sweep.fixed = True  # the fix is deployed
    retried = await invoke("sweep", "retry-failed", str(run.id), *db(app))
    assert f"retrying 100 failed or cancelled items of run {run.id}" in retried.stdout
    run = await run_until_ended(app, run.id, concurrency=40)

    assert (run.state, run.failure) == (sweepq.SweepState.COMPLETED, None)
    assert (run.enqueued, run.completed, run.failed, run.cancelled) == (10_000, 10_000, 0, 0)
    assert (run.percent, run.ends) == (100.0, 2)
    after = await invoke("sweep", "status", str(run.id), *db(app))
    assert "10,000/10,000  100%  completed" in after.stdout, after.stdout
    print("--- after the fix and `sweepq sweep retry-failed` ---\n" + after.stdout)
    assert await undone_users(app) == 0
    # The retry ran the 100 failed users and nothing else: every other user was welcomed as
    # often as before it (once, or more where a lapsed lease ran a leaf again).
    assert [tuple(r) for r in await app.pool.fetch(welcomes)] == done_before
    broken = f"SELECT count(*) FROM {ident(app.schema)}.users WHERE broken AND welcomes = 1"
    assert await app.pool.fetchval(broken) == 100


async def test_a_handler_that_fails_for_everyone_stops_the_walk_after_the_sample(
    app: App,
) -> None:
    await create_users(app, 5_000, broken_every=1)
    sweep = welcome_sweep(app, page_size=100, window=1_000, max_attempts=1)
    app.register_sweep(sweep)
    started = await app.start_sweep("welcome-users")

    run = await run_until_ended(app, started.run_id)

    assert (run.state, run.walked) == (sweepq.SweepState.FAILED, False)
    assert run.failure is not None
    assert " finished items failed (100%, over max_failure_rate=0.2); the walk stopped at " in (
        run.failure
    )
    assert run.failure.endswith(
        f"then `sweepq sweep resume {run.id}` runs the failed and cancelled items again and "
        "walks on from there"
    )
    # It stopped once the sample was in: far from the 5,000, at most a window past it.
    assert run.failed >= sweep.failure_sample
    assert run.enqueued <= sweep.failure_sample + sweep.window + sweep.page_size
    assert run.completed + run.failed + run.cancelled == run.enqueued
    # The items it had in flight were cancelled, and they are reachable.
    undone = await app.sweep_failures(run.id, limit=10_000)
    assert Counter(f.state for f in undone) == Counter(failed=run.failed, cancelled=run.cancelled)


async def test_a_failed_run_resumes_from_its_cursor_and_no_item_runs_twice(app: App) -> None:
    await create_users(app, 3_000, broken_every=1)
    sweep = welcome_sweep(app, page_size=100, window=400, max_attempts=1)
    app.register_sweep(sweep)
    started = await app.start_sweep("welcome-users")
    stopped = await run_until_ended(app, started.run_id)
    assert (stopped.state, stopped.walked) == (sweepq.SweepState.FAILED, False)
    assert stopped.enqueued < 3_000
    welcomed_before = 3_000 - await undone_users(app)

    sweep.fixed = True
    resumed = await invoke("sweep", "resume", str(stopped.id), *db(app))
    assert resumed.exit_code == 0, resumed.output
    assert f"run {stopped.id} of sweep 'welcome-users' is running" in resumed.stdout
    again = await app.sweep_status(stopped.id)
    assert again is not None
    # The same run, its counters carried, its cursor where it stopped, a fresh budget.
    assert (again.state, again.cursor, again.enqueued) == (
        "running", stopped.cursor, stopped.enqueued,
    )  # fmt: skip
    run = await run_until_ended(app, stopped.id)

    assert (run.state, run.walked, run.ends) == (sweepq.SweepState.COMPLETED, True, 2)
    assert (run.enqueued, run.completed, run.failed, run.cancelled) == (3_000, 3_000, 0, 0)
    assert await undone_users(app) == 0
    counts = await app.pool.fetch(
        f"SELECT welcomes, count(*) FROM {ident(app.schema)}.users GROUP BY welcomes"
    )
    assert {r[0]: r[1] for r in counts} == {1: 3_000}  # 0 items ran twice
    assert welcomed_before == 0  # every item failed before the fix: none was done twice


async def test_a_cancelled_item_retried_by_hand_moves_its_ended_runs_counters(app: App) -> None:
    await create_items(app, 60)
    app.register_sweep(items_sweep(app.schema, page_size=20, window=40))
    started = await app.start_sweep("items", {"delay": 0.05})
    async with (
        sweepq.Worker(app, concurrency=4, **WORKER_OPTIONS) as worker,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run)
        await wait_for_run(app, started.run_id, lambda r: r.links >= 1 and r.completed >= 2)
        cancelled = await app.cancel_sweep(started.run_id)
        worker.stop()
    assert cancelled is not None
    assert cancelled.cancelled > 0
    (item, *_) = [f for f in await app.sweep_failures(cancelled.id) if f.state == "cancelled"]

    shown = await invoke("jobs", "retry", str(item.job_id), *db(app))  # by hand, as a job
    assert shown.exit_code == 0, shown.output
    reopened = await app.sweep_status(cancelled.id)
    assert reopened is not None
    assert (reopened.state, reopened.cancelled) == ("running", cancelled.cancelled - 1)
    run = await run_until_ended(app, cancelled.id)

    # The run ends as it was (its walk was cancelled), its counters recounted exactly.
    assert run.state is sweepq.SweepState.CANCELLED
    assert (run.completed, run.cancelled) == (cancelled.completed + 1, cancelled.cancelled - 1)
    assert run.enqueued == cancelled.enqueued
    assert run.completed + run.failed + run.cancelled == run.enqueued


async def test_a_paused_runs_percentage_agrees_with_its_count(app: App) -> None:
    await create_items(app, 1_000)
    app.register_sweep(items_sweep(app.schema, page_size=50, window=400))
    started = await app.start_sweep("items", {"delay": 0.005})
    async with (
        sweepq.Worker(app, concurrency=20, **WORKER_OPTIONS) as worker,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run)
        await wait_for_run(app, started.run_id, lambda r: r.links >= 3)
        await app.pause_sweep(started.run_id)
        # The leaves already enqueued finish while the run is paused: the count moves on, and
        # the percentage with it.
        paused = await wait_for_run(app, started.run_id, lambda r: r.outstanding == 0)
        worker.stop()
    assert paused.state is sweepq.SweepState.PAUSED
    assert paused.total == 1_000
    assert 0 < paused.done < 1_000
    assert paused.percent == round(paused.done / 1_000 * 100, 1)
    shown = await invoke("sweep", "status", str(paused.id), *db(app))
    whole = paused.done * 100 // 1_000
    assert f"{paused.done:,}/1,000  {whole}%  paused" in shown.stdout, shown.stdout


async def test_a_run_no_worker_serves_says_so(app: App) -> None:
    await create_items(app, 10)
    app.register_sweep(items_sweep(app.schema))
    started = await app.start_sweep("items")

    fresh = await app.sweep_status(started.run_id)
    assert fresh is not None
    assert fresh.hint is None  # a worker may take it any moment
    run = await wait_for_run(app, started.run_id, lambda r: r.hint is not None, timeout=30)
    assert run.hint is not None
    assert run.hint.startswith("no worker is serving queue 'default': the run's link has waited")
    shown = await invoke("sweep", "status", str(run.id), *db(app))
    assert "no worker is serving queue 'default'" in shown.stdout, shown.stdout
    listed = await invoke("sweep", "status", *db(app))
    assert "no worker" in listed.stdout, listed.stdout  # the list says it under the state

    run = await run_until_ended(app, started.run_id)
    assert (run.state, run.hint) == (sweepq.SweepState.COMPLETED, None)


async def test_a_run_whose_queue_is_paused_says_so_at_once_and_goes_on_when_resumed(
    app: App,
) -> None:
    await create_items(app, 10)
    app.register_sweep(items_sweep(app.schema))
    await app.pause_queue("default", reason="deploy")
    started = await app.start_sweep("items")
    async with sweepq.Worker(app, concurrency=4, **WORKER_OPTIONS) as worker:
        assert await worker.run_until_idle() == 0  # the link waits in the paused queue
    run = await app.sweep_status(started.run_id)
    assert run is not None
    assert (
        run.hint == "queue 'default' is paused: the run waits until `sweepq queues resume default`"
    )
    listed = await invoke("sweep", "status", *db(app))
    assert "queue paused" in listed.stdout, listed.stdout
    draining = await step_sweep(app, started.run_id)  # its leaves wait in the paused queue
    assert draining.outstanding > 0
    assert draining.queue_paused
    assert draining.hint is not None
    assert draining.hint.startswith("queue 'default' is paused")
    await app.resume_queue("default")
    run = await run_until_ended(app, started.run_id)
    assert (run.state, run.completed, run.hint) == (sweepq.SweepState.COMPLETED, 10, None)
    assert not run.queue_paused


async def _at_least(count: int, wanted: int) -> bool:
    return count >= wanted


class Health:
    """A throttle check the test turns on and off: while `unwell`, it asks for a wait."""

    def __init__(self) -> None:
        self.unwell = False
        self.calls = 0

    async def __call__(self, conn: Any) -> timedelta | None:
        self.calls += 1
        assert await conn.fetchval("SELECT 1") == 1  # it is given a connection to ask
        if not self.unwell:
            return None
        return sweepq.throttle.Wait(0.3, "replica lag 7.2 s > 5 s")

    def __repr__(self) -> str:
        return "health()"


async def test_a_throttled_run_waits_without_writing_its_run_or_its_leaves(app: App) -> None:
    await create_items(app, 400)
    health = Health()
    app.register_sweep(items_sweep(app.schema, page_size=50, window=100, throttle=(health,)))
    heard: list[sweepq.events.Event] = []
    app.observe(heard.append)
    started = await app.start_sweep("items")
    rows = f"""SELECT (SELECT xmin::text FROM {ident(app.schema)}.sweep_runs WHERE id = $1),
                      (SELECT string_agg(xmin::text, ',' ORDER BY id) FROM {ident(app.schema)}.jobs
                       WHERE job_group = 'sweep:' || $1)"""
    async with (
        sweepq.Worker(app, concurrency=10, **WORKER_OPTIONS) as worker,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run)
        await wait_for_run(app, started.run_id, lambda r: r.links >= 2)
        health.unwell = True
        # Once the leaves enqueued so far are done, nothing is written while it is throttled.
        throttled = await wait_for_run(
            app, started.run_id, lambda r: r.throttled is not None and r.outstanding == 0
        )
        assert throttled.hint is not None
        assert throttled.hint.startswith("throttled: replica lag 7.2 s > 5 s")
        shown = await invoke("sweep", "status", str(throttled.id), *db(app))
        assert "throttled: replica lag 7.2 s > 5 s" in shown.stdout, shown.stdout
        # Throttled at every look, the link's checks again (due, running) included.
        for _ in range(30):
            look = await app.sweep_status(started.run_id)
            assert look is not None
            assert look.throttled == "replica lag 7.2 s > 5 s", look
            await anyio.sleep(0.03)
        calls, written = health.calls, await app.pool.fetchrow(rows, started.run_id)
        # It looks again, and again, and writes nothing meanwhile.
        await wait_until(lambda: _at_least(health.calls, calls + 3), what="three more checks")
        assert await app.pool.fetchrow(rows, started.run_id) == written
        assert (await app.sweep_status(started.run_id)).enqueued == throttled.enqueued  # type: ignore[union-attr]
        health.unwell = False
        run = await wait_for_run(app, started.run_id, lambda r: r.ended)
        worker.stop()

    assert (run.state, run.completed, run.throttled) == (sweepq.SweepState.COMPLETED, 400, None)
    waits = [e for e in heard if isinstance(e, sweepq.events.SweepThrottled)]
    assert waits
    assert {(e.run_id, e.sweep, e.reason, e.seconds) for e in waits} == {
        (run.id, "items", "replica lag 7.2 s > 5 s", 0.3)
    }
    assert sorted(set(await handled_items(app))) == list(range(1, 401))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_failure_rate": 0}, "max_failure_rate must be a fraction in (0, 1]"),
        ({"max_failure_rate": 1.5}, "max_failure_rate must be a fraction in (0, 1]"),
        ({"failure_sample": 0}, "failure_sample must be an int >= 1"),
        ({"max_failures": -1}, "max_failures must be an int >= 0"),
        ({"throttle": "replica_lag"}, "throttle must be a tuple of checks"),
        ({"throttle": (5,)}, "each throttle check must be an `async def check(conn)`"),
    ],
)
def test_budget_and_throttle_settings_that_cannot_work_are_refused(
    settings: dict[str, Any], message: str
) -> None:
    sweep = items_sweep("s", **settings)
    with pytest.raises(
        sweepq.InvalidSweepError,
        match=message.replace("(", r"\(")
        .replace(")", r"\)")
        .replace("[", r"\[")
        .replace("]", r"\]"),
    ):
        sweepq.App("postgresql://localhost/x").register_sweep(sweep)


async def test_many_runs_on_few_slots_all_end_their_links_give_their_slots_to_leaves(
    app: App,
) -> None:
    """Links are claimed before leaves; a waiting link hands its slot to its run's leaves when
    its worker has none free, so that 20 runs on a worker of 4 slots end instead of their links
    holding every slot."""
    await create_items(app, 10)
    app.register_sweep(items_sweep(app.schema, page_size=5, window=10))
    runs = [(await app.start_sweep("items", {"n": n})).run_id for n in range(20)]
    async with (
        sweepq.Worker(app, concurrency=4, **WORKER_OPTIONS) as worker,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run)
        for run_id in runs:
            await wait_for_run(app, run_id, lambda r: r.ended, timeout=120)
        worker.stop()
    ended = await app.list_sweep_runs(limit=100)
    assert {(r.state, r.completed) for r in ended} == {(sweepq.SweepState.COMPLETED, 10)}
