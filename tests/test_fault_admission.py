"""Concurrency limits under a hostile load, checked continuously (committed tier, worker
subprocesses: see admission_worker_proc.py).

Two worker processes of 20 slots each work 200 keys at limit 1, half of the keyed jobs on 10 hot
keys, with a backlog kept at 20x their slots. Jobs sleep a few milliseconds; some wait for a
grant of a blocking rate limit first, some fail and are retried, some snooze, some have a
deadline that passes while they wait. Meanwhile running and waiting jobs are cancelled, terminal
ones retried, the limits of some keys changed, keys without a limit pruned and re-created,
workers killed with SIGKILL (their leases lapse and are rescued) or stopped past their lease
with SIGSTOP, and history pruned all the time.

A checker on its own connection reads, every few milliseconds and in one snapshot per read,
every key's row beside the jobs running on it. In every snapshot no key runs more jobs than its
limit, and each key's `running` equals the number of its jobs in state `running` (every
statement that moves a job into or out of `running` writes its key's row in the same
transaction, so the two never disagree in a committed state). Every disagreement is recorded
with the jobs involved (id, claim token, worker, attempted_at, errors).

SWEEPQ_SOAK_SECONDS sets how long the load lasts (default 30); run with -n 0 -s for the figures
(and the seed, SWEEPQ_SOAK_SEED, that replays the load's choices). SWEEPQ_SOAK_CHAOS=0 runs the load
alone; SWEEPQ_SOAK_AUDIT=1 records every change of running jobs and counts by trigger and writes
each breach's history out; SWEEPQ_SOAK_RATE and SWEEPQ_SOAK_PRUNE_EVERY / _OLDER_THAN (see
admission_worker_proc.py) set the rate limit and the workers' retention.

Two interleavings found with it are pinned down by tests that hold a key's row from a
transaction of their own: folding wake-ups beside an outcome write (it deadlocked), and a claim
from an older snapshot settling a key after another claim took the key's wake-up (the woken job
waited for the key's next scheduled job, or for ever).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import anyio
import asyncpg
import pytest
from anyio.abc import Process, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream

import sweepq
from admission_worker_proc import QUEUES, RATE_KEY, SLOTS, register
from sweepq.core.ident import ident
from waiting import wait_until

pytestmark = [pytest.mark.fault, pytest.mark.committed]

P = ParamSpec("P")
T = TypeVar("T")

PROC = Path(__file__).with_name("admission_worker_proc.py")
SOAK_SECONDS = float(os.environ.get("SWEEPQ_SOAK_SECONDS", "30"))
WORKERS = 2
BACKLOG = 20 * WORKERS * SLOTS  # available jobs kept waiting: 20x the slots
LIMIT = 1
HOT = [f"hot-{n}" for n in range(10)]
COLD = [f"cold-{n}" for n in range(190)]
# Keys whose limit the soak moves between 1 and SHIFT_MOST while their jobs run (a lowered
# limit may leave more running than it allows until they end; never more than SHIFT_MOST).
SHIFTING = [f"shift-{n}" for n in range(10)]
SHIFT_MOST = 2
# Keys without a limit: pruned when idle, their rows re-created by the next wake-up.
UNLIMITED = [f"free-{n}" for n in range(10)]
GROUPS = [f"group-{n}" for n in range(5)]
CHECK_PAUSE = 0.003  # between two snapshots of the checker
DRAIN_SECONDS = 90.0
# SWEEPQ_SOAK_CHAOS=0: the load alone (no cancels, retries, limit changes, kills or stops).
CHAOS = os.environ.get("SWEEPQ_SOAK_CHAOS", "1") != "0"
# What the soak's own prunes keep (the workers' is SWEEPQ_SOAK_PRUNE_OLDER_THAN, 1 s by default).
PRUNE_OLDER_THAN = timedelta(seconds=float(os.environ.get("SWEEPQ_SOAK_PRUNE_OLDER_THAN", "0")))
# SWEEPQ_SOAK_AUDIT=1: triggers record every change of a keyed job's state and of a key's
# running count (statement, transaction, backend); each breach's key is written out with them.
AUDIT = os.environ.get("SWEEPQ_SOAK_AUDIT", "0") == "1"
SAMPLE = 5
SEED = int(os.environ.get("SWEEPQ_SOAK_SEED") or random.randrange(2**32))


def most_running(key: str) -> int | None:
    """The most jobs of `key` that may be running in any snapshot (None: no limit)."""
    if key in SHIFTING:
        return SHIFT_MOST
    if key in UNLIMITED:
        return None
    return LIMIT


# One statement, so one snapshot: every key row (and every key that has running jobs without a
# row) that breaks a rule, with its running jobs as they are in that same snapshot.
CHECK = """
WITH live AS (
    SELECT concurrency_key AS key, count(*)::integer AS n FROM {schema}.jobs
    WHERE state = 'running' AND concurrency_key IS NOT NULL
    GROUP BY concurrency_key
),
bounds AS (
    SELECT * FROM unnest($1::text[], $2::integer[]) AS b(key, most)
),
broken AS (
    SELECT coalesce(k.key, l.key) AS key, k.max_running, k.running, coalesce(l.n, 0) AS n,
           k.version, k.next_run_at, b.most
    FROM {schema}.concurrency_keys AS k
    FULL JOIN live AS l ON l.key = k.key
    LEFT JOIN bounds AS b ON b.key = coalesce(k.key, l.key)
    WHERE coalesce(l.n, 0) > b.most OR k.running IS DISTINCT FROM coalesce(l.n, 0)
)
SELECT clock_timestamp()::text AS at, b.key, b.max_running, b.running, b.n, b.version,
       b.next_run_at::text AS next_run_at, b.most,
       (SELECT coalesce(json_agg(json_build_object(
                   'id', j.id, 'claims', j.claims, 'worker', j.worker_id, 'queue', j.queue,
                   'attempt', j.attempt, 'snoozes', j.snoozes,
                   'attempted_at', j.attempted_at, 'lease_expires_at', j.lease_expires_at,
                   'deadline_at', j.deadline_at, 'errors', j.errors) ORDER BY j.id), '[]')
        FROM {schema}.jobs AS j
        WHERE j.state = 'running' AND j.concurrency_key = b.key)::text AS jobs
