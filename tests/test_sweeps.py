"""Sweep runs end to end: fan-out exactly once per item, single flight, failures, faults of the
walk, backpressure, pause/resume/cancel, progress and retention. Tests that run a worker are on
the committed tier; those that only start and steer runs, on the rolled-back one."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any, ClassVar

import anyio
import pytest

import sweepq
from factories import count_jobs, count_rows, create_items, handled_items, key_counts
from sweep_worker_proc import (
    WORKER_OPTIONS,
    ItemsSweep,
    items_sweep,
    run_until_ended,
    sweeps_app,
    wait_for_run,
)
from sweepq.core.ident import ident
from sweepq.core.queries import Conn
from sweepq.sweeps.app import App
from waiting import wait_until


@pytest.fixture
async def app(dsn: str) -> AsyncIterator[App]:
    """A fresh schema with the core's and the sweeps' tables, dropped afterwards."""
    async with sweeps_app(dsn) as fresh:
        yield fresh


async def _none_live(app: App, *scopes: str) -> bool:
    """Whether no job of `scopes` is available or running."""
    for scope in scopes:
        if await count_jobs(app, "available", "running", scope=scope):
            return False
    return True


async def test_a_table_sweep_over_10000_rows_fans_out_each_row_once_and_completes(
    app: App,
) -> None:
    await create_items(app, 10_000)
    seen: list[int] = []

    class Recorded(ItemsSweep):
        table = f"{app.schema}.items"

        async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
            seen.append(item["id"])

    app.register_sweep(Recorded)
    started = await app.start_sweep("items")
    assert started.outcome == "started"

    run = await run_until_ended(app, started.run_id, concurrency=20)

    assert run.state is sweepq.SweepState.COMPLETED
    assert (run.enqueued, run.completed, run.failed, run.cancelled) == (10_000, 10_000, 0, 0)
    assert run.outstanding == 0
    assert run.failure is None
    # 20 full pages, then a link that finds nothing more and drains the run.
    assert run.links == 21
    assert run.cursor is not None
    assert run.cursor[-1] == 10_000
    keys = await key_counts(app, f"sweep:{started.run_id}")
    assert len(keys) == 10_000
    assert set(keys.values()) == {1}
    assert set(seen) == set(range(1, 10_001))


async def test_starting_a_sweep_that_is_active_returns_the_active_run(
    tx_app: App, conn: Conn
) -> None:
    await create_items(tx_app, 10, on=conn)
    tx_app.register_sweep(items_sweep(tx_app.schema))

    first = await tx_app.start_sweep("items", {"batch": "a"}, conn=conn)
    again = await tx_app.start_sweep("items", {"batch": "a"}, conn=conn)
    other = await tx_app.start_sweep("items", {"batch": "b"}, conn=conn)

    assert first.outcome == "started"
    assert again == sweepq.SweepStarted(first.run_id, "already_running")
    assert other.outcome == "started"
    assert other.run_id != first.run_id
    # Only the first start enqueued a root link.
    link_scope = f"sweep-link:{first.run_id}"
    assert await count_jobs(tx_app, "available", scope=link_scope, on=conn) == 1

    cancelled = await tx_app.cancel_sweep(first.run_id, conn=conn)
    assert cancelled is not None
    assert cancelled.state is sweepq.SweepState.CANCELLED
    after_end = await tx_app.start_sweep("items", {"batch": "a"}, conn=conn)
    assert after_end.outcome == "started"
    assert after_end.run_id not in (first.run_id, other.run_id)


async def test_a_start_inside_a_transaction_that_rolls_back_leaves_nothing(app: App) -> None:
    await create_items(app, 10)
    app.register_sweep(items_sweep(app.schema))

    async with app.pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        started = await app.start_sweep("items", conn=conn)
        inside = await app.sweep_status(started.run_id, conn=conn)
        assert inside is not None
        assert inside.state is sweepq.SweepState.RUNNING
        await tx.rollback()

    assert await app.sweep_status(started.run_id) is None
    assert await count_rows(app, "jobs") == 0
    assert (await app.start_sweep("items")).outcome == "started"


async def test_starting_a_sweep_from_many_tasks_at_once_starts_one_run(app: App) -> None:
    await create_items(app, 10)
    app.register_sweep(items_sweep(app.schema))
    results: list[sweepq.SweepStarted] = []

    async def start() -> None:
        results.append(await app.start_sweep("items"))

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(start)

    assert len({r.run_id for r in results}) == 1
    assert sorted(r.outcome for r in results) == ["already_running"] * 7 + ["started"]


async def test_ten_always_failing_items_do_not_stop_the_walk_and_the_run_ends_failed_with_them(
    app: App,
) -> None:
    await create_items(app, 300, failing=range(100, 110))
    app.register_sweep(items_sweep(app.schema, page_size=50, max_attempts=1))

    started = await app.start_sweep("items")
    run = await run_until_ended(app, started.run_id)

    # 10 of 300 is under the default rate (20 % of the recent items): the walk reaches the end;
    # "completed" is for a run with nothing undone, so the run ends failed, saying what to do.
    assert run.state is sweepq.SweepState.FAILED
    assert (run.walked, run.enqueued, run.completed, run.failed) == (True, 300, 290, 10)
    assert run.failure == (
        f"the walk reached the end, but of its 300 items 10 failed. Fix the cause (see "
        f"`sweepq sweep failures {run.id}`), then `sweepq sweep retry-failed {run.id}` runs "
        "them again"
    )
    assert sorted(set(await handled_items(app))) == list(range(1, 301))
    failed = await app.pool.fetch(
        f"SELECT args->'item'->>'id' FROM {ident(app.schema)}.jobs"
        " WHERE idempotency_scope = $1 AND state = 'failed'",
        f"sweep:{started.run_id}",
    )
    assert sorted(int(r[0]) for r in failed) == list(range(100, 110))


async def test_exceeding_max_failures_fails_the_run_and_stops_linking(app: App) -> None:
    await create_items(app, 200, failing=range(1, 11))
    # window == page_size: a link fans out only once the previous page's leaves have all
    # finished, so the second link sees all ten failures of the first page.
    app.register_sweep(
        items_sweep(app.schema, page_size=20, window=20, max_failures=3, max_attempts=1)
    )

    started = await app.start_sweep("items")
    run = await run_until_ended(app, started.run_id)

    assert run.state is sweepq.SweepState.FAILED
    assert run.failure is not None
    # The link may see the failures before the last of them is recorded: any count over the
    # limit stops the walk. The counters, read from the leaves at the end, are exact.
    stopped = re.compile(
        r"\b(\d+) items failed, over max_failures=3; the walk stopped at cursor "
        r'\["2020-01-01T00:00:03\+00:00",20\] after 20 items'
    )
    assert stopped.search(run.failure), run.failure
    assert run.failure.endswith(
        f"then `sweepq sweep resume {run.id}` runs the failed and cancelled items again and "
        "walks on from there"
    )
    assert (run.links, run.walked) == (1, False)
    assert (run.enqueued, run.completed, run.failed) == (20, 10, 10)
    # The second link ended the run instead of linking on; nothing of the run is left to run.
    link_scope = f"sweep-link:{started.run_id}"
    assert await count_jobs(app, "available", "running", scope=link_scope) == 0
    assert await count_jobs(app, "completed", "cancelled", scope=link_scope) == 2
    async with sweepq.Worker(app, concurrency=5, **WORKER_OPTIONS) as worker:
        await worker.run_until_idle()
    assert await count_jobs(app, "available", "running", scope=f"sweep:{started.run_id}") == 0
    assert sorted(set(await handled_items(app))) == list(range(1, 21))


# A page of 10 leaves is sent by the deduplicating INSERT, one of 25 by COPY: either way the
# item served again is named.
@pytest.mark.parametrize("page", [10, 25])
async def test_a_key_the_handler_writes_fails_the_run_instead_of_looping(
    app: App, page: int
) -> None:
    await create_items(app, 50)

    class TouchesItsKey(ItemsSweep):
        name = "touch"
        table = f"{app.schema}.items"
        key: ClassVar[tuple[str, ...]] = ("updated_at", "id")
        page_size = page
        window = page

        async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
            await super().handle(ctx, item)
            assert self.app is not None
            await self.app.pool.execute(
                f"UPDATE {ident(self.app.schema)}.items SET updated_at = clock_timestamp()"
                " WHERE id = $1",
                item["id"],
            )

    app.register_sweep(TouchesItsKey)
    started = await app.start_sweep("touch")
    run = await run_until_ended(app, started.run_id)

    assert run.state is sweepq.SweepState.FAILED
    assert run.failure is not None
    assert "a second time" in run.failure
    assert "met item [" in run.failure
    assert "key the handler writes" in run.failure
    # Every row was handled once; the row that came round again was not fanned out again.
    assert sorted(await handled_items(app)) == list(range(1, 51))
    assert run.enqueued == 50


class SameItemsForever(sweepq.Sweep):
    """A broken page(): it ignores `after`, so the cursor never moves."""

    name = "stuck"
    page_size = 5
    window = 5  # the next link waits for this page's leaves, so they all complete

    async def page(self, conn: Conn, after: tuple[Any, ...] | None, limit: int) -> list[int]:
        return [1, 2, 3, 4, 5]

    def key(self, item: int) -> tuple[int]:
        return (item,)

    async def handle(self, ctx: sweepq.Context, item: int) -> None:
        return None


async def test_a_page_that_does_not_advance_the_cursor_fails_the_run(app: App) -> None:
    app.register_sweep(SameItemsForever)

    started = await app.start_sweep("stuck")
    run = await run_until_ended(app, started.run_id)

    assert run.state is sweepq.SweepState.FAILED
    assert run.failure is not None
    assert "the cursor did not advance" in run.failure
    assert "[5]" in run.failure
    assert (run.links, run.enqueued, run.completed) == (1, 5, 5)
    link = await app.pool.fetchrow(
        f"SELECT state::text, errors->-1->>'error' FROM {ident(app.schema)}.jobs"
        " WHERE idempotency_scope = $1 AND idempotency_key = '[5]'",
        f"sweep-link:{started.run_id}",
    )
    assert link is not None
    assert link[0] == "cancelled"
    assert "the cursor did not advance" in link[1]


async def test_a_run_that_reaches_max_links_fails(app: App) -> None:
    await create_items(app, 100)
    app.register_sweep(items_sweep(app.schema, page_size=10, max_links=3))

    started = await app.start_sweep("items")
    run = await run_until_ended(app, started.run_id)

    assert run.state is sweepq.SweepState.FAILED
    assert run.failure is not None
    assert "reached max_links=3" in run.failure
    assert (run.links, run.max_links, run.enqueued) == (3, 3, 30)
    # Ending the run cancelled the leaves the fourth link found still outstanding.
    assert run.completed + run.cancelled == 30


async def test_the_window_bounds_outstanding_leaves_at_every_sampled_moment(app: App) -> None:
    await create_items(app, 400)
    app.register_sweep(items_sweep(app.schema, page_size=25, window=100))
    started = await app.start_sweep("items", {"delay": 0.01})
    scope = f"sweep:{started.run_id}"
    samples: list[int] = []

    async def sample() -> None:
        async with app.pool.acquire() as conn:
            while True:
                samples.append(await count_jobs(app, "available", "running", scope=scope, on=conn))
                await anyio.sleep(0.002)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sample)
        run = await run_until_ended(app, started.run_id)
        tg.cancel_scope.cancel()

    assert run.state is sweepq.SweepState.COMPLETED
    assert run.completed == 400
    assert len(samples) > 10
    assert max(samples) <= 100
    # The bound was reached, not merely never approached: links kept the window filled.
    assert max(samples) > 25


async def test_pause_stops_the_walk_and_resume_finishes_it_from_the_cursor(app: App) -> None:
    await create_items(app, 300)
    app.register_sweep(items_sweep(app.schema, page_size=20, window=40))
    started = await app.start_sweep("items", {"delay": 0.005})
    run_id = started.run_id
    link_scope, leaf_scope = f"sweep-link:{run_id}", f"sweep:{run_id}"

    async with (
        sweepq.Worker(app, concurrency=10, **WORKER_OPTIONS) as worker,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run)
        await wait_for_run(app, run_id, lambda r: r.links >= 2)
        paused = await app.pause_sweep(run_id)
        assert paused is not None
        assert paused.state is sweepq.SweepState.PAUSED

        # The link at work ends when it sees the pause; the leaves already enqueued finish.
        await wait_until(
            lambda: _none_live(app, link_scope, leaf_scope), timeout=30, what="the run at rest"
        )
        at_pause = await app.sweep_status(run_id)
        assert at_pause is not None
        assert at_pause.state is sweepq.SweepState.PAUSED
        assert at_pause.enqueued < 300
        await anyio.sleep(0.1)
        still = await app.sweep_status(run_id)
        assert still is not None
        assert (still.links, still.enqueued) == (at_pause.links, at_pause.enqueued)
        again = await app.pause_sweep(run_id)  # pausing again changes nothing
        assert again is not None
        assert (again.state, again.links, again.updated_at) == (
            "paused",
            still.links,
            still.updated_at,
        )

        resumed = await app.resume_sweep(run_id)
        assert resumed is not None
        assert resumed.state is sweepq.SweepState.RUNNING
        run = await wait_for_run(app, run_id, lambda r: r.ended)
        worker.stop()

    assert run.state is sweepq.SweepState.COMPLETED
    assert (run.enqueued, run.completed) == (300, 300)
    assert run.links == 16  # 15 full pages and an empty one, none read twice
    keys = await key_counts(app, leaf_scope)
    assert len(keys) == 300
    assert set(keys.values()) == {1}


async def test_an_app_that_never_registered_the_sweep_resumes_and_cancels_its_runs(
    tx_app: App, conn: Conn, dsn: str
) -> None:
    await create_items(tx_app, 10, on=conn)
    tx_app.register_sweep(items_sweep(tx_app.schema))
    started = await tx_app.start_sweep("items", conn=conn)
    await tx_app.pause_sweep(started.run_id, conn=conn)

    # The run records where its links go: resuming needs the DSN, not the sweep's code.
    async with App(dsn, schema=tx_app.schema) as bare:
        resumed = await bare.resume_sweep(started.run_id, conn=conn)
        assert resumed is not None
        assert resumed.state is sweepq.SweepState.RUNNING
        assert (
            await count_jobs(tx_app, "available", scope=f"sweep-link:{started.run_id}", on=conn)
            == 1
        )
        cancelled = await bare.cancel_sweep(started.run_id, conn=conn)
        assert cancelled is not None
        assert cancelled.state is sweepq.SweepState.CANCELLED


async def test_cancel_ends_the_run_and_cancels_its_outstanding_leaves(app: App) -> None:
    await create_items(app, 300)
    app.register_sweep(items_sweep(app.schema, page_size=20, window=60))
    started = await app.start_sweep("items", {"delay": 0.02})
    run_id = started.run_id

    async with (
        sweepq.Worker(app, concurrency=4, **WORKER_OPTIONS) as worker,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run)
        await wait_for_run(app, run_id, lambda r: r.links >= 2)
        cancelled = await app.cancel_sweep(run_id)
        assert cancelled is not None
        assert cancelled.state is sweepq.SweepState.CANCELLED
        assert cancelled.finished_at is not None
        # Nothing of the run is left to run: its leaves are cancelled at once, its link ends.
        assert await count_jobs(app, "available", "running", scope=f"sweep:{run_id}") == 0
        await wait_until(
            lambda: _none_live(app, f"sweep-link:{run_id}"), timeout=30, what="the link ends"
        )
        worker.stop()

    run = await app.sweep_status(run_id)
    assert run is not None
    assert run == cancelled  # ended runs do not change
    assert run.cancelled > 0
    assert run.completed + run.failed + run.cancelled == run.enqueued < 300
    assert run.percent is not None
    assert run.percent < 100  # every leaf is done, but 100 % is for a run that completed
    assert await app.cancel_sweep(run_id) == run


async def test_status_reads_live_progress_and_exact_counters_at_the_end(app: App) -> None:
    await create_items(app, 600, failing=range(50, 55))
    app.register_sweep(items_sweep(app.schema, page_size=50, window=200, max_attempts=1))
    started = await app.start_sweep("items", {"delay": 0.005})
    run_id = started.run_id

    fresh = await app.sweep_status(run_id)
    assert fresh is not None
    assert (fresh.state, fresh.links, fresh.enqueued, fresh.cursor) == ("running", 0, 0, None)
    assert fresh.estimated_total is not None
    assert fresh.total == fresh.estimated_total

    async with (
        sweepq.Worker(app, concurrency=10, **WORKER_OPTIONS) as worker,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run)
        midway = await wait_for_run(app, run_id, lambda r: r.completed >= 100 and not r.ended)
        assert 0 < midway.completed <= midway.enqueued <= 600
        assert midway.outstanding <= 200
        assert midway.completed + midway.failed + midway.outstanding == midway.enqueued
        # The rate waits for a few seconds of work; the ETA waits for the rate.
        assert midway.rate is None or midway.rate > 0
        assert (midway.eta_seconds is None) == (midway.rate is None)
        assert midway.finished_at is None
        # Nothing but the leaves' own jobs counts them: no progress row is written.
        assert (
            await app.pool.fetchval(f"SELECT count(*) FROM {ident(app.schema)}.sweep_progress") == 0
        )
        run = await wait_for_run(app, run_id, lambda r: r.ended)
        worker.stop()

    assert run.state is sweepq.SweepState.FAILED  # 5 items are undone
    assert (run.enqueued, run.completed, run.failed) == (600, 595, 5)
    assert (run.outstanding, run.total, run.eta_seconds) == (0, 600, 0)
    assert run.rate is not None
    assert run.rate > 0
    assert run.finished_at is not None
    assert run.elapsed_seconds > 0
    assert await app.sweep_status(10_000) is None


async def test_list_sweep_runs_shows_the_newest_first_and_can_show_only_active_ones(
    tx_app: App, conn: Conn
) -> None:
    await create_items(tx_app, 5, on=conn)
    tx_app.register_sweep(items_sweep(tx_app.schema))
    first = await tx_app.start_sweep("items", {"n": 1}, conn=conn)
    second = await tx_app.start_sweep("items", {"n": 2}, conn=conn)
    third = await tx_app.start_sweep("items", {"n": 3}, conn=conn)
    await tx_app.cancel_sweep(second.run_id, conn=conn)
    await tx_app.pause_sweep(third.run_id, conn=conn)

    runs = await tx_app.list_sweep_runs(conn=conn)
    assert [r.id for r in runs] == [third.run_id, second.run_id, first.run_id]
    assert [r.state for r in runs] == ["paused", "cancelled", "running"]
    assert [r.params for r in runs] == [{"n": 3}, {"n": 2}, {"n": 1}]
    active = await tx_app.list_sweep_runs(active_only=True, conn=conn)
    assert [r.id for r in active] == [third.run_id, first.run_id]
    assert [r.id for r in await tx_app.list_sweep_runs(limit=1, conn=conn)] == [third.run_id]
    assert await tx_app.list_sweep_runs(sweep="other", conn=conn) == []


async def test_prune_removes_ended_runs_and_keeps_active_ones(app: App) -> None:
    await create_items(app, 30)
    app.register_sweep(items_sweep(app.schema, page_size=10))
    done = await app.start_sweep("items", {"n": 1})
    await run_until_ended(app, done.run_id)
    active = await app.start_sweep("items", {"n": 2})

    kept = await app.prune(older_than=timedelta(days=1))
    assert (kept["sweep_runs"], kept["sweep_progress"]) == (0, 0)

    removed = await app.prune(older_than=timedelta(0))
    assert removed["sweep_runs"] == 1
    assert removed["jobs"] >= 30  # the core's history went too
    assert await app.sweep_status(done.run_id) is None
    assert await app.sweep_status(active.run_id) is not None


class CountFromParams(sweepq.Sweep):
    """A hand-written sweep over integers: params choose the range, `after` is the cursor."""

    name = "numbers"
    page_size = 4
    seen_after: ClassVar[list[tuple[Any, ...] | None]] = []
    handled: ClassVar[list[int]] = []

    async def page(
        self, conn: Conn, after: tuple[Any, ...] | None, limit: int
    ) -> Sequence[dict[str, int]]:
        type(self).seen_after.append(after)
        start = self.params["start"] if after is None else after[0] + 1
        stop = min(start + limit, self.params["stop"])
        return [{"n": n} for n in range(start, stop)]

    def key(self, item: dict[str, int]) -> tuple[int]:
        return (item["n"],)

    async def handle(self, ctx: sweepq.Context, item: dict[str, int]) -> None:
        assert self.params == {"start": 3, "stop": 13}
        assert self.run_id is not None
        type(self).handled.append(item["n"])


async def test_a_hand_written_sweep_gets_its_params_and_the_cursor_of_the_last_page(
    app: App,
) -> None:
    app.register_sweep(CountFromParams)

    started = await app.start_sweep("numbers", {"start": 3, "stop": 13})
    run = await run_until_ended(app, started.run_id)

    assert run.state is sweepq.SweepState.COMPLETED
    assert run.max_links == 1_000_000  # no estimate: the generous default ceiling
    assert sorted(CountFromParams.handled) == list(range(3, 13))
    assert CountFromParams.seen_after == [None, (6,), (10,)]
    assert run.cursor == [12]


class NotJson(sweepq.Sweep):
    name = "not-json"

    async def page(self, conn: Conn, after: tuple[Any, ...] | None, limit: int) -> list[Any]:
        return [] if after else [{"id": 1, "at": timedelta(seconds=1)}]

    def key(self, item: dict[str, Any]) -> tuple[int]:
        return (item["id"],)

    async def handle(self, ctx: sweepq.Context, item: Any) -> None:
        return None


async def test_an_item_that_is_not_json_fails_the_run_with_the_reason(app: App) -> None:
    app.register_sweep(NotJson)

    started = await app.start_sweep("not-json")
    run = await run_until_ended(app, started.run_id)

    assert run.state is sweepq.SweepState.FAILED
    assert run.failure is not None
    assert "not a JSON value" in run.failure
    assert run.enqueued == 0


async def test_a_cron_tick_starts_a_run_only_when_none_is_active(app: App) -> None:
    await create_items(app, 20)
    app.register_sweep(items_sweep(app.schema))
    schedule = app.cron("nightly-items", "0 3 * * *", sweep="items", params={"n": 1})
    assert (schedule.task, schedule.args) == ("sweepq.sweep.items.start", {"params": {"n": 1}})

    # A run of the same params is active (paused, so nothing moves): a tick starts nothing.
    active = await app.start_sweep("items", {"n": 1})
    await app.pause_sweep(active.run_id)
    await app.enqueue(schedule.task, schedule.args)  # what the maintenance leader does
    async with sweepq.Worker(app, concurrency=4, **WORKER_OPTIONS) as worker:
        await worker.run_until_idle()
    assert [r.id for r in await app.list_sweep_runs()] == [active.run_id]

    # Once it has ended, the next tick starts a new run.
    await app.cancel_sweep(active.run_id)
    await app.enqueue(schedule.task, schedule.args)
    async with sweepq.Worker(app, concurrency=4, **WORKER_OPTIONS) as worker:
        await worker.run_until_idle()
    runs = await app.list_sweep_runs()
    assert len(runs) == 2
    assert runs[0].params == {"n": 1}
    assert runs[0].state is sweepq.SweepState.COMPLETED


def test_cron_takes_a_task_or_a_sweep_but_not_both() -> None:
    app = App("postgresql://unused.invalid/none", schema="unused")
    app.register_sweep(SameItemsForever)
    with pytest.raises(sweepq.InvalidJobOptionError, match="not both"):
        app.cron("x", "* * * * *", "sweepq.sweep.stuck.leaf", sweep="stuck")
    with pytest.raises(sweepq.InvalidJobOptionError, match="needs a task"):
        app.cron("x", "* * * * *")
    with pytest.raises(sweepq.UnknownSweepError):
        app.cron("x", "* * * * *", sweep="missing")
    with pytest.raises(sweepq.InvalidSweepError, match="params must be a dict of JSON values"):
        app.cron("x", "* * * * *", sweep="stuck", params={"at": timedelta(1)})
