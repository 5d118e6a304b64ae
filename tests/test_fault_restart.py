"""PostgreSQL restarts in the middle of a run (committed tier, against a test-owned server).

Worker processes keep running through the restart and reconnect by themselves (the test never
restarts them); afterwards every job is completed, no job whose handler finished runs again, and
the outage charges no attempt to a job whose handler did not fail. Each worker keeps a ledger of
how every execution ended, outside the database (see fault_restart_worker.py): a job with two
`finished` executions was run again. The server stays down for `OUTAGE` seconds, well inside the
workers' 10 s lease, except in the test of an outage that outlasts the lease.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

import sweepq
import waiting
from factories import create_items
from fault_restart_worker import (
    Entry,
    create_handled,
    extend_handled,
    read_ledgers,
    register_task,
    restart_sweep,
)
from owned_postgres import OwnedPostgres, StopMode, owned_postgres
from sweep_worker_proc import sweeps_app
from sweepq.core.ident import ident
from sweepq.core.outage import TRANSIENT_ERRORS
from sweepq.sweeps.app import App

pytestmark = [pytest.mark.fault, pytest.mark.committed]

PROC = Path(__file__).with_name("fault_restart_worker.py")
JOBS = 3_000
ROWS = 3_000
DELAY = 0.005  # each handler's work
OUTAGE = 1.5  # seconds the server stays down
LEASE = 10.0  # the workers' lease: long against the outage
DONE_TIMEOUT = 60.0
SAMPLE = 5
T = TypeVar("T")


@pytest.fixture
def owned_pg() -> Iterator[OwnedPostgres]:
    with owned_postgres() as server:
        yield server


@dataclass
class WorkerProcess:
    process: Process
    pid: int
    application_name: str  # of its worker's connections
    stderr: Path

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def describe(self) -> str:
        tail = self.stderr.read_text(errors="replace").splitlines()[-20:]
        return f"worker {self.pid} exited {self.process.returncode}:\n" + "\n".join(tail)


@contextlib.asynccontextmanager
async def worker_processes(
    kind: str, dsn: str, schema: str, count: int, folder: Path, *, lease: float = LEASE
) -> AsyncIterator[list[WorkerProcess]]:
    """`count` worker processes with leases of `lease` seconds, each `ready`, keeping their
    ledgers in `folder`; killed when the block ends."""
    started: list[WorkerProcess] = []
    try:
        for n in range(count):
            stderr = folder / f"worker-{n}.stderr"
            with stderr.open("wb") as sink:
                process = await anyio.open_process(
                    [sys.executable, str(PROC), kind, dsn, schema, str(folder), str(lease)],
                    stderr=sink,
                )
            assert process.stdout is not None
            with anyio.fail_after(30):
                line = await BufferedByteReceiveStream(process.stdout).receive_until(b"\n", 200)
            word, pid, name = line.decode().split(" ", 2)
            assert word == "ready", line
            started.append(WorkerProcess(process, int(pid), name, stderr))
        yield started
    finally:
        for worker in started:
            if worker.alive:
                worker.process.send_signal(signal.SIGKILL)
            await worker.process.wait()
            await worker.process.aclose()


async def retrying(read: Callable[[], Awaitable[T]]) -> T:
    """`read()`, again while a connection broken by the restart fails it (callers bound it)."""
    while True:
        try:
            return await read()
        except TRANSIENT_ERRORS:
            await anyio.sleep(0.05)


async def fetchval(app: App, sql: str, *args: object) -> Any:
    return await retrying(lambda: app.pool.fetchval(sql.format(schema=ident(app.schema)), *args))


async def wait_until(
    check: Callable[[], Awaitable[bool]], workers: Sequence[WorkerProcess], *, timeout: float
) -> None:
    """Poll `check` until it holds; fail at once if a worker process died."""

    async def alive_and_done() -> bool:
        dead = [w.describe() for w in workers if not w.alive]
        assert not dead, "\n".join(dead)
        return await check()

    await waiting.wait_until(alive_and_done, timeout=timeout, every=0.05)


def finished(ledger: list[Entry]) -> list[Entry]:
    return [e for e in ledger if e.end == "finished"]


async def restart_mid_run(
    owned_pg: OwnedPostgres,
    mode: StopMode,
    workers: Sequence[WorkerProcess],
    folder: Path,
    total: int,
    *,
    outage: float = OUTAGE,
) -> None:
    """Once a third of the executions finished, restart the server (down for `outage`
    seconds)."""

    async def a_third_finished() -> bool:
        return len(finished(read_ledgers(folder))) >= total // 3

    await wait_until(a_third_finished, workers, timeout=30)
    await anyio.to_thread.run_sync(functools.partial(owned_pg.restart, mode, down=outage))
    before = len(finished(read_ledgers(folder)))
    assert before < total, f"the restart came after all {total} executions had finished"


async def common_problems(app: App, workers: Sequence[WorkerProcess]) -> dict[str, Any]:
    """Each worker process still runs, and is connected to the restarted server: it reconnected
    by itself (waits a little for connections that are being made again)."""
    missing: list[int] = []
    with anyio.move_on_after(15):
        while True:
            rows = await retrying(
                lambda: app.pool.fetch("SELECT DISTINCT application_name FROM pg_stat_activity")
            )
            names = {r["application_name"] for r in rows}
            missing = [w.pid for w in workers if w.application_name not in names]
            if not missing:
                break
            await anyio.sleep(0.1)
    logs = {w.pid: w.stderr.read_text(errors="replace") for w in workers}
    return {
        "worker processes that exited": [w.describe() for w in workers if not w.alive],
        "workers not connected to the restarted server": missing,
        # One clear line when the database goes away, not a traceback per failed call.
        "workers that logged tracebacks": [pid for pid, log in logs.items() if "Traceback" in log],
        "workers that did not report the outage once (reports)": {
            pid: n for pid, log in logs.items() if not 1 <= (n := log.count("is unavailable")) <= 2
        },
    }


def runs_by(entries: list[Entry], key: str) -> dict[int, int]:
    """How many of `entries` there are per job id or item id (`key`)."""
    found: Counter[int] = Counter(getattr(e, key) for e in entries)
    return dict(found)


def summary(problems: dict[str, Any]) -> str:
    """The problems found, one line each: its count and a few examples ("" if none)."""
    lines = []
    for name, value in problems.items():
        if value:
            items = list(value.items()) if isinstance(value, dict) else list(value)
            lines.append(f"{name}: {len(items)}, e.g. {items[:SAMPLE]}")
    return "\n".join(lines)


async def jobs_through_a_restart(
    owned_pg: OwnedPostgres,
    kind: str,
    mode: StopMode,
    folder: Path,
    *,
    lease: float = LEASE,
    outage: float = OUTAGE,
) -> str:
    """Two workers run `JOBS` jobs of `kind`; the server restarts once a third have finished.
    Returns the problems found ("" if none)."""
    async with sweeps_app(owned_pg.dsn) as app:
        task = register_task(app)
        await create_handled(app)
        enqueued = await app.enqueue_many([sweepq.JobSpec(task, {"delay": DELAY})] * JOBS)
        ids = [e.job_id for e in enqueued]
        assert len(set(ids)) == JOBS

        async with worker_processes(
            kind, owned_pg.dsn, app.schema, 2, folder, lease=lease
        ) as workers:
            await restart_mid_run(owned_pg, mode, workers, folder, JOBS, outage=outage)
            active = "SELECT count(*) FROM {schema}.jobs WHERE state::text = ANY($1::text[])"

            async def all_terminal() -> bool:
                return int(await fetchval(app, active, ["available", "running"])) == 0

            await wait_until(all_terminal, workers, timeout=DONE_TIMEOUT)
            ledger = read_ledgers(folder)
            problems = await common_problems(app, workers)

        jobs = [await app.get_job(job_id) for job_id in ids]
        committed = await app.pool.fetch(f"SELECT execution FROM {ident(app.schema)}.handled")
    assert all(job is not None for job in jobs)
    done = [job for job in jobs if job is not None]
    finishes = runs_by(finished(ledger), "job_id")
    raised = {e.execution for e in ledger if e.end == "raised"}
    raised_jobs = {e.job_id for e in ledger if e.end == "raised"}
    rows = {r["execution"] for r in committed}
    ended = {e.execution for e in finished(ledger)}
    unraised = [j for j in done if j.id not in raised_jobs]

    problems |= {
        "jobs not completed": {j.id: j.state.value for j in done if j.state.value != "completed"},
        "jobs whose handler never finished": [j.id for j in done if j.id not in finishes],
        "jobs run again after their handler finished (finished executions)": {
            job_id: n for job_id, n in finishes.items() if n > 1
        },
        "jobs charged more than one attempt though their handler never raised": {
            j.id: j.attempt for j in unraised if j.attempt != 1
        },
        "jobs with errors though their handler never raised (attempt, kind)": {
            j.id: [(e.attempt, e.kind) for e in j.errors] for j in unraised if j.errors
        },
        # A handler raises here only because the server went away: never charged.
        "jobs charged an attempt for the outage (attempt)": {
            j.id: j.attempt for j in done if j.attempt != 1
        },
        "jobs with errors other than the outage's (attempt, kind)": {
            j.id: [(e.attempt, e.kind) for e in j.errors]
            for j in done
            if any(e.kind != "database_unavailable" for e in j.errors)
        },
    }
    if kind == "db":
        problems |= {
            # A row whose execution raised is a commit whose acknowledgement the restart cut off.
            "rows committed by executions that neither finished nor raised": rows - ended - raised,
            "finished executions without their row": ended - rows,
        }
    return summary(problems)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
@pytest.mark.parametrize("kind", ["db", "local"])
async def test_jobs_finish_once_each_and_are_charged_nothing_when_postgresql_restarts_mid_run(
    owned_pg: OwnedPostgres, kind: str, mode: StopMode, tmp_path: Path
) -> None:
    """`db`: each handler commits a row and raises if it cannot (the server is away); `local`:
    handlers need no database, so they finish while it is away and their outcomes wait."""
    found = await jobs_through_a_restart(owned_pg, kind, mode, tmp_path)
    assert not found, found


async def test_finished_jobs_are_not_run_again_when_the_outage_outlasts_their_lease(
    owned_pg: OwnedPostgres, tmp_path: Path
) -> None:
    """Down for twice the lease: the leases of jobs whose outcomes wait in the workers lapse
    by the clock while nobody can act on it; back up, the workers record those outcomes and
    nothing rescues (re-runs) what they still hold."""
    found = await jobs_through_a_restart(owned_pg, "local", "fast", tmp_path, lease=2.0, outage=4.0)
    assert not found, found


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_a_sweep_completes_with_every_row_handled_once_when_postgresql_restarts_mid_run(
    owned_pg: OwnedPostgres, mode: StopMode, tmp_path: Path
) -> None:
    async with sweeps_app(owned_pg.dsn) as app:
        await create_items(app, ROWS)
        await extend_handled(app)
        cls = app.register_sweep(restart_sweep(app.schema))
        run_id = (await app.start_sweep(cls.name, {"delay": DELAY})).run_id

        async with worker_processes("sweep", owned_pg.dsn, app.schema, 1, tmp_path) as workers:
            await restart_mid_run(owned_pg, mode, workers, tmp_path, ROWS)

            async def ended() -> bool:
                run = await retrying(lambda: app.sweep_status(run_id))
                assert run is not None
                return run.ended

            await wait_until(ended, workers, timeout=DONE_TIMEOUT)
            ledger = read_ledgers(tmp_path)
            problems = await common_problems(app, workers)

        run = await app.sweep_status(run_id)
        assert run is not None
        scope = f"sweep:{run_id}"
        schema = ident(app.schema)
        leaves = int(
            await app.pool.fetchval(
                f"SELECT count(*) FROM {schema}.jobs WHERE idempotency_scope = $1", scope
            )
        )
        twice_enqueued = await app.pool.fetch(
            f"SELECT idempotency_key, count(*) AS n FROM {schema}.jobs"
            " WHERE idempotency_scope = $1 GROUP BY 1 HAVING count(*) > 1",
            scope,
        )
        committed = await app.pool.fetch(f"SELECT execution FROM {schema}.handled")
    finishes = runs_by(finished(ledger), "item_id")
    raised = {e.execution for e in ledger if e.end == "raised"}
    rows = {r["execution"] for r in committed}
    ended_ok = {e.execution for e in finished(ledger)}
    outcome = (run.state, run.enqueued, run.completed, run.failed)

    problems |= {
        "run (state, enqueued, completed, failed) is not (completed, rows, rows, 0)": (
            []
            if outcome == (sweepq.SweepState.COMPLETED, ROWS, ROWS, 0)
            else [(*outcome, run.failure)]
        ),
        "leaves (jobs of the run) is not rows": [] if leaves == ROWS else [leaves],
        "leaves enqueued twice (idempotency key)": {
            r["idempotency_key"]: r["n"] for r in twice_enqueued
        },
        "rows never handled": sorted(set(range(1, ROWS + 1)) - set(finishes)),
        "rows handled again after their handler finished (finished executions)": {
            item: n for item, n in finishes.items() if n > 1
        },
        "rows committed by executions that neither finished nor raised": rows - ended_ok - raised,
        "finished executions without their row": ended_ok - rows,
    }
    found = summary(problems)
    assert not found, found