FROM broken AS b
"""


# What is left when the drain does not end: each live job beside its key's row.
LEFT = """
SELECT j.id, j.state::text AS state, j.concurrency_key, j.queue, j.run_at::text AS run_at,
       j.worker_id, j.lease_expires_at::text AS lease_expires_at, k.running, k.max_running,
       k.next_run_at::text AS key_next_run_at, k.version,
       (SELECT count(*) FROM {schema}.concurrency_wakeups AS u
        WHERE u.key = j.concurrency_key) AS wakeups
FROM {schema}.jobs AS j LEFT JOIN {schema}.concurrency_keys AS k ON k.key = j.concurrency_key
WHERE j.state IN ('available', 'running')
ORDER BY j.id
LIMIT 20
"""


AUDIT_SCHEMA = """
CREATE UNLOGGED TABLE {schema}.admission_audit (
    n           bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    xid         bigint      NOT NULL DEFAULT txid_current(),
    pid         integer     NOT NULL DEFAULT pg_backend_pid(),
    statement   text        NOT NULL DEFAULT left(current_query(), 60),
    key         text,
    job_id      bigint,
    claims      integer,
    worker      text,
    was         text,
    became      text,
    running_was integer,
    running_now integer,
    max_running integer
);
CREATE FUNCTION {schema}.admission_audit_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.admission_audit (key, job_id, claims, worker, was, became)
    VALUES (NEW.concurrency_key, NEW.id, NEW.claims, coalesce(NEW.worker_id, OLD.worker_id),
            OLD.state::text, NEW.state::text);
    RETURN NULL;
