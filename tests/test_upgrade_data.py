"""An upgrade carries live data forward: a database that sweepq of commit 12d7951 (the oldest
supported schema: core 0001-0002, sweeps 0001) populated and was working on, stopped half-way,
migrated and worked by today's code, finishes every job and sweep exactly.

The old code runs in a subprocess (tests/upgrade_oldest_proc.py, from the repository's history:
see upgrade_history.py) until the database holds jobs in every state: completed, failed,
cancelled, available now and scheduled later, running under a lease of the worker about to be
killed, keyed jobs at their key's limit with more waiting behind it, cron ticks, and a table
sweep half-way through whose items sometimes fail (some failed for good, some waiting for a
retry, some running, the walk not finished). Then the worker is killed, today's `App.migrate()`
runs, and a worker of today's code works until everything has settled.

A rolling deploy from that version is not supported (the last test shows why): its processes
must stop before the migration.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import pytest

import sweepq
import upgrade_oldest_proc as old
from conftest import new_schema
from factories import drop_schema
from sweepq.core.ident import ident
from sweepq.sweeps.naming import leaf_group, leaf_task_name, link_task_name
from upgrade_checks import most_at_once, wait_until
from upgrade_history import OLDEST, OldProcess, old_source, run_to_end

pytestmark = pytest.mark.committed

PROC = "upgrade_oldest_proc.py"
# What the old code's own migrations made: everything else is applied by today's.
OLD_VERSIONS = {("core", 1), ("core", 2), ("sweeps", 1)}
HALF_WAY_TIMEOUT = 30.0
SETTLE_TIMEOUT = 60.0
TICKS_AFTER = 2  # cron ticks that must complete after the upgrade
RESCUED = "worker_died"  # the kind of error today's rescue records when a worker died
TERMINAL = ("completed", "failed", "cancelled")
LEAF = leaf_task_name(old.SWEEP)
LINK = link_task_name(old.SWEEP)
QUEUES = ["default", old.SWEEP_QUEUE, old.IDLE]
WORKER_OPTIONS: dict[str, Any] = {
    "lease_seconds": 2.0,
    "heartbeat_seconds": 0.5,
    "poll_seconds": 0.1,
    "maintenance_seconds": 0.2,
    "leader_ttl_seconds": 1.0,
    "prune_every": None,
}

# The items as the old code leaves them: the first pages fanned out and worked, the next one
# held by its worker, the rest of the walk not read yet.
BEFORE_HOLD = range(1, old.HOLD_FROM)
HELD_ITEMS = range(old.HOLD_FROM, old.HOLD_FROM + old.PAGE_SIZE)
HALF_WAY = {
    (old.RECORD, "completed"): old.RECORDS,
    (old.RECORD, "cancelled"): old.CANCELLED,
    (old.RECORD, "available"): old.IDLE_NOW + old.IDLE_SOON + old.IDLE_LATER,
    (old.FAIL, "failed"): old.FAILS,
    (old.HOLD, "running"): old.HOLDS,
    (old.KEYED, "completed"): old.KEYED_DONE,
    (old.KEYED, "running"): old.KEY_LIMIT,
    (old.KEYED, "available"): old.KEYED_JOBS - old.KEYED_DONE - old.KEY_LIMIT,
    (LEAF, "completed"): sum(
        not old.always_fails(i) and not old.retried_once(i) for i in BEFORE_HOLD
    ),
    (LEAF, "failed"): sum(old.always_fails(i) for i in BEFORE_HOLD),
    (LEAF, "waiting for a retry"): sum(old.retried_once(i) for i in BEFORE_HOLD),
    (LEAF, "running"): len(HELD_ITEMS),
}

JOBS_SQL = """
SELECT id, task, queue, state::text AS state, attempt, run_at, finished_at, created_at,
       idempotency_scope, idempotency_key, errors::text AS errors,
       (args::jsonb ->> 'n')::int AS n, (args::jsonb -> 'item' ->> 'id')::bigint AS item
