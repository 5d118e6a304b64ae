"""Worker processes killed with SIGKILL, or stopped with SIGSTOP past their lease, mid-run
(committed tier, worker subprocesses: see fault_worker_proc.py).

Nothing is lost: every job ends completed and every row of a sweep is handled, but for a job
that two killed workers held, which fails `worker_died` (a job that kills its worker must not take
down a third; one killed from outside looks the same). Work runs again only where a kill
interrupted it: a job (or row) is handled twice only if the worker that handled it first was
killed and the job was rescued from it (`worker_died`). A worker that lost its lease while
stopped cannot record its late outcome, and lives on (`lease_expired`).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream

import sweepq
import waiting
from factories import create_items
from fault_worker_proc import (
    PAUSE_TASK,
    WORKER_OPTIONS,
    create_handled,
    extend_handled,
    kill_sweep,
    record,
    register_record,
)
from sweep_worker_proc import sweeps_app
from sweepq.core.ident import ident
from sweepq.sweeps.app import App

pytestmark = [pytest.mark.fault, pytest.mark.committed]

PROC = Path(__file__).with_name("fault_worker_proc.py")
JOBS = 10_000
ROWS = 10_000
WORKERS = 3
KILLS = 10
DELAY = 0.001  # each job's work: kills land while handlers run
BATCH = 5_000
DONE_TIMEOUT = 60.0
SAMPLE = 5


@pytest.fixture
async def app(dsn: str) -> AsyncIterator[App]:
    async with sweeps_app(dsn) as fresh:
        yield fresh


@dataclass
class WorkerProcess:
    process: Process
    stdout: BufferedByteReceiveStream
    worker_id: str
    stderr: Path
    killed: bool = False

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    @property
    def pid(self) -> int:
        return self.process.pid

    def errors(self) -> str:
        return self.stderr.read_text(errors="replace")

    def describe(self) -> str:
        tail = self.errors().splitlines()[-20:]
        return f"worker {self.worker_id} exited {self.process.returncode}:\n" + "\n".join(tail)


@dataclass
class Fleet:
    """Worker processes of one kind: those started, and which of them were killed."""

    kind: str
    dsn: str
    schema: str
    folder: Path
    started: list[WorkerProcess] = field(default_factory=list)

    async def start(self) -> WorkerProcess:
        """A new worker process, once it says it is ready."""
        stderr = self.folder / f"{self.kind}-{len(self.started)}.stderr"
        with stderr.open("wb") as sink:
            process = await anyio.open_process(
                [sys.executable, str(PROC), self.kind, self.dsn, self.schema], stderr=sink
            )
        assert process.stdout is not None
        stdout = BufferedByteReceiveStream(process.stdout)
        try:
            with anyio.fail_after(30):
                line = await stdout.receive_until(b"\n", 500)
        except BaseException as exc:
            with contextlib.suppress(ProcessLookupError):  # it may have exited already
                process.kill()
            await process.wait()
            await process.aclose()
            if isinstance(exc, anyio.IncompleteRead):
                tail = "\n".join(stderr.read_text(errors="replace").splitlines()[-20:])
                raise AssertionError(
                    f"a {self.kind} worker exited before it was ready:\n{tail}"
                ) from exc
            raise
        word, worker_id = line.decode().split()
        assert word == "ready", line
        worker = WorkerProcess(process, stdout, worker_id, stderr)
        self.started.append(worker)
        return worker

    async def kill(self, worker: WorkerProcess) -> None:
        worker.killed = True
        worker.process.send_signal(signal.SIGKILL)
        with anyio.fail_after(10):
            assert await worker.process.wait() == -signal.SIGKILL

    @property
    def killed(self) -> set[str]:
        return {w.worker_id for w in self.started if w.killed}

    def live(self) -> list[WorkerProcess]:
        return [w for w in self.started if w.alive and not w.killed]

    def crashed(self) -> list[str]:
        """Processes that exited without being killed by the test."""
        return [w.describe() for w in self.started if not w.alive and not w.killed]


@contextlib.asynccontextmanager
async def fleet(kind: str, dsn: str, schema: str, folder: Path) -> AsyncIterator[Fleet]:
    """A Fleet whose processes are all killed when the block ends."""
    workers = Fleet(kind, dsn, schema, folder)
    try:
        yield workers
    finally:
        with anyio.CancelScope(shield=True):
            for worker in workers.started:
                if worker.alive:
                    worker.process.kill()
                await worker.process.wait()
                await worker.process.aclose()


async def wait_until(
    check: Callable[[], Awaitable[bool]], workers: Fleet, *, timeout: float
) -> None:
    """Poll `check` until it holds; fail at once if a worker process exited by itself."""

    async def alive_and_done() -> bool:
        crashed = workers.crashed()
        assert not crashed, "\n".join(crashed)
        return await check()

    await waiting.wait_until(alive_and_done, timeout=timeout, every=0.05)


async def fetchval(app: App, sql: str, *args: object) -> Any:
    return await app.pool.fetchval(sql.format(schema=ident(app.schema)), *args)


async def handled_count(app: App) -> int:
    return int(await fetchval(app, "SELECT count(*) FROM {schema}.handled"))


@dataclass
class Kill:
    worker_id: str
    jobs_held: int  # running jobs the worker held when it was killed
    handled_before: int  # executions recorded (by all workers) when it was killed


async def kill_during_run(
    app: App, workers: Fleet, tg: TaskGroup, total: int, rng: random.Random
) -> list[Kill]:
    """KILLS times, spread over the run: SIGKILL a random worker that holds running jobs, and
    start a replacement (in `tg`, without waiting for it)."""
    kills: list[Kill] = []
    for n in range(KILLS):
        target = total * (n + 1) // (KILLS + 2)

        async def progressed(target: int = target) -> bool:
            return await handled_count(app) >= target

        await wait_until(progressed, workers, timeout=DONE_TIMEOUT)
        victim: tuple[WorkerProcess, int] | None = None

        async def victim_found() -> bool:
            nonlocal victim
            live = {w.worker_id: w for w in workers.live()}
            rows = await app.pool.fetch(
                f"SELECT worker_id, count(*) AS n FROM {ident(app.schema)}.jobs"
                " WHERE state = 'running' AND worker_id = ANY($1::text[]) GROUP BY 1",
                list(live),
            )
            if not rows:
                return False
            row = rng.choice(sorted(rows, key=lambda r: str(r["worker_id"])))
            victim = (live[row["worker_id"]], int(row["n"]))
            return True

        await wait_until(victim_found, workers, timeout=DONE_TIMEOUT)
        assert victim is not None
        worker, held = victim
        await workers.kill(worker)
        kills.append(Kill(worker.worker_id, held, await handled_count(app)))
        tg.start_soon(workers.start)
    return kills


def summary(problems: dict[str, Any]) -> dict[str, str]:
    """The problems found, each as its count and a few examples."""
    found = {}
    for name, value in problems.items():
        if value:
            items = list(value.items()) if isinstance(value, dict) else list(value)
            found[name] = f"{len(items)}, e.g. {items[:SAMPLE]}"
    return found


RESCUES = ("lease_expired", "worker_died")


def rescues(errors_json: str) -> tuple[list[str], list[str]]:
    """(errors that are not rescues, as kinds; the messages of the rescues: `worker_died` for a
    killed worker, `lease_expired` for a stopped one)."""
    errors = json.loads(errors_json)
    other = [e["kind"] for e in errors if e["kind"] not in RESCUES]
    return other, [e["error"] for e in errors if e["kind"] in RESCUES]


def died_twice(state: str, failure_reason: str | None, errors_json: str) -> bool:
    """A job that two killed workers held fails `worker_died`: it is not run again (a job that
    kills its worker must not take down a third)."""
    kinds = [e["kind"] for e in json.loads(errors_json)]
    return (state, failure_reason) == ("failed", "worker_died") and kinds.count("worker_died") == 2


def unexplained_repeats(
    executions: dict[int, list[str]], errors: dict[int, str], killed: set[str]
) -> dict[str, dict[int, Any]]:
    """Checks of the executions of each job (the workers that ran it, in order) against the
    workers killed and the job's rescues: a job ran again only where a kill interrupted it.

    A job run again after a worker that was not killed means a live worker lost the lease of
    work it had done (e.g. its heartbeat stalled past the 3 s lease; see
    test_fault_races.py::test_a_workers_heartbeat_and_its_outcome_write_over_the_same_jobs_never_deadlock).
    """
    not_killed: dict[int, Any] = {}
    not_rescued: dict[int, Any] = {}
    for job_id, ran_by in executions.items():
        if len(ran_by) < 2:
            continue
        earlier = ran_by[:-1]
        if not set(earlier) <= killed:
            not_killed[job_id] = ran_by
        _, rescued = rescues(errors[job_id])
        if any(not any(w in r for r in rescued) for w in earlier):
            not_rescued[job_id] = (ran_by, rescued)
    return {
        "jobs run again after a worker that was not killed": not_killed,
        "jobs run again without a rescue from each earlier worker": not_rescued,
    }


def report(name: str, kills: Sequence[Kill], executions: dict[int, list[str]], **more: Any) -> str:
    repeated = {j: len(w) for j, w in executions.items() if len(w) > 1}
    line = (
        f"{name}: kills={len(kills)} running jobs held by the killed workers"
        f" (handler running, or outcome not recorded yet)={sum(k.jobs_held for k in kills)}"
        f" handled at kills={[k.handled_before for k in kills]}"
        f" handled twice or more={len(repeated)} extra executions="
        f"{sum(repeated.values()) - len(repeated)}"
    )
    return line + "".join(f" {k}={v}" for k, v in more.items())


async def test_no_job_is_lost_and_only_interrupted_ones_run_twice_when_workers_are_killed_mid_run(
    app: App, dsn: str, tmp_path: Path
) -> None:
    task = register_record(app)
    await create_handled(app)
    ids: list[int] = []
    for start in range(0, JOBS, BATCH):
        specs = [sweepq.JobSpec(task, {"delay": DELAY})] * min(BATCH, JOBS - start)
        ids.extend(e.job_id for e in await app.enqueue_many(specs))
    assert len(set(ids)) == JOBS
    seed = random.randrange(2**32)  # draws the victims; printed with the figures
    rng = random.Random(seed)

    async with fleet("jobs", dsn, app.schema, tmp_path) as workers:
        async with anyio.create_task_group() as tg:
            for _ in range(WORKERS):
                tg.start_soon(workers.start)
        async with anyio.create_task_group() as tg:
            kills = await kill_during_run(app, workers, tg, JOBS, rng)

        async def all_terminal() -> bool:
            active = await fetchval(
                app, "SELECT count(*) FROM {schema}.jobs WHERE state IN ('available', 'running')"
            )
            return int(active) == 0

        await wait_until(all_terminal, workers, timeout=DONE_TIMEOUT)
        crashed = workers.crashed()
        killed = workers.killed

    schema = ident(app.schema)
    jobs = {
        r["id"]: r
        for r in await app.pool.fetch(
            f"SELECT id, state::text AS state, failure_reason, attempt, errors::text AS errors"
            f" FROM {schema}.jobs"
        )
    }
    gave_up = {
        j for j, r in jobs.items() if died_twice(r["state"], r["failure_reason"], r["errors"])
    }
    executions: dict[int, list[str]] = {}
    for r in await app.pool.fetch(f"SELECT job_id, worker FROM {schema}.handled ORDER BY n"):
        executions.setdefault(r["job_id"], []).append(r["worker"])
    errors = {job_id: r["errors"] for job_id, r in jobs.items()}
    charged = {}
    for job_id, r in jobs.items():
        other, rescued = rescues(r["errors"])
        # Each execution is charged: those rescued, and the one that ended it (if not rescued).
        if other or r["attempt"] != (job_id not in gave_up) + len(rescued):
            charged[job_id] = (r["attempt"], other, len(rescued))

    print(
        report(
            "kill -9 during jobs",
            kills,
            executions,
            rescued=sum(1 for r in jobs.values() if r["attempt"] > 1),
            failed_worker_died=len(gave_up),
            workers_started=len(workers.started),
            seed=seed,
        )
    )
    assert len(kills) == KILLS
    assert len(killed) == KILLS
    # Every kill landed mid-run, on a worker holding jobs.
    assert all(k.jobs_held > 0 and k.handled_before < JOBS for k in kills)
    problems = summary(
        {
            "worker processes that exited by themselves": crashed,
            "jobs lost": sorted(set(ids) - set(jobs)),
            "jobs not completed (nor failed worker_died after two kills)": {
                j: r["state"]
                for j, r in jobs.items()
                if r["state"] != "completed" and j not in gave_up
            },
            "jobs never handled": sorted(set(ids) - set(executions)),
            "jobs charged other than 1 + their rescues (attempt, other errors, rescues)": charged,
            **unexplained_repeats(executions, errors, killed),
        }
    )
    assert problems == {}


async def test_a_sweep_completes_with_each_leaf_enqueued_once_when_workers_are_killed_mid_walk(
    app: App, dsn: str, tmp_path: Path
) -> None:
    await create_items(app, ROWS)
    await extend_handled(app)
    cls = app.register_sweep(kill_sweep(app.schema))
    run_id = (await app.start_sweep(cls.name, {})).run_id
    scope = f"sweep:{run_id}"
    seed = random.randrange(2**32)  # draws the victims; printed with the figures
    rng = random.Random(seed)

    async with fleet("sweep", dsn, app.schema, tmp_path) as workers:
        async with anyio.create_task_group() as tg:
            for _ in range(WORKERS):
                tg.start_soon(workers.start)
        async with anyio.create_task_group() as tg:
            kills = await kill_during_run(app, workers, tg, ROWS, rng)

        async def ended() -> bool:
            run = await app.sweep_status(run_id)
            assert run is not None
            return run.ended

        await wait_until(ended, workers, timeout=DONE_TIMEOUT)
        crashed = workers.crashed()
        killed = workers.killed

    run = await app.sweep_status(run_id)
    assert run is not None
    schema = ident(app.schema)
    leaves = {
        r["id"]: r
        for r in await app.pool.fetch(
            f"SELECT id, state::text AS state, failure_reason, idempotency_key,"
            f" errors::text AS errors FROM {schema}.jobs WHERE idempotency_scope = $1",
            scope,
        )
    }
    # Leaves that two killed workers held fail worker_died (a leaf that kills its worker must not
    # take down a third); the run counts them as failed, and their rows may not have been handled.
    gave_up = {
        j: int(json.loads(r["idempotency_key"])[0])
        for j, r in leaves.items()
        if died_twice(r["state"], r["failure_reason"], r["errors"])
    }
    twice_enqueued = await app.pool.fetch(
        f"SELECT idempotency_key, count(*) AS n FROM {schema}.jobs"
        " WHERE idempotency_scope = $1 GROUP BY 1 HAVING count(*) > 1",
        scope,
    )
    by_row: dict[int, list[tuple[int, str]]] = {}
    for r in await app.pool.fetch(
        f"SELECT item_id, job_id, worker FROM {schema}.handled ORDER BY n"
    ):
        by_row.setdefault(r["item_id"], []).append((r["job_id"], r["worker"]))
    # One leaf per row: every execution of a row is of the same job.
    leaf_of = {item: {job for job, _ in ran} for item, ran in by_row.items()}
    executions = {item: [w for _, w in ran] for item, ran in by_row.items()}
    errors = {
        item: leaves[next(iter(jobs))]["errors"] if next(iter(jobs)) in leaves else "[]"
        for item, jobs in leaf_of.items()
    }
    rescued_links = await fetchval(
        app,
        "SELECT count(*) FROM {schema}.jobs WHERE idempotency_scope <> $1"
        ' AND errors @> \'[{{"kind": "worker_died"}}]\'::jsonb',
        scope,
    )

    print(
        report(
            "kill -9 during a sweep",
            kills,
            executions,
            rescued_leaves=sum(1 for r in leaves.values() if rescues(r["errors"])[1]),
            leaves_failed_worker_died=len(gave_up),
            rescued_links=rescued_links,
            links=run.links,
            workers_started=len(workers.started),
            seed=seed,
        )
    )
    assert len(kills) == KILLS
    assert all(k.jobs_held > 0 and k.handled_before < ROWS for k in kills)
    problems = summary(
        {
            "worker processes that exited by themselves": crashed,
            "run (state, enqueued, completed, failed) is not (completed, or failed when a leaf"
            " failed worker_died, rows, rows - failed, leaves failed worker_died)": (
                []
                if (run.state, run.enqueued, run.completed, run.failed)
                == (
                    sweepq.SweepState.FAILED if gave_up else sweepq.SweepState.COMPLETED,
                    ROWS,
                    ROWS - len(gave_up),
                    len(gave_up),
                )
                else [(run.state.value, run.enqueued, run.completed, run.failed, run.failure)]
            ),
            "leaves (jobs of the run) is not rows": [] if len(leaves) == ROWS else [len(leaves)],
            "leaves enqueued twice (idempotency key)": {
                r["idempotency_key"]: r["n"] for r in twice_enqueued
            },
            "leaves not completed (nor failed worker_died after two kills)": {
                j: r["state"]
                for j, r in leaves.items()
                if r["state"] != "completed" and j not in gave_up
            },
            "rows never handled (but by leaves that failed worker_died)": sorted(
                set(range(1, ROWS + 1)) - set(by_row) - set(gave_up.values())
            ),
            "rows handled by more than one leaf job": {
                item: jobs for item, jobs in leaf_of.items() if len(jobs) > 1
            },
            **unexplained_repeats(executions, errors, killed),
        }
    )
    assert problems == {}


async def test_a_worker_stopped_past_its_lease_cannot_record_its_late_outcome_and_lives_on(
    app: App, dsn: str, tmp_path: Path
) -> None:
    @app.task(name=PAUSE_TASK)
    async def pause(ctx: sweepq.Context, go: str) -> None:
        await record(app, ctx)  # worker B: records its execution and returns at once

    await create_handled(app)
    go = tmp_path / "go"
    job_id = (await app.enqueue(pause, {"go": str(go)})).job_id
    schema = ident(app.schema)

    async def handled_by() -> list[str]:
        rows = await app.pool.fetch(
            f"SELECT worker FROM {schema}.handled WHERE job_id = $1 ORDER BY n", job_id
        )
        return [r["worker"] for r in rows]

    async def claims() -> int:
        return int(await fetchval(app, "SELECT claims FROM {schema}.jobs WHERE id = $1", job_id))

    async def job_state(wanted: sweepq.JobState) -> bool:
        job = await app.get_job(job_id)
        return job is not None and job.state is wanted

    async with fleet("pause", dsn, app.schema, tmp_path) as workers:
        a = await workers.start()

        async def a_runs_it() -> bool:
            return await handled_by() == [a.worker_id]

        await wait_until(a_runs_it, workers, timeout=20)
        os.kill(a.pid, signal.SIGSTOP)
        try:
            # B rescues the job once A's lease lapses, and completes it.
            async with (
                sweepq.Worker(app, concurrency=1, **WORKER_OPTIONS) as b,
                anyio.create_task_group() as tg,
            ):
                tg.start_soon(b.run)
                await wait_until(lambda: job_state(sweepq.JobState.COMPLETED), workers, timeout=20)
                b.stop()
            assert a.alive
            done = await app.get_job(job_id)
            assert done is not None
            assert (done.state, done.attempt) == (sweepq.JobState.COMPLETED, 2)
            assert [(e.attempt, e.kind) for e in done.errors] == [(1, "lease_expired")]
            assert a.worker_id in done.errors[0].error
            assert await handled_by() == [a.worker_id, b.id]
            assert await claims() == 2
        finally:
            go.touch()
            os.kill(a.pid, signal.SIGCONT)

        # A resumes: its handler finishes and offers its outcome, which is refused.
        with anyio.fail_after(20):
            line = await a.stdout.receive_until(b"\n", 500)
        assert line.decode() == f"finished {job_id}"
        refused = f"outcome(s) of job(s) [{job_id}] not recorded"

        async def a_was_refused() -> bool:
            return refused in a.errors()

        await wait_until(a_was_refused, workers, timeout=20)
        assert await app.get_job(job_id) == done
        assert await claims() == 2

        # A lives on: it runs the next job, then stops cleanly on SIGTERM.
        again = (await app.enqueue(pause, {"go": str(go)})).job_id

        async def a_completed_again() -> bool:
            job = await app.get_job(again)
            return job is not None and job.state is sweepq.JobState.COMPLETED

        await wait_until(a_completed_again, workers, timeout=20)
        rows = await app.pool.fetch(f"SELECT worker FROM {schema}.handled WHERE job_id = $1", again)
        assert [r["worker"] for r in rows] == [a.worker_id]
        assert a.alive
        a.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            assert await a.process.wait() == 0
        assert "Traceback" not in a.errors()
    assert await app.get_job(job_id) == done