END $$;
CREATE TRIGGER admission_audit_job AFTER UPDATE ON {schema}.jobs FOR EACH ROW
    WHEN (NEW.concurrency_key IS NOT NULL AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION {schema}.admission_audit_job();
CREATE FUNCTION {schema}.admission_audit_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO {schema}.admission_audit (key, was, running_was, max_running)
        VALUES (OLD.key, 'deleted', OLD.running, OLD.max_running);
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO {schema}.admission_audit (key, became, running_now, max_running)
        VALUES (NEW.key, 'inserted', NEW.running, NEW.max_running);
    ELSIF OLD.running IS DISTINCT FROM NEW.running
          OR OLD.max_running IS DISTINCT FROM NEW.max_running THEN
        INSERT INTO {schema}.admission_audit (key, running_was, running_now, max_running)
        VALUES (NEW.key, OLD.running, NEW.running, NEW.max_running);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER admission_audit_key AFTER INSERT OR UPDATE OR DELETE ON {schema}.concurrency_keys
    FOR EACH ROW EXECUTE FUNCTION {schema}.admission_audit_key();
"""


async def write_evidence(app: sweepq.App, violations: list[Violation], folder: Path) -> Path:
    """Each breach, and the audit of its key (SWEEPQ_SOAK_AUDIT=1), into one file."""
    path = folder / "admission-breaches.txt"
    with path.open("w") as out:
        for v in violations:
            out.write(f"== {v.kind}: {v}\n")
            if not AUDIT:
                continue
            rows = await app.pool.fetch(
                f"SELECT * FROM {ident(app.schema)}.admission_audit"
                " WHERE key = $1 AND at > $2::timestamptz - interval '10 seconds'"
                " AND at < $2::timestamptz + interval '1 second' ORDER BY n",
                v.key,
                v.at,
            )
            for r in rows:
                cells = (f"{name}={value}" for name, value in r.items() if value is not None)
                out.write("   " + " | ".join(cells))
                out.write("\n")
    return path


@dataclass
class Violation:
    """One key that broke a rule in one snapshot."""

    at: str
    key: str
    max_running: int | None
    running: int | None  # the key row's count (None: no row)
    n: int  # its jobs in state `running`
    most: int | None
    version: int | None
    next_run_at: str | None
    jobs: list[dict[str, Any]]

    @property
    def kind(self) -> str:
        if self.most is not None and self.n > self.most:
            return "over the limit"
        return "running count differs from the running jobs"

    def signature(self) -> tuple[str, str, int | None, int, tuple[tuple[int, int], ...]]:
        """The same breach seen in several snapshots has one signature."""
        tokens = tuple((int(j["id"]), int(j["claims"])) for j in self.jobs)
        return (self.kind, self.key, self.running, self.n, tokens)


@dataclass
class WorkerProcess:
    process: Process
    stdout: BufferedByteReceiveStream
    worker_id: str
    stderr: Path
    killed: bool = False
    executed: int = 0  # executions its handlers started, as it last said

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    async def read(self) -> None:
        """Follow what the worker says it executed, until its output ends."""
        with contextlib.suppress(
            anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError
        ):
            while True:
                word, n = (await self.stdout.receive_until(b"\n", 100)).decode().split()
                assert word == "executed", word
                self.executed = int(n)

    def describe(self) -> str:
        tail = self.stderr.read_text(errors="replace").splitlines()[-20:]
        return f"worker {self.worker_id} exited {self.process.returncode}:\n" + "\n".join(tail)


@dataclass
class Fleet:
    """The worker processes: those started, and which of them the soak killed."""

    dsn: str
    schema: str
    folder: Path
    readers: TaskGroup
    started: list[WorkerProcess] = field(default_factory=list)

    async def start(self) -> WorkerProcess:
        stderr = self.folder / f"worker-{len(self.started)}.stderr"
        with stderr.open("wb") as sink:
            process = await anyio.open_process(
                [sys.executable, str(PROC), self.dsn, self.schema], stderr=sink
            )
        assert process.stdout is not None
        stdout = BufferedByteReceiveStream(process.stdout)
        try:
            with anyio.fail_after(30):
                line = await stdout.receive_until(b"\n", 500)
        except BaseException as exc:
            if process.returncode is None:
                process.kill()
            await process.wait()
            await process.aclose()
            if isinstance(exc, anyio.IncompleteRead | anyio.EndOfStream):
                tail = stderr.read_text(errors="replace").splitlines()[-20:]
                raise AssertionError(
                    "a worker exited before it was ready:\n" + "\n".join(tail)
                ) from exc
            raise
        word, worker_id = line.decode().split()
        assert word == "ready", line
        worker = WorkerProcess(process, stdout, worker_id, stderr)
        self.started.append(worker)
        self.readers.start_soon(worker.read)
        return worker

    async def kill(self, worker: WorkerProcess) -> None:
        worker.killed = True
        worker.process.send_signal(signal.SIGKILL)
        with anyio.fail_after(10):
            assert await worker.process.wait() == -signal.SIGKILL

    def live(self) -> list[WorkerProcess]:
        return [w for w in self.started if w.alive and not w.killed]

    def crashed(self) -> list[str]:
        return [w.describe() for w in self.started if not w.alive and not w.killed]

    async def stop(self) -> None:
        """SIGTERM every live worker and wait for it to exit by itself (0)."""
        live = self.live()
        for worker in live:
            worker.process.send_signal(signal.SIGCONT)
            worker.process.terminate()
        for worker in live:
            with anyio.fail_after(30):
                assert await worker.process.wait() == 0, worker.describe()


@contextlib.asynccontextmanager
async def fleet(dsn: str, schema: str, folder: Path) -> AsyncIterator[Fleet]:
    """A Fleet whose processes are all gone when the block ends."""
    async with anyio.create_task_group() as readers:
        workers = Fleet(dsn, schema, folder, readers)
        try:
            yield workers
        finally:
            with anyio.CancelScope(shield=True):
                for worker in workers.started:
                    if worker.alive:
                        worker.process.kill()
                    await worker.process.wait()
                    await worker.process.aclose()
            readers.cancel_scope.cancel()


@dataclass
class Soak:
    """The load, the chaos and the checker of one run, with what each did."""

    app: sweepq.App
    task: sweepq.Task
    workers: Fleet
    rng: random.Random
    violations: list[Violation] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    limits: dict[str, int] = field(default_factory=dict)

    @property
    def schema(self) -> str:
        return ident(self.app.schema)

    def sql(self, text: str) -> str:
        return text.format(schema=self.schema)

    def spec(self) -> sweepq.JobSpec:
        rng = self.rng
        draw = rng.random()
        key: str | None
        if draw < 0.10:
            key = None
        elif draw < 0.55:
            key = rng.choice(HOT)
        elif draw < 0.91:
            key = rng.choice(COLD)
        elif draw < 0.955:
            key = rng.choice(SHIFTING)
        else:
            key = rng.choice(UNLIMITED)
        end = rng.choices(["ok", "fail", "snooze", "later"], [80, 8, 6, 6])[0]
        return sweepq.JobSpec(
            self.task,
            {"ms": rng.randint(0, 20), "end": end, "rate": rng.random() < 0.05},
            concurrency_key=key,
            queue=rng.choices(QUEUES, [80, 20])[0],
            priority=rng.randint(0, 2),
            delay=rng.uniform(0, 1) if rng.random() < 0.1 else None,
            deadline=rng.uniform(0.5, 3) if rng.random() < 0.1 else None,
            group=rng.choice(GROUPS) if rng.random() < 0.1 else None,
        )

    async def load(self) -> None:
        """Keep BACKLOG jobs available."""
        while True:
            waiting = int(
                await self.app.pool.fetchval(
                    self.sql("SELECT count(*) FROM {schema}.jobs WHERE state = 'available'")
                )
            )
            missing = BACKLOG - waiting
            if missing > 0:
                await self.app.enqueue_many([self.spec() for _ in range(missing)])
                self.counts["enqueued"] += missing
            await anyio.sleep(0.1)

    async def check(self, conn: asyncpg.Connection[asyncpg.Record]) -> None:
        keys = HOT + COLD + SHIFTING + UNLIMITED
        most = [most_running(k) for k in keys]
        statement = self.sql(CHECK)
        seen: set[tuple[Any, ...]] = set()
        while True:
            for row in await conn.fetch(statement, keys, most):
                violation = Violation(
                    at=row["at"],
                    key=row["key"],
                    max_running=row["max_running"],
                    running=row["running"],
                    n=row["n"],
                    most=row["most"],
                    version=row["version"],
                    next_run_at=row["next_run_at"],
                    jobs=json.loads(row["jobs"]),
                )
                if violation.signature() not in seen:
                    seen.add(violation.signature())
                    self.violations.append(violation)
                    print("\nVIOLATION", violation, flush=True)
                self.counts["snapshots in breach"] += 1
            self.counts["snapshots"] += 1
            await anyio.sleep(CHECK_PAUSE)

    async def tolerate(
        self, name: str, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs
    ) -> T | None:
        """Run one call of the soak's own; a deadlock or serialization failure (a lost race
        the caller is to retry) is counted, and the loop goes on."""
        try:
            return await fn(*args, **kwargs)
        except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError) as exc:
            self.counts[f"{type(exc).__name__} in {name}"] += 1
            return None

    async def pick(self, where: str) -> int | None:
        """A random job matching `where`, or None."""
        found = await self.app.pool.fetchval(
            self.sql("SELECT id FROM {schema}.jobs WHERE " + where + " ORDER BY random() LIMIT 1")
        )
        return None if found is None else int(found)

    async def cancel_and_retry(self) -> None:
        """Cancel running and waiting jobs, retry terminal and waiting ones, by groups too."""
        app, rng = self.app, self.rng
        rounds = 0
        while True:
            rounds += 1
            running = await self.pick("state = 'running' AND concurrency_key IS NOT NULL")
            if running is not None:
                await self.tolerate("cancel", app.cancel, running, reason="soak")
                self.counts["cancels of running jobs"] += 1
            waiting = await self.pick("state = 'available'")
            if waiting is not None:
                await self.tolerate("cancel", app.cancel, waiting, reason="soak")
                self.counts["cancels of waiting jobs"] += 1
            for _ in range(3):
                terminal = await self.pick(
                    "state IN ('completed', 'failed', 'cancelled') AND concurrency_key IS NOT NULL"
                )
                if terminal is not None:
                    await self.tolerate("retry", app.retry, terminal)
                    self.counts["retries of terminal jobs"] += 1
            later = await self.pick("state = 'available' AND run_at > now()")
            if later is not None:
                await self.tolerate("retry", app.retry, later)
                self.counts["retries of waiting jobs"] += 1
            if rounds % 20 == 0:
                group = rng.choice(GROUPS)
                cancelled = await self.tolerate(
                    "cancel_group",
                    app.cancel_group,
                    group,
                    include_running=True,
                    reason="soak",
                )
                self.counts["jobs cancelled by group"] += cancelled or 0
                retried = await self.tolerate(
                    "retry_group_failures", app.retry_group_failures, group
                )
                self.counts["jobs retried by group"] += retried or 0
            await anyio.sleep(0.05)

    async def shift_limits(self) -> None:
        """Move the limits of the SHIFTING keys between 1 and SHIFT_MOST while jobs run."""
        while True:
            await anyio.sleep(0.5)
            key = self.rng.choice(SHIFTING)
            limit = 1 if self.limits[key] == SHIFT_MOST else SHIFT_MOST
            await self.tolerate("set_concurrency_limit", self.app.set_concurrency_limit, key, limit)
            self.limits[key] = limit
            self.counts["limit changes"] += 1

    async def maintain(self) -> None:
        """Prune, rescue and expire from here too, beside the workers' maintenance leader."""
        while True:
            await anyio.sleep(0.3)
            removed = await self.tolerate("prune", self.app.prune, older_than=PRUNE_OLDER_THAN)
            for table, n in (removed or {}).items():
                self.counts[f"pruned here: {table}"] += n
            rescued = await self.tolerate("rescue", self.app.rescue_lapsed, grace_seconds=0)
            self.counts["rescued here"] += rescued or 0
            expired = await self.tolerate("expire", self.app.expire_deadlines)
            self.counts["expired here"] += expired or 0

    async def hurt_workers(self) -> None:
        """Now and then SIGKILL a worker that runs jobs (and start another), or SIGSTOP one
        past its lease and let it go on."""
        while True:
            await anyio.sleep(self.rng.uniform(3, 6))
            live = self.workers.live()
            if not live:
                continue
            victim = self.rng.choice(live)
            if self.rng.random() < 0.5:
                await self.workers.kill(victim)
                self.counts["workers killed"] += 1
                await self.workers.start()
            else:
                victim.process.send_signal(signal.SIGSTOP)
                await anyio.sleep(self.rng.uniform(1.2, 2.5))  # the lease is 1 s
                victim.process.send_signal(signal.SIGCONT)
                self.counts["workers stopped past their lease"] += 1

    async def watch_workers(self) -> None:
        while True:
            crashed = self.workers.crashed()
            assert not crashed, "\n".join(crashed)
            await anyio.sleep(0.2)