FROM {schema}.jobs ORDER BY id
"""


@pytest.fixture(scope="session")
def oldest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return old_source(OLDEST, tmp_path_factory.mktemp("sweepq-oldest"))


@pytest.fixture
async def conn(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(dsn)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
async def schema(conn: asyncpg.Connection) -> AsyncIterator[str]:
    """A fresh schema name for the old code to create; dropped afterwards."""
    name = new_schema()
    try:
        yield name
    finally:
        await drop_schema(conn, name)


# today's code of the same application ------------------------------------------------------------


async def started(ctx: sweepq.Context, *, n: int | None = None, item: int | None = None) -> int:
    return int(
        await ctx.app.pool.fetchval(
            f"INSERT INTO {ident(ctx.app.schema)}.handled (job_id, task, n_arg, item, code, worker)"
            " VALUES ($1, $2, $3, $4, 'current', $5) RETURNING n",
            ctx.job_id,
            ctx.task,
            n,
            item,
            ctx.worker_id,
        )
    )


async def ended(ctx: sweepq.Context, row: int) -> None:
    await ctx.app.pool.execute(
        f"UPDATE {ident(ctx.app.schema)}.handled SET ended_at = clock_timestamp() WHERE n = $1",
        row,
    )


def current_app(dsn: str, schema: str) -> sweepq.App:
    """The application of upgrade_oldest_proc.py as today's code writes it: the same tasks,
    sweep and schedule; what held its worker there returns here."""
    app = sweepq.App(dsn, schema=schema, pool_max_size=30)

    async def record(ctx: sweepq.Context, n: int) -> None:
        await ended(ctx, await started(ctx, n=n))

    async def fail(ctx: sweepq.Context, n: int) -> None:
        await started(ctx, n=n)
        raise RuntimeError(f"job {n} fails")

    async def keyed(ctx: sweepq.Context, n: int) -> None:
        row = await started(ctx, n=n)
        await anyio.sleep(0.05)
        await ended(ctx, row)

    async def tick(ctx: sweepq.Context) -> None:
        return None

    app.task(name=old.RECORD)(record)
    app.task(name=old.FAIL, max_attempts=1)(fail)
    app.task(name=old.HOLD)(record)
    app.task(name=old.KEYED)(keyed)
    app.task(name=old.TICK)(tick)

    class Items(sweepq.TableSweep):
        name = old.SWEEP
        table = f"{schema}.items"
        key = ("id",)
        page_size = old.PAGE_SIZE
        window = old.WINDOW
        max_attempts = old.LEAF_ATTEMPTS
        queue = old.SWEEP_QUEUE
        priority = old.SWEEP_PRIORITY

        async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
            i = int(item["id"])
            row = await started(ctx, item=i)
            if old.always_fails(i):
                raise RuntimeError(f"item {i} always fails")
            if old.retried_once(i) and ctx.attempt == 1:
                raise sweepq.RetryAfter(timedelta(seconds=0.2))
            await ended(ctx, row)

    app.register_sweep(Items)
    app.cron(old.CRON, old.CRON_EXPRESSION, old.TICK)
    return app


# the database, read directly ---------------------------------------------------------------------


async def read_jobs(conn: asyncpg.Connection, schema: str) -> dict[int, asyncpg.Record]:
    return {r["id"]: r for r in await conn.fetch(JOBS_SQL.format(schema=ident(schema)))}


def half_way(jobs: dict[int, asyncpg.Record]) -> dict[tuple[str, str], int]:
    """Jobs per (task, state) as HALF_WAY counts them (leaves waiting for a retry apart),
    without links and ticks."""
    now = datetime.now().astimezone()
    seen: Counter[tuple[str, str]] = Counter()
    for r in jobs.values():
        if r["task"] in (LINK, old.TICK):
            continue
        state = r["state"]
        if r["task"] == LEAF and state == "available" and r["attempt"] >= 1 and r["run_at"] > now:
            state = "waiting for a retry"
        seen[r["task"], state] += 1
    return dict(seen)


@dataclass(frozen=True)
class HalfWay:
    """The schema as the killed old worker left it."""

    killed_at: datetime
    jobs: dict[int, asyncpg.Record]
    run_id: int

    @property
    def leaves(self) -> dict[int, asyncpg.Record]:
        return {i: r for i, r in self.jobs.items() if r["task"] == LEAF}

    @property
    def later(self) -> set[int]:
        """The jobs scheduled for an hour later: they still wait when everything else ended."""
        soon = self.killed_at + timedelta(minutes=30)
        return {i for i, r in self.jobs.items() if r["state"] == "available" and r["run_at"] > soon}

    def ids(self, *states: str) -> set[int]:
        return {i for i, r in self.jobs.items() if r["state"] in states}


# the test ----------------------------------------------------------------------------------------


async def test_an_upgrade_from_the_oldest_schema_finishes_every_job_and_sweep_exactly(
    dsn: str, oldest: Path, tmp_path: Path, conn: asyncpg.Connection, schema: str
) -> None:
    before = await work_half_way(dsn, schema, oldest, tmp_path, conn)
    app = current_app(dsn, schema)
    async with app:
        applied = await app.migrate()
        assert applied == [
            m.label for m in app.migrations() if (m.component, m.version) not in OLD_VERSIONS
        ]
        await check_carried_forward(app, conn, before)
        await work_until_settled(app, conn, before)
        after = await read_jobs(conn, schema)
        await check_jobs(conn, schema, before, after)
        await check_sweep(app, before, after)
    await check_keys_and_cron(conn, schema, before, after)


async def work_half_way(
    dsn: str, schema: str, oldest: Path, tmp_path: Path, conn: asyncpg.Connection
) -> HalfWay:
    """Run the old code until its schema is half-way (HALF_WAY, and ticks), then kill it."""
    process = await OldProcess.start(oldest, PROC, [dsn, schema], log=tmp_path / "old worker.log")
    try:

        async def is_half_way() -> str | None:
            jobs = await read_jobs(conn, schema)
            ticks = sum(r["task"] == old.TICK and r["state"] == "completed" for r in jobs.values())
            if half_way(jobs) != HALF_WAY or ticks == 0:
                return f"jobs per (task, state) {half_way(jobs)}, {ticks} ticks completed"
            # A held job is claimed a moment before its handler records its start: kill the
            # worker only once every one of them has (the checks count that record).
            started = await executions(conn, schema)
            held = [
                i
                for i, r in jobs.items()
                if r["state"] == "running" and r["task"] in (old.HOLD, old.KEYED, LEAF)
            ]
            if any(i not in started for i in held):
                return "a held job's handler has not recorded its start yet"
            return None

        await wait_until(is_half_way, timeout=HALF_WAY_TIMEOUT, processes=[process])
    finally:
        await process.close()
    killed_at: datetime = await conn.fetchval("SELECT clock_timestamp()")
    jobs = await read_jobs(conn, schema)
    assert half_way(jobs) == HALF_WAY, "the old worker moved on before it was killed"
    run = await conn.fetchrow(f"SELECT * FROM {ident(schema)}.sweep_runs")
    assert run is not None
    assert (run["state"], run["draining"]) == ("running", False)
    assert run["enqueued"] == len(BEFORE_HOLD) + len(HELD_ITEMS) < old.ITEMS
    before = HalfWay(killed_at, jobs, run["id"])
    assert {r["idempotency_scope"] for r in before.leaves.values()} == {leaf_group(run["id"])}
    assert len(before.later) == old.IDLE_LATER
    return before


async def check_carried_forward(app: sweepq.App, conn: asyncpg.Connection, before: HalfWay) -> None:
    """Right after the migration: the run's old leaves are in its group, and it says where its
    links run."""
    by_state = Counter(r["state"] for r in before.leaves.values())
    assert await app.group_counts(leaf_group(before.run_id)) == sweepq.GroupCounts(**by_state), (
        "the leaves enqueued before the upgrade are not in their run's job group"
    )
    failures = await app.sweep_failures(before.run_id)
    assert sorted(f.job_id for f in failures) == sorted(before.ids("failed") & set(before.leaves))
    links_on = await conn.fetchrow(
        f"SELECT queue, link_priority FROM {ident(app.schema)}.sweep_runs WHERE id = $1",
        before.run_id,
    )
    assert links_on is not None
    assert tuple(links_on) == (old.SWEEP_QUEUE, old.SWEEP_PRIORITY + 1), (
        "the run does not say where its links run"
    )


async def work_until_settled(app: sweepq.App, conn: asyncpg.Connection, before: HalfWay) -> None:
    """Today's worker until the run has ended, every job but the later ones has ended, and the
    schedule has ticked TICKS_AFTER times; then what the last tick enqueued."""

    async def settled() -> str | None:
        jobs = await read_jobs(conn, app.schema)
        active = [i for i, r in jobs.items() if r["state"] in ("available", "running")]
        waiting = [i for i in active if i not in before.later and jobs[i]["task"] != old.TICK]
        ticks = sum(
            r["task"] == old.TICK
            and r["created_at"] > before.killed_at
            and r["state"] == "completed"
            for r in jobs.values()
        )
        run = await app.sweep_status(before.run_id)
        assert run is not None
        if waiting or run.state in ("running", "paused") or ticks < TICKS_AFTER:
            return f"jobs {waiting} active, run {run.state}, {ticks} ticks since the upgrade"
        return None

    async with (
        sweepq.Worker(app, queues=QUEUES, concurrency=20, **WORKER_OPTIONS) as worker,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run)
        await wait_until(settled, timeout=SETTLE_TIMEOUT)
        worker.stop()
    async with sweepq.Worker(app, queues=QUEUES, concurrency=5, **WORKER_OPTIONS) as drain:
        await drain.run_until_idle()


async def executions(conn: asyncpg.Connection, schema: str) -> dict[int, list[asyncpg.Record]]:
    """The executions each job's handler recorded, in order."""
    ran: dict[int, list[asyncpg.Record]] = {}
    for e in await conn.fetch(f"SELECT * FROM {ident(schema)}.handled ORDER BY n"):
        ran.setdefault(e["job_id"], []).append(e)
    return ran


