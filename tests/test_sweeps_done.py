"""`Sweep.on_complete`: one job per end of a run, in any state, exactly once whatever crashes,
and the run as it ended (committed tier)."""

from __future__ import annotations

import random
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner, Result

import sweepq
from factories import count_rows, create_items
from sweep_done_proc import NOTIFIED, notify_sweep
from sweep_worker_proc import WORKER_OPTIONS, run_until_ended, sweeps_app, wait_for_run
from sweepq.cli import cli
from sweepq.core.ident import ident
from sweepq.sweeps.app import App
from waiting import wait_until

pytestmark = pytest.mark.committed

PROC = Path(__file__).with_name("sweep_done_proc.py")


async def _all_ended(app: App) -> bool:
    return not await app.pool.fetchval(
        f"SELECT count(*) FROM {ident(app.schema)}.jobs WHERE state IN ('available', 'running')"
    )


@pytest.fixture
async def app(dsn: str) -> AsyncIterator[App]:
    async with sweeps_app(dsn) as fresh:
        await fresh.pool.execute(NOTIFIED.format(schema=ident(fresh.schema)))
        yield fresh


async def notified(app: App, run_id: int) -> list[dict[str, Any]]:
    rows = await app.pool.fetch(
        f"SELECT * FROM {ident(app.schema)}.notified WHERE run_id = $1 ORDER BY ends", run_id
    )
    return [dict(r) for r in rows]


async def done_jobs(app: App, run_id: int) -> list[tuple[str, str]]:
    """The run's on_complete jobs: their key and state."""
    rows = await app.pool.fetch(
        f"""SELECT idempotency_key, state::text FROM {ident(app.schema)}.jobs
            WHERE task = 'sweepq.sweep.items.done' AND idempotency_scope = $1
            ORDER BY id""",
        f"sweep:{run_id}",
    )
    return [(r[0], r[1]) for r in rows]


async def drain(app: App) -> None:
    """Run a worker until no job is left available or running (a dead worker's included: its
    lease lapses and this worker rescues it)."""
    async with (
        sweepq.Worker(app, concurrency=4, **WORKER_OPTIONS) as worker,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run)
        await wait_until(lambda: _all_ended(app), timeout=30, what="every job ended")
        worker.stop()


async def invoke(*args: str) -> Result:
    runner = CliRunner(env={"SWEEPQ_DSN": None, "DATABASE_URL": None})
    return await anyio.to_thread.run_sync(lambda: runner.invoke(cli, list(args)))


async def test_on_complete_runs_once_per_end_with_the_run_as_it_ended(app: App) -> None:
    await create_items(app, 50, failing=range(7, 8))
    sweep = app.register_sweep(notify_sweep(app.schema, max_attempts=1))
    started = await app.start_sweep("items")

    run = await run_until_ended(app, started.run_id)
    await drain(app)

    assert (run.state, run.failed, run.ends) == (sweepq.SweepState.FAILED, 1, 1)
    (first,) = await notified(app, run.id)
    assert (first["state"], first["completed"], first["failed"], first["calls"]) == (
        "failed", 49, 1, 1,
    )  # fmt: skip
    assert await done_jobs(app, run.id) == [("end:1", "completed")]

    # It runs again for its failed item: its next end has a job of its own.
    broken = sweep.handle

    async def fixed(self: Any, ctx: sweepq.Context, item: dict[str, Any]) -> None:
        await broken(self, ctx, {**item, "fail": False})

    sweep.handle = fixed  # type: ignore[method-assign]  # the fix is deployed
    assert await app.retry_sweep_failures(run.id) == 1
    run = await run_until_ended(app, run.id)
    await drain(app)
    assert (run.state, run.ends) == (sweepq.SweepState.COMPLETED, 2)
    ends = await notified(app, run.id)
    assert [(e["ends"], e["state"], e["completed"], e["calls"]) for e in ends] == [
        (1, "failed", 49, 1),
        (2, "completed", 50, 1),
    ]
    assert await done_jobs(app, run.id) == [("end:1", "completed"), ("end:2", "completed")]


async def test_a_run_cancelled_with_a_dsn_alone_is_told_by_a_worker_that_knows_the_sweep(
    app: App,
) -> None:
    await create_items(app, 40)
    app.register_sweep(notify_sweep(app.schema))
    started = await app.start_sweep("items")  # no worker yet: nothing runs

    cancelled = await invoke(
        "sweep", "cancel", str(started.run_id), "--dsn", app.dsn, "--schema", app.schema
    )
    assert cancelled.exit_code == 0, cancelled.output
    await drain(app)

    (told,) = await notified(app, started.run_id)
    assert (told["state"], told["completed"], told["cancelled"]) == ("cancelled", 0, 0)
    assert await done_jobs(app, started.run_id) == [("end:1", "completed")]


async def test_a_plain_def_on_complete_runs_in_a_thread(app: App) -> None:
    await create_items(app, 5)
    heard: list[tuple[int, str]] = []

    class Sync(notify_sweep(app.schema)):  # type: ignore[misc]
        def on_complete(self, ctx: sweepq.Context, run: sweepq.SweepRun) -> None:
            heard.append((run.ends, str(run.state)))

    app.register_sweep(Sync)
    started = await app.start_sweep("items")
    await run_until_ended(app, started.run_id)
    await drain(app)
    assert heard == [(1, "completed")]


@pytest.mark.fault
async def test_on_complete_is_enqueued_exactly_once_when_workers_are_killed_around_the_end(
    app: App, dsn: str
) -> None:
    """Twenty runs, each with its worker killed (SIGKILL) at a random moment around its end,
    then a fresh worker: every end has exactly one on_complete job, and one record."""
    await create_items(app, 40)
    app.register_sweep(notify_sweep(app.schema))
    rng = random.Random(20)
    calls: list[int] = []
    moments: list[str] = []
    for repetition in range(20):
        started = await app.start_sweep("items", {"n": repetition, "delay": 0.02})
        process = await anyio.open_process([sys.executable, str(PROC), dsn, app.schema])
        try:
            assert process.stdout is not None
            with anyio.fail_after(30):
                line = await process.stdout.receive()
            assert line.startswith(b"ready"), line
            # Around the end: once the last page is read, up to a little after the end.
            await wait_for_run(app, started.run_id, lambda r: r.walked or r.ended, timeout=30)
            await anyio.sleep(rng.uniform(0.0, 0.15))
            process.send_signal(signal.SIGKILL)
            await process.wait()
            at_kill = await app.sweep_status(started.run_id)
            assert at_kill is not None
            moments.append("after the end" if at_kill.ended else "before the end")
        finally:
            if process.returncode is None:
                process.kill()
            await process.aclose()
        run = await run_until_ended(app, started.run_id, concurrency=8)
        await drain(app)
        assert (run.state, run.completed, run.ends) == (sweepq.SweepState.COMPLETED, 40, 1)
        assert await done_jobs(app, run.id) == [("end:1", "completed")]
        (told,) = await notified(app, run.id)
        assert (told["state"], told["completed"]) == ("completed", 40)
        calls.append(told["calls"])
    # Each end's job ran to completion; a kill in the middle of one may have run it again
    # (a handler runs at least once), never enqueued it twice.
    assert await count_rows(app, "notified") == 20
    assert all(n >= 1 for n in calls)
    print(f"killed: {Counter(moments)}; on_complete calls per end: {Counter(calls)}")