# The drain may take longer than DRAIN_SECONDS with a slow rate limit (SWEEPQ_SOAK_RATE).
@pytest.mark.timeout(SOAK_SECONDS + DRAIN_SECONDS + 600)
async def test_no_key_runs_more_jobs_than_its_limit_in_any_snapshot_of_a_hostile_soak(
    app: sweepq.App, tmp_path: Path
) -> None:
    task = register(app)
    if AUDIT:
        await app.pool.execute(AUDIT_SCHEMA.format(schema=ident(app.schema)))
    for key in HOT + COLD:
        await app.set_concurrency_limit(key, LIMIT)
    for key in SHIFTING:
        await app.set_concurrency_limit(key, 1)
    # JIT would compile the check for longer than the check takes (the planner's estimates of a
    # churning table are high): off, as on the app's own connections.
    checker = await asyncpg.connect(
        app.dsn, server_settings={"jit": "off", "application_name": "admission-checker"}
    )
    try:
        async with fleet(app.dsn, app.schema, tmp_path) as workers:
            soak = Soak(app, task, workers, random.Random(SEED), limits=dict.fromkeys(SHIFTING, 1))
            async with anyio.create_task_group() as checking:
                checking.start_soon(soak.check, checker)
                async with anyio.create_task_group() as tg:
                    for _ in range(WORKERS):
                        await workers.start()
                    tg.start_soon(soak.watch_workers)
                    tg.start_soon(soak.load)
                    if CHAOS:
                        tg.start_soon(soak.cancel_and_retry)
                        tg.start_soon(soak.shift_limits)
                        tg.start_soon(soak.maintain)
                        tg.start_soon(soak.hurt_workers)
                    await anyio.sleep(SOAK_SECONDS)
                    tg.cancel_scope.cancel()
                for worker in workers.live():
                    worker.process.send_signal(signal.SIGCONT)
                # The load stops; what it left drains (jobs scheduled later included).

                async def drained() -> bool:
                    crashed = workers.crashed()
                    assert not crashed, "\n".join(crashed)
                    live = await app.pool.fetchval(
                        soak.sql(
                            "SELECT count(*) FROM {schema}.jobs"
                            " WHERE state IN ('available', 'running')"
                        )
                    )
                    return int(live) == 0

                # Grants of the rate limit are reserved ahead (a slow limit under this load
                # reserves minutes of them): the drain gets that long on top.
                reserved = await app.pool.fetchval(
                    soak.sql(
                        "SELECT coalesce(max(extract(epoch FROM tat - now())), 0)::float8"
                        " FROM {schema}.rate_limits WHERE key = $1"
                    ),
                    RATE_KEY,
                )
                try:
                    await wait_until(drained, timeout=DRAIN_SECONDS + max(0.0, reserved), every=0.1)
                except TimeoutError:
                    left = await app.pool.fetch(soak.sql(LEFT))
                    raise AssertionError(f"not drained: {[dict(r) for r in left]}") from None
                checking.cancel_scope.cancel()
            await workers.stop()
            soak.counts["executions (at least)"] = sum(w.executed for w in workers.started)
            soak.counts["worker processes"] = len(workers.started)
    finally:
        await checker.close()

    keys = await app.pool.fetch(
        soak.sql("SELECT key, running FROM {schema}.concurrency_keys WHERE running <> 0")
    )
    print(
        f"\nadmission soak {SOAK_SECONDS:g}s (seed {SEED}):"
        f" {soak.counts['enqueued']} jobs enqueued,"
        f" {soak.counts['executions (at least)']} executions,"
        f" {soak.counts['snapshots']} snapshots, {len(soak.violations)} breaches"
    )
    for name, n in sorted(soak.counts.items()):
        print(f"  {name}: {n}")
    if soak.violations:
        evidence = os.environ.get("SWEEPQ_SOAK_EVIDENCE")
        print(
            "breaches written to",
            await write_evidence(app, soak.violations, Path(evidence) if evidence else tmp_path),
        )
    assert [(v.kind, v.key, v.running, v.n, v.at, v.jobs) for v in soak.violations][:SAMPLE] == []
    assert keys == []
    assert soak.counts["snapshots"] > 0
    assert soak.counts["executions (at least)"] > 0