async def check_jobs(
    conn: asyncpg.Connection, schema: str, before: HalfWay, after: dict[int, asyncpg.Record]
) -> None:
    ran = await executions(conn, schema)
    # Nothing lost: every job has ended, but those scheduled for later, which still wait.
    assert {i for i, r in after.items() if r["state"] in ("available", "running")} == before.later
    for i in before.later:
        assert (after[i]["run_at"], after[i]["attempt"]) == (before.jobs[i]["run_at"], 0)
    # What had ended before the upgrade is untouched, and never ran again.
    for i in before.ids(*TERMINAL):
        assert after[i] == before.jobs[i], f"job {i} changed after it had ended"
        assert {e["code"] for e in ran.get(i, [])} <= {old.CODE}, f"job {i} ran again"
    # Jobs held by the killed worker were rescued (their attempt counts) and ran once more.
    for i in before.ids("running"):
        r = before.jobs[i]
        if r["task"] not in (old.HOLD, old.KEYED, LEAF):
            continue  # the link, and perhaps a tick
        assert after[i]["attempt"] == r["attempt"] + 1
        assert [e["kind"] for e in json.loads(after[i]["errors"])][:1] == [RESCUED], r
        assert [(e["code"], e["ended_at"] is not None) for e in ran[i]] == [
            (old.CODE, False),
            ("current", not old.always_fails(r["item"] or 0)),
        ]
    # Every other job completed, and those that record ran to their end once.
    for i, r in after.items():
        if i in before.later or i in before.ids(*TERMINAL) or r["task"] == LEAF:
            continue
        assert r["state"] == "completed", f"job {i} ({r['task']}) ended {r['state']}"
        if r["task"] in (old.RECORD, old.HOLD, old.KEYED):
            assert sum(e["ended_at"] is not None for e in ran[i]) == 1, r


