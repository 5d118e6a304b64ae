"""A worker killed with SIGKILL mid-run: the next worker completes the run from its committed
cursor, every row is handled, and no leaf is ever enqueued twice (committed tier)."""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process

import sweepq
from factories import count_jobs, count_rows, create_items, handled_items, key_counts
from sweep_worker_proc import crash_sweep, run_until_ended, sweeps_app
from sweepq.core.ident import ident
from sweepq.sweeps.app import App
from waiting import wait_until

pytestmark = pytest.mark.committed

PROC = Path(__file__).with_name("sweep_worker_proc.py")
ROWS = 1_500


@pytest.fixture
async def app(dsn: str) -> AsyncIterator[App]:
    async with sweeps_app(dsn) as fresh:
        yield fresh


async def count(app: App, sql: str, *args: object) -> int:
    return int(await app.pool.fetchval(sql.format(schema=ident(app.schema)), *args))


async def wait_for_ready(process: Process) -> None:
    assert process.stdout is not None
    with anyio.fail_after(30):
        line = await process.stdout.receive()
    assert line.startswith(b"ready"), line


async def _at_least(count: Awaitable[int], wanted: int) -> bool:
    return await count >= wanted


@pytest.mark.fault
async def test_a_run_survives_kill_9_of_its_worker_and_completes_from_its_committed_cursor(
    app: App, dsn: str
) -> None:
    await create_items(app, ROWS)
    cls = app.register_sweep(crash_sweep(app.schema))
    started = await app.start_sweep(cls.name, {"delay": 0.004})
    run_id = started.run_id

    process = await anyio.open_process([sys.executable, str(PROC), dsn, app.schema])
    try:
        await wait_for_ready(process)
        # Kill it in the middle of the walk: some pages committed, leaves in flight.
        await wait_until(
            lambda: _at_least(count_rows(app, "handled"), ROWS // 4),
            timeout=60,
            what="a quarter of the rows handled",
            every=0.01,
        )
        process.send_signal(signal.SIGKILL)
        await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
        await process.aclose()

    at_kill = await app.sweep_status(run_id)
    assert at_kill is not None
    assert at_kill.state is sweepq.SweepState.RUNNING
    assert 0 < at_kill.links < ROWS // cls.page_size
    # Its leases lapse (1 s) and this worker rescues what the dead one held.
    run = await run_until_ended(app, run_id, concurrency=10)

    assert run.state is sweepq.SweepState.COMPLETED
    assert (run.enqueued, run.completed, run.failed) == (ROWS, ROWS, 0)
    # Every page was read once: the walk resumed from the cursor, not from the head.
    assert run.links == ROWS // cls.page_size + 1
    scope = f"sweep:{run_id}"
    assert {k: n for k, n in (await key_counts(app, scope)).items() if n > 1} == {}
    assert await count_jobs(app, scope=scope) == ROWS
    # The kill left leaves running; they were rescued when their leases lapsed.
    rescued = (
        "SELECT count(*) FROM {schema}.jobs WHERE idempotency_scope = $1 AND errors @> $2::jsonb"
    )
    assert await count(app, rescued, scope, '[{"kind": "worker_died"}]') > 0
    # At least once: every row handled, the ones in flight at the kill perhaps twice.
    assert len(set(await handled_items(app))) == ROWS
    assert await count_rows(app, "handled") >= ROWS