async def waiting_for_a_lock(app: sweepq.App, name: str) -> bool:
    """Whether the connection named `name` waits for a lock."""
    waiting = await app.pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name = $1 AND wait_event_type = 'Lock'",
        name,
    )
    return int(waiting) > 0


async def test_folding_wake_ups_locks_key_rows_in_key_order_beside_an_outcome_write(
    app: sweepq.App,
) -> None:
    # Twenty keys with a job waiting each, so a wake-up each. An outcome write holds the first
    # of two keys it frees (it locks them in key order, as concurrency_release does) while the
    # prune folds the wake-ups: the fold waits for that key holding none after it, so the
    # outcome write takes its second key and both end. Folded in another order, the fold held
    # the second key already, and one of the two was chosen as a deadlock's victim.
    task = register(app)
    keys = [f"k{n:02}" for n in range(20)]
    await app.enqueue_many(
        [
            sweepq.JobSpec(task, {"ms": 0, "end": "ok", "rate": False}, concurrency_key=key)
            for key in keys
        ]
    )
    schema = ident(app.schema)
    await app.pool.execute(
        f"INSERT INTO {schema}.concurrency_keys (key, next_run_at)"
        " SELECT k, now() FROM unnest($1::text[]) AS k",
        keys,
    )
    lock = (
        f"SELECT key FROM {schema}.concurrency_keys WHERE key = ANY($1::text[])"
        " ORDER BY key FOR NO KEY UPDATE"
    )
    name = f"fold {app.schema}"
    # Without sorts the fold aggregates its wake-ups by hash, as its plan does over a large
    # table: an order of keys of its own, unless the statement sets one.
    folder = await asyncpg.connect(
        app.dsn, server_settings={"application_name": name, "enable_sort": "off"}
    )
    writer = await asyncpg.connect(app.dsn)
    folded: list[int] = []

    async def fold() -> None:
        folded.append(await app.queries.concurrency_wakeup_apply(folder, 1_000))

    try:
        async with anyio.create_task_group() as tg, writer.transaction():
            await writer.fetch(lock, ["k10"])
            tg.start_soon(fold)
            await wait_until(lambda: waiting_for_a_lock(app, name), timeout=10)
            # Waits (past deadlock_timeout) if the fold holds one of these keys.
            await writer.fetch(lock, keys[11:])
    finally:
        await folder.close()
        await writer.close()
    assert folded == [20]
    assert await app.pool.fetchval(f"SELECT count(*) FROM {schema}.concurrency_wakeups") == 0