async def check_sweep(app: sweepq.App, before: HalfWay, after: dict[int, asyncpg.Record]) -> None:
    """One leaf per item, each ended as its item's rule says, and the run counted them all."""
    leaves = {i: r for i, r in after.items() if r["task"] == LEAF}
    group = leaf_group(before.run_id)
    assert sorted(r["item"] for r in leaves.values()) == list(range(1, old.ITEMS + 1))
    assert {r["idempotency_scope"] for r in leaves.values()} == {group}
    for r in leaves.values():
        assert r["state"] == ("failed" if old.always_fails(r["item"]) else "completed"), r
    by_state = Counter(r["state"] for r in leaves.values())
    run = await app.sweep_status(before.run_id)
    assert run is not None
    # Items that always fail are undone: the run that walked to its end ends failed.
    assert (run.state, run.walked) == ("failed" if by_state["failed"] else "completed", True)
    assert (run.enqueued, run.completed, run.failed, run.cancelled) == (
        old.ITEMS,
        by_state["completed"],
        by_state["failed"],
        by_state["cancelled"],
    )
    assert await app.group_counts(group) == sweepq.GroupCounts(**by_state)
    failures = await app.sweep_failures(before.run_id, limit=1000)
    failed = {i for i, r in leaves.items() if r["state"] == "failed"}
    assert sorted(f.job_id for f in failures) == sorted(failed)
    assert failed >= before.ids("failed") & set(before.leaves)


