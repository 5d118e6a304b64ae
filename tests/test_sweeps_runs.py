"""Operating sweeps: progress that can be trusted (on a table that was never analysed too), the
failures of a run, retrying them after a fix, and steering runs from the command line with a
DSN alone."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar

import anyio
import msgspec
from typer.testing import CliRunner, Result

import sweepq
from factories import create_items, handled_items
from sweep_worker_proc import WORKER_OPTIONS, ItemsSweep, items_sweep, run_until_ended, wait_for_run
from sweepq.cli import cli
from sweepq.core.ident import ident
from sweepq.sweeps.app import App
from sweepq.testing import step_sweep

_runner_lock = anyio.Lock()


async def invoke(*args: str) -> Result:
    """The CLI, as a user with no SWEEPQ_DSN and no APP would run it."""
    runner = CliRunner(env={"SWEEPQ_DSN": None, "DATABASE_URL": None, "COLUMNS": "120"})
    async with _runner_lock:
        return await anyio.to_thread.run_sync(lambda: runner.invoke(cli, list(args)))


def db(app: sweepq.App) -> list[str]:
    return ["--dsn", app.dsn, "--schema", app.schema]


async def unanalysed_items(app: App, rows: int) -> str:
    """`items` like `create_items` makes, but never analysed: the planner knows nothing of it."""
    table = f"{ident(app.schema)}.items"
    await app.pool.execute(
        f"""CREATE TABLE {table} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL,
                                  updated_at timestamptz NOT NULL,
                                  fail boolean NOT NULL DEFAULT false)
            WITH (autovacuum_enabled = false)"""
    )
    await app.pool.execute(f"CREATE TABLE {ident(app.schema)}.handled (item_id bigint NOT NULL)")
    await app.pool.execute(
        f"""INSERT INTO {table}
            SELECT i, timestamptz '2020-01-01' + i * interval '1 s', now(), false
            FROM generate_series(1, $1::bigint) AS i""",
        rows,
    )
    return table


async def watch_progress(app: App, run_id: int, *, concurrency: int = 20) -> list[sweepq.SweepRun]:
    """Run a worker until the run ends, reading its status all along; every snapshot read."""
    seen: list[sweepq.SweepRun] = []
    async with (
        sweepq.Worker(app, concurrency=concurrency, **WORKER_OPTIONS) as worker,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run)
        with anyio.fail_after(90):
            while True:
                run = await app.sweep_status(run_id)
                assert run is not None
                seen.append(run)
                if run.ended:
                    break
                await anyio.sleep(0.005)
        worker.stop()
    return seen


def assert_never_backwards(seen: Sequence[sweepq.SweepRun]) -> None:
    shown = [r.percent for r in seen if r.percent is not None]
    assert shown, "no percentage was ever shown"
    dips = [(a, b) for a, b in itertools.pairwise(shown) if b < a]
    assert not dips, f"the percentage went backwards: {dips[:5]}"
    assert all(p < 100 for p in shown[:-1])
    assert shown[-1] == 100


async def test_an_estimated_total_grows_to_the_true_count_and_the_percentage_never_drops(
    app: App,
) -> None:
    await unanalysed_items(app, 3_000)
    # Counting is switched off: the planner's guess for a table never analysed is the total.
    app.register_sweep(
        items_sweep(app.schema, page_size=50, window=300, count_seconds=0, where="id <= 2850")
    )
    started = await app.start_sweep("items")
    first = await app.sweep_status(started.run_id)
    assert first is not None
    assert first.total_is_estimate
    # The planner's guess for a table it never analysed, with a range condition, is low.
    assert first.total is not None
    assert first.total < 2_850

    seen = await watch_progress(app, started.run_id)

    assert_never_backwards(seen)
    # Past the guess, the total follows what is enqueued, still marked as an estimate.
    assert any(r.total_is_estimate and (r.total or 0) > first.total for r in seen)
    last = seen[-1]
    assert last.state is sweepq.SweepState.COMPLETED
    assert (last.total, last.total_is_estimate, last.done) == (2_850, False, 2_850)
    # Once the total grew past the guess it followed what was enqueued, never below it.
    assert all(r.total is None or r.total >= r.enqueued for r in seen)


async def test_a_counted_total_is_exact_from_the_start(app: App) -> None:
    await unanalysed_items(app, 2_000)
    app.register_sweep(items_sweep(app.schema, page_size=100, window=400, where="id > 250"))
    started = await app.start_sweep("items")

    seen = await watch_progress(app, started.run_id)

    assert {(r.total, r.total_is_estimate) for r in seen} == {(1_750, False)}
    assert_never_backwards(seen)


async def test_rate_and_eta_wait_for_a_window_that_means_something(app: App) -> None:
    await create_items(app, 400)
    app.register_sweep(items_sweep(app.schema, page_size=50, window=100))
    started = await app.start_sweep("items")
    # No worker yet: time passes, nothing is done, and there is no rate to show.
    await anyio.sleep(0.3)
    waiting = await app.sweep_status(started.run_id)
    assert waiting is not None
    assert (waiting.rate, waiting.eta_seconds, waiting.percent) == (None, None, 0.0)

    run = await run_until_ended(app, started.run_id)
    assert run.rate is not None
    assert run.rate > 0
    assert run.eta_seconds == 0


class Fixable(ItemsSweep):
    """ItemsSweep whose failing rows stop failing once `fixed` (a deploy of the fix)."""

    fixed: ClassVar[bool] = False

    async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
        await super().handle(ctx, {**item, "fail": item["fail"] and not type(self).fixed})


async def failed_run(app: App, *, failing: range, rows: int = 300) -> tuple[int, type[Fixable]]:
    """A run of `rows` items that walked to the end and ended failed because `failing` failed;
    its sweep class."""
    await create_items(app, rows, failing=failing)
    settings = {"page_size": 50, "window": 200, "max_attempts": 2, "fixed": False}
    sweep = type("Items", (Fixable,), {"table": f"{app.schema}.items", **settings})
    app.register_sweep(sweep)
    started = await app.start_sweep("items")
    run = await run_until_ended(app, started.run_id)
    assert (run.state, run.walked, run.failed) == (sweepq.SweepState.FAILED, True, len(failing))
    assert run.failure is not None
    assert run.failure.startswith("the walk reached the end, but of its")
    return started.run_id, sweep


async def test_the_failures_of_a_run_name_each_item_its_job_attempts_and_last_error(
    app: App,
) -> None:
    run_id, _ = await failed_run(app, failing=range(100, 105))

    failures = await app.sweep_failures(run_id)

    assert sorted(f.item["id"] for f in failures) == list(range(100, 105))
    for failure in failures:
        assert failure.key == [failure.item["id"]]  # the row's identity: its unique key column
        assert (failure.attempts, failure.failure_reason) == (2, "max_attempts_exceeded")
        assert failure.error is not None
        assert f"RuntimeError: item {failure.item['id']} always fails" in failure.error
        job = await app.get_job(failure.job_id)
        assert job is not None
        assert job.args["item"] == failure.item
    assert [f.job_id for f in failures] == sorted((f.job_id for f in failures), reverse=True)
    newest = await app.sweep_failures(run_id, limit=2)
    assert newest == failures[:2]
    assert await app.sweep_failures(run_id + 1000) == []


async def test_the_cli_shows_failures_and_lists_a_runs_items_by_state_and_task(app: App) -> None:
    run_id, _ = await failed_run(app, failing=range(100, 104))

    shown = await invoke("sweep", "failures", str(run_id), *db(app))
    assert shown.exit_code == 0, shown.output
    for item in range(100, 104):
        assert f"RuntimeError: item {item} always fails" in shown.stdout
    as_json = msgspec.json.decode((await invoke("sweep", "failures", str(run_id), *db(app),
                                                "--json")).stdout)  # fmt: skip
    assert len(as_json) == 4
    assert all("Traceback (most recent call last)" in f["error"] for f in as_json)

    status = await invoke("sweep", "status", str(run_id), *db(app))
    assert "last 5" not in status.stdout  # four failures: all of them are shown
    assert "RuntimeError: item 103 always fails" in status.stdout

    listed = await invoke("jobs", "list", "--run", str(run_id), "--state", "failed", *db(app),
                          "--json")  # fmt: skip
    rows = msgspec.json.decode(listed.stdout)
    assert len(rows) == 4
    assert {r["task"] for r in rows} == {"sweepq.sweep.items.leaf"}
    assert all(r["last_error"] and "always fails" in r["last_error"] for r in rows)
    table = await invoke("jobs", "list", "--run", str(run_id), "--state", "failed", *db(app))
    assert "sweepq.sweep.items.leaf" in table.stdout  # the task name is never cut short
    assert "RuntimeError: item 100 always fails" in table.stdout
    by_task = await invoke("jobs", "list", "--task", "sweepq.sweep.items.link", *db(app), "--json")
    assert {r["task"] for r in msgspec.json.decode(by_task.stdout)} == {"sweepq.sweep.items.link"}
    other = await invoke("jobs", "list", "--run", str(run_id + 1), *db(app), "--json")
    assert msgspec.json.decode(other.stdout) == []


async def test_retrying_the_failures_after_a_fix_runs_only_them_and_keeps_counters_exact(
    app: App,
) -> None:
    run_id, sweep = await failed_run(app, failing=range(100, 106))
    sweep.fixed = True  # the fix is deployed
    before = await handled_items(app)

    retried = await invoke("sweep", "retry-failed", str(run_id), *db(app))  # a DSN, no APP

    assert retried.exit_code == 0, retried.output
    assert f"retrying 6 failed or cancelled items of run {run_id}" in retried.stdout
    reopened = await app.sweep_status(run_id)
    assert reopened is not None
    assert (reopened.state, reopened.draining) == (sweepq.SweepState.RUNNING, True)
    assert reopened.enqueued == 300  # no new pass: nothing else is enqueued

    run = await run_until_ended(app, run_id)
    assert run.state is sweepq.SweepState.COMPLETED
    assert (run.enqueued, run.completed, run.failed, run.cancelled) == (300, 300, 0, 0)
    ran = Counter(await handled_items(app)) - Counter(before)
    assert ran == Counter(range(100, 106))  # the failed items ran once more, and nothing else
    assert await app.sweep_failures(run_id) == []
    assert await app.retry_sweep_failures(run_id) == 0  # nothing left to retry
    again = await app.sweep_status(run_id)
    assert again is not None
    assert again.state is sweepq.SweepState.COMPLETED


async def test_retrying_failures_that_fail_again_ends_the_run_with_them_counted_once(
    app: App,
) -> None:
    run_id, _ = await failed_run(app, failing=range(10, 13))
    assert await app.retry_sweep_failures(run_id) == 3
    run = await run_until_ended(app, run_id)
    assert (run.state, run.completed, run.failed) == (sweepq.SweepState.FAILED, 297, 3)
    assert run.failure is not None
    assert run.failure.startswith("the walk reached the end, but of its 300 items 3 failed")
    failures = await app.sweep_failures(run_id)
    assert [f.attempts for f in failures] == [2, 2, 2]  # a fresh budget each


async def test_resume_and_cancel_work_with_a_dsn_alone(app: App) -> None:
    await create_items(app, 400)
    app.register_sweep(items_sweep(app.schema, page_size=50, window=100))
    first = await app.start_sweep("items")
    await app.pause_sweep(first.run_id)

    resumed = await invoke("sweep", "resume", str(first.run_id), *db(app))
    assert resumed.exit_code == 0, resumed.output
    assert f"run {first.run_id} of sweep 'items' is running" in resumed.stdout
    run = await run_until_ended(app, first.run_id)
    assert (run.state, run.completed) == (sweepq.SweepState.COMPLETED, 400)
    # The link the CLI enqueued was the sweep's own: same queue and priority as the others.
    links = await app.pool.fetch(
        f"SELECT DISTINCT queue, priority FROM {ident(app.schema)}.jobs WHERE task = $1",
        "sweepq.sweep.items.link",
    )
    assert [tuple(r) for r in links] == [("default", 1)]

    second = await app.start_sweep("items", {"again": True})
    cancelled = await invoke("sweep", "cancel", str(second.run_id), *db(app))
    assert cancelled.exit_code == 0, cancelled.output
    found = await app.sweep_status(second.run_id)
    assert found is not None
    assert found.state is sweepq.SweepState.CANCELLED
    # A cancelled run resumes from its cursor, and its cancelled items run again.
    resumed = await invoke("sweep", "resume", str(second.run_id), *db(app))
    assert resumed.exit_code == 0, resumed.output
    assert f"run {second.run_id} of sweep 'items' is running" in resumed.stdout
    run = await run_until_ended(app, second.run_id)
    assert (run.state, run.completed, run.cancelled, run.ends) == ("completed", 400, 0, 2)
    refused = await invoke("sweep", "resume", str(second.run_id), *db(app))
    assert refused.exit_code == 2
    assert f"run {second.run_id} is completed; it cannot be resumed" in refused.stderr


async def test_status_counts_the_items_waiting_to_retry(app: App) -> None:
    await create_items(app, 100, failing=range(1, 3))
    app.register_sweep(items_sweep(app.schema, page_size=100, window=200, max_attempts=3))
    started = await app.start_sweep("items")
    async with (
        sweepq.Worker(app, concurrency=10, **WORKER_OPTIONS) as worker,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run)
        run = await wait_for_run(app, started.run_id, lambda r: r.waiting == 2)
        assert run.outstanding >= 2
        assert run.percent is not None
        assert run.percent < 100
        run = await wait_for_run(app, started.run_id, lambda r: r.ended)
        worker.stop()
    assert (run.waiting, run.outstanding, run.failed) == (0, 0, 2)


async def test_a_run_whose_link_the_queue_ended_is_failed_by_the_maintenance_leader(
    app: App,
) -> None:
    await create_items(app, 30)
    app.register_sweep(items_sweep(app.schema, page_size=10, window=30))
    healthy = await app.start_sweep("items", {"n": 1})
    orphaned = await app.start_sweep("items", {"n": 2})
    # The queue ends the link by itself (here by hand; a rescue past its last attempt does the
    # same): no handler runs to say so, and the run would wait for it for ever.
    head = await app.sweeps_layer.queries.sweep_run_head(app.pool, orphaned.run_id)
    assert head is not None
    assert head.link_job is not None
    await app.cancel(head.link_job, reason="operator")

    await app.maintain_layers()  # what the maintenance leader does each round

    failed = await app.sweep_status(orphaned.run_id)
    assert failed is not None
    assert failed.state is sweepq.SweepState.FAILED
    assert failed.failure is not None
    assert f"its link job {head.link_job} ended cancelled" in failed.failure
    still = await app.sweep_status(healthy.run_id)
    assert still is not None
    assert still.state is sweepq.SweepState.RUNNING


async def run_whose_link_died(app: App, deaths: int) -> tuple[int, int]:
    """A run whose link job the rescue failed `worker_died` after `deaths` workers died running
    it; returns the run and its link job."""
    await create_items(app, 30)
    app.register_sweep(items_sweep(app.schema, page_size=10, window=30))
    started = await app.start_sweep("items", {"n": 1})
    head = await app.sweeps_layer.queries.sweep_run_head(app.pool, started.run_id)
    assert head is not None
    assert head.link_job is not None
    died = {"attempt": 1, "at": "2026-12-01T00:00:00+00:00", "kind": "worker_died", "error": "x"}
    await app.pool.execute(
        f"UPDATE {ident(app.schema)}.jobs SET state = 'failed', failure_reason = 'worker_died',"
        " finished_at = now(), worker_id = NULL, lease_expires_at = NULL, crashes = 2,"
        " errors = $2::jsonb WHERE id = $1",
        head.link_job,
        msgspec.json.encode([died] * deaths).decode(),
    )
    return started.run_id, head.link_job


async def test_a_link_whose_workers_died_runs_again_and_its_run_completes(app: App) -> None:
    run_id, link_job = await run_whose_link_died(app, 2)

    await app.maintain_layers()  # what the maintenance leader does each round

    link = await app.get_job(link_job)
    assert link is not None
    assert (link.state, link.crashes) == (sweepq.JobState.AVAILABLE, 0)
    run = await run_until_ended(app, run_id, concurrency=4)
    assert (run.state, run.completed, run.failed) == (sweepq.SweepState.COMPLETED, 30, 0)


async def test_a_link_whose_workers_died_six_times_fails_its_run(app: App) -> None:
    run_id, link_job = await run_whose_link_died(app, 6)

    await app.maintain_layers()

    failed = await app.sweep_status(run_id)
    assert failed is not None
    assert failed.state is sweepq.SweepState.FAILED
    assert failed.failure is not None
    assert f"its link job {link_job} ended failed (worker_died)" in failed.failure


async def test_a_run_handed_on_after_the_leader_listed_it_is_not_failed_for_its_old_link(
    app: App,
) -> None:
    await create_items(app, 30)
    app.register_sweep(items_sweep(app.schema, page_size=10, window=30))
    started = await app.start_sweep("items", {"n": 1})
    queries = app.sweeps_layer.queries
    listed = await queries.sweep_run_links_running(app.pool, 1_000)
    head = await queries.sweep_run_head(app.pool, started.run_id)
    assert head is not None
    assert head.link_job is not None
    old = head.link_job
    # Between the leader's list and its look at the link job: the link hands the run on to its
    # successor and completes (as a link does after its commit).
    assert await step_sweep(app, started.run_id)
    job = await app.get_job(old)
    assert job is not None
    assert job.state is sweepq.JobState.CANCELLED  # a stepped link is ended once handed on
    moved = await queries.sweep_run_head(app.pool, started.run_id)
    assert moved is not None
    assert moved.link_job not in (None, old)

    async def stale(*args: object) -> list[tuple[int, str, int]]:
        return listed

    queries.sweep_run_links_running = stale  # type: ignore[method-assign, assignment]
    await app.maintain_layers()

    run = await app.sweep_status(started.run_id)
    assert run is not None
    assert run.state is sweepq.SweepState.RUNNING