async def test_a_claim_from_an_older_snapshot_never_settles_a_key_past_a_job_it_did_not_see(
    app: sweepq.App,
) -> None:
    # Key k has one job, scheduled in an hour, and is still in the claims' walk (as after a
    # claim took its last due job). Claim 1 reads k with nothing due, then waits for k's row.
    # Meanwhile a due job of k is enqueued (with its wake-up), and claim 2, asked for one job,
    # reads k, takes the wake-up and runs a job of higher priority instead. When claim 1 goes
    # on, the wake-up is gone: had it moved k to its job in an hour (what its snapshot saw),
    # the due job would wait that hour. Every claim that takes a wake-up moves its key's
    # version, and claim 1's move is dropped.
    task = register(app)
    args = {"ms": 0, "end": "ok", "rate": False}
    await app.set_concurrency_limit("k", 5)
    await app.enqueue(task, args, concurrency_key="k", delay=3_600)
    await app.queries.concurrency_wakeup_apply(app.pool, 100)
    schema = ident(app.schema)
    await app.pool.execute(
        f"UPDATE {schema}.concurrency_keys SET next_run_at = now() - interval '1 second'"
        " WHERE key = 'k'"
    )
    first, second = f"claim 1 {app.schema}", f"claim 2 {app.schema}"
    holder = await asyncpg.connect(app.dsn)
    one = await asyncpg.connect(app.dsn, server_settings={"application_name": first})
    two = await asyncpg.connect(app.dsn, server_settings={"application_name": second})
    try:
        async with anyio.create_task_group() as tg, holder.transaction():
            await holder.execute(
                f"SELECT key FROM {schema}.concurrency_keys WHERE key = 'k' FOR NO KEY UPDATE"
            )
            tg.start_soon(app.queries.job_claim, one, ["default"], 10, "w1", 30.0)
            await wait_until(lambda: waiting_for_a_lock(app, first), timeout=10)
            due = await app.enqueue(task, args, concurrency_key="k")
            other = await app.enqueue(task, args, priority=10)
            claimed: list[int] = []

            async def claim_two() -> None:
                batch = await app.queries.job_claim(two, ["default"], 1, "w2", 30.0)
                claimed.extend(job.id for job in batch.jobs)

            tg.start_soon(claim_two)

            async def two_waits_or_ended() -> bool:
                return bool(claimed) or await waiting_for_a_lock(app, second)

            await wait_until(two_waits_or_ended, timeout=10, every=0.1)
        assert claimed == [other.job_id]
        batch = await app.queries.job_claim(app.pool, ["default"], 10, "w3", 30.0)
        assert [job.id for job in batch.jobs] == [due.job_id]
    finally:
        for conn in (holder, one, two):
            await conn.close()