async def check_keys_and_cron(
    conn: asyncpg.Connection, schema: str, before: HalfWay, after: dict[int, asyncpg.Record]
) -> None:
    q = ident(schema)
    # Keyed jobs never ran more at once than the limit (an execution the kill ended counts until
    # the kill), and the key holds no slot any more.
    spans = [
        (e["started_at"], e["ended_at"] or before.killed_at)
        for e in await conn.fetch(f"SELECT * FROM {q}.handled WHERE task = $1", old.KEYED)
    ]
    assert len(spans) == old.KEYED_JOBS + old.KEY_LIMIT
    assert most_at_once(spans) == old.KEY_LIMIT
    keys = f"SELECT running FROM {q}.concurrency_keys WHERE key = $1"
    assert await conn.fetchval(keys, old.KEY) == 0
    # The schedule ticks again, once per tick.
    ticks = [r for r in after.values() if r["task"] == old.TICK]
    assert sum(r["created_at"] > before.killed_at for r in ticks) >= TICKS_AFTER
    assert len({r["idempotency_key"] for r in ticks}) == len(ticks)
    schedule = f"SELECT last_run_at FROM {q}.cron_schedules WHERE name = $1"
    assert await conn.fetchval(schedule, old.CRON) > before.killed_at


async def test_keyed_jobs_12d7951_enqueues_after_the_migration_wait_for_their_keys_next_enqueue(
    dsn: str, oldest: Path, conn: asyncpg.Connection, schema: str
) -> None:
    """Why a rolling deploy from 12d7951 is not supported: its enqueue leaves no wake-up for a
    key (core 0003 made claims read keys through them), so keyed jobs it adds after the
    migration wait, unseen by the claim, until today's code enqueues a job of the same key."""
    migrated = await run_to_end(oldest, PROC, [dsn, schema, "migrate"])
    assert migrated.returncode == 0, migrated.stderr.decode(errors="replace")
    await conn.execute(f"CREATE TABLE {ident(schema)}.handled ({old.HANDLED})")
    app = current_app(dsn, schema)
    async with app:
        await app.migrate()
        late = await run_to_end(oldest, PROC, [dsn, schema, "late-keyed"])
        assert late.returncode == 0, late.stderr.decode(errors="replace")

        async def state_of(job_id: int) -> str | None:
            job = await app.get_job(job_id)
            return None if job is None else job.state

        async def waiting() -> int:
            return int(
                await conn.fetchval(
                    f"SELECT count(*) FROM {ident(schema)}.jobs"
                    " WHERE state = 'available' AND concurrency_key = $1",
                    old.LATE_KEY,
                )
            )

        async with (
            sweepq.Worker(app, concurrency=5, **WORKER_OPTIONS) as worker,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(worker.run)
            # A job of today's code, due a second later, completes: the worker claimed all along.
            probe = await app.enqueue(old.RECORD, {"n": 0}, delay=1.0)

            async def probed() -> str | None:
                state = await state_of(probe.job_id)
                return None if state == "completed" else f"probe {state}"

            await wait_until(probed, timeout=20)
            assert await waiting() == old.LATE_KEYED
            # Today's next enqueue of the key wakes it, and every job of it runs.
            await app.enqueue(old.KEYED, {"n": old.LATE_KEYED}, concurrency_key=old.LATE_KEY)

            async def all_ran() -> str | None:
                left = await waiting()
                return None if left == 0 else f"{left} jobs of {old.LATE_KEY} waiting"

            await wait_until(all_ran, timeout=20)
            worker.stop()
