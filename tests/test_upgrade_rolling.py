"""A rolling deploy from the previous release (0.1.0, commit c7da320): migrate first, then processes
of the old and new versions side by side.

A 0.1.0 worker and a 0.1.0 enqueuer (tests/upgrade_previous_proc.py, from the repository's
history: see upgrade_history.py) work a schema that 0.1.0 made, with a sweep half-way; today's
code migrates it while they run. The 0.1.0 enqueuer goes on enqueuing (plain jobs, keyed jobs,
and keyed jobs through the SQL function), the 0.1.0 worker goes on working, and a worker of
today's code joins it; then the 0.1.0 processes stop and today's worker finishes. Every job
completes, each exactly once, the key's limit holds across both versions, and nothing is left
waiting. The 0.1.0 processes connect as the schema's owner, and again as a role of their own
holding what 0.1.0 needed (its tables; its functions were PUBLIC's), which gets the grant the
ops guide's "Upgrading" asks for before the migration. A 0.1.0 worker *started* after the
migration refuses the newer schema; a 0.1.0 enqueuer started after it enqueues as before.

The tests are written against whatever migrations today's code has: they migrate from 0.1.0's
ledger to all of them, so they keep checking as migrations are added.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import asyncpg
import pytest

import sweepq
import upgrade_previous_proc as previous_app
from conftest import new_schema
from factories import drop_schema
from sweepq.core.ident import ident
from sweepq.sweeps.naming import leaf_group, leaf_task_name, link_task_name
from upgrade_checks import most_at_once, wait_until
from upgrade_history import PREVIOUS, OldProcess, old_source, run_to_end

pytestmark = pytest.mark.committed

PROC = "upgrade_previous_proc.py"
LEAF = leaf_task_name(previous_app.SWEEP)
LINK = link_task_name(previous_app.SWEEP)
PATHS = ("plain", "keyed", "sql")  # how the enqueuer enqueues
STEP_TIMEOUT = 30.0
AT_LEAST = 10  # jobs each worker must do, and each path enqueue, at each step
ROLE_PASSWORD = "sweepq-test"  # for servers that do not trust local connections


@pytest.fixture(scope="session")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return old_source(PREVIOUS, tmp_path_factory.mktemp("sweepq-previous"))


@pytest.fixture
async def conn(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(dsn)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
async def schema(dsn: str, previous: Path, conn: asyncpg.Connection) -> AsyncIterator[str]:
    """A fresh schema set up by 0.1.0 (`setup`: migrated, a sweep started); dropped afterwards."""
    name = new_schema()
    try:
        done = await run_to_end(previous, PROC, ["setup", dsn, name])
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        yield name
    finally:
        await drop_schema(conn, name)


@dataclass(frozen=True)
class OldRole:
    """Who the 0.1.0 processes connect as: the schema's owner, or a role of their own."""

    dsn: str
    role: str | None = None


@pytest.fixture(params=["owner", "own role"])
async def old_role(
    request: pytest.FixtureRequest, dsn: str, conn: asyncpg.Connection, schema: str
) -> AsyncIterator[OldRole]:
    """The owner, or a role granted what 0.1.0 needed of a schema it does not own: its tables
    and sequences (its functions were PUBLIC's)."""
    if request.param == "owner":
        yield OldRole(dsn)
        return
    role = f"{schema}_old"
    q, r = ident(schema), ident(role)
    await conn.execute(
        f"CREATE ROLE {r} LOGIN PASSWORD '{ROLE_PASSWORD}';"
        f"GRANT USAGE ON SCHEMA {q} TO {r};"
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {q} TO {r};"
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {q} TO {r}"
    )
    parts = urlsplit(dsn)
    port = f":{parts.port}" if parts.port else ""
    netloc = f"{role}:{ROLE_PASSWORD}@{parts.hostname or ''}{port}"
    try:
        yield OldRole(urlunsplit(parts._replace(netloc=netloc)), role)
    finally:
        await conn.execute(f"DROP OWNED BY {r}; DROP ROLE {r}")


def current_app(dsn: str, schema: str) -> sweepq.App:
    """The same application in today's code."""
    app = sweepq.App(dsn, schema=schema, pool_max_size=20)
    previous_app.register(app, schema, "current")
    return app


@dataclass
class Deploy:
    """The schema under the deploy, the 0.1.0 processes, and what the test reads as it goes."""

    conn: asyncpg.Connection
    schema: str
    old_worker: OldProcess
    enqueuer: OldProcess
    marks: dict[str, datetime] = field(default_factory=dict)

    @property
    def q(self) -> str:
        return ident(self.schema)

    async def mark(self, name: str) -> datetime:
        """Remember the database's time now as `name`."""
        self.marks[name] = await self.conn.fetchval("SELECT clock_timestamp()")
        return self.marks[name]

    async def wait(self, check: Callable[[], Awaitable[str | None]]) -> None:
        olds = [p for p in (self.old_worker, self.enqueuer) if p.process.returncode is None]
        await wait_until(check, timeout=STEP_TIMEOUT, processes=olds)

    async def jobs(self) -> list[asyncpg.Record]:
        return await self.conn.fetch(
            f"SELECT id, task, state::text AS state, created_at, args::jsonb ->> 'via' AS via,"
            f" (args::jsonb ->> 'n')::int AS n, (args::jsonb -> 'item' ->> 'id')::int AS item"
            f" FROM {self.q}.jobs ORDER BY id"
        )

    async def executions(self) -> list[asyncpg.Record]:
        return await self.conn.fetch(f"SELECT * FROM {self.q}.handled ORDER BY n")

    async def done_by(self, worker: str, since: str) -> int:
        """Jobs (not leaves) `worker` ran to their end since mark `since`."""
        return int(
            await self.conn.fetchval(
                f"SELECT count(*) FROM {self.q}.handled"
                " WHERE worker = $1 AND ended_at > $2 AND task <> $3",
                worker,
                self.marks[since],
                LEAF,
            )
        )

    async def enqueued_since(self, since: str) -> Counter[str]:
        """Jobs the enqueuer made since mark `since`, per path."""
        paths: Counter[str] = Counter()
        for r in await self.jobs():
            if r["created_at"] <= self.marks[since] or r["task"] in (LEAF, LINK):
                continue
            if r["task"] == previous_app.PLAIN:
                paths["plain"] += 1
            else:
                paths["sql" if r["via"] == "sql" else "keyed"] += 1
        return paths


async def test_a_rolling_deploy_from_0_1_0_finishes_every_job_exactly_once(
    dsn: str,
    previous: Path,
    tmp_path: Path,
    conn: asyncpg.Connection,
    schema: str,
    old_role: OldRole,
) -> None:
    before = {
        (r[0], r[1])
        for r in await conn.fetch(
            f"SELECT component, version FROM {ident(schema)}.schema_migrations"
        )
    }
    run_id: int = await conn.fetchval(f"SELECT id FROM {ident(schema)}.sweep_runs")
    processes: list[OldProcess] = []
    try:
        for role in ("worker", "enqueuer"):
            log = tmp_path / f"0.1.0 {role}.log"
            args = [role, old_role.dsn, schema]
            processes.append(await OldProcess.start(previous, PROC, args, log=log))
        deploy = Deploy(conn, schema, processes[0], processes[1])
        await deploy.mark("start")
        await old_code_at_work(deploy)
        app = current_app(dsn, schema)
        async with app:
            applied = await app.migrate()
            assert applied == [
                m.label for m in app.migrations() if (m.component, m.version) not in before
            ]
            assert applied, "today's code has no migration that 0.1.0 lacks"
            await deploy.mark("migrated")
            await conn.execute(f"INSERT INTO {deploy.q}.gate VALUES (clock_timestamp())")
            await old_code_goes_on(deploy)
            new_worker, total = await side_by_side_then_alone(app, deploy, run_id)
            run = await app.sweep_status(run_id)
            counts = await app.group_counts(leaf_group(run_id))
        await check_everything_ran_once(deploy, new_worker, total)
        assert run is not None
        assert run.state == "completed"
        done = previous_app.ITEMS
        assert (run.enqueued, run.completed, run.failed, run.cancelled) == (done, done, 0, 0)
        assert counts == sweepq.GroupCounts(completed=done)
    finally:
        for p in processes:
            await p.close()


async def old_code_at_work(deploy: Deploy) -> None:
    """Before the migration: the 0.1.0 worker works, and its sweep waits at the gate with leaves
    running."""

    async def working() -> str | None:
        done = await deploy.done_by(deploy.old_worker.worker_id, "start")
        at_gate = await deploy.conn.fetchval(
            f"SELECT count(*) FROM {deploy.q}.handled WHERE task = $1 AND ended_at IS NULL", LEAF
        )
        if done < AT_LEAST or at_gate == 0:
            return f"0.1.0 worker did {done} jobs, {at_gate} leaves at the gate"
        return None

    await deploy.wait(working)


async def old_code_goes_on(deploy: Deploy) -> None:
    """After the migration, the 0.1.0 processes go on: enqueues by every path, jobs done."""

    async def going_on() -> str | None:
        paths = await deploy.enqueued_since("migrated")
        done = await deploy.done_by(deploy.old_worker.worker_id, "migrated")
        if min(paths[p] for p in PATHS) < AT_LEAST or done < AT_LEAST:
            return f"enqueued since the migration: {dict(paths)}; the 0.1.0 worker did {done}"
        return None

    await deploy.wait(going_on)


async def side_by_side_then_alone(app: sweepq.App, deploy: Deploy, run_id: int) -> tuple[str, int]:
    """Today's worker joins the 0.1.0 worker until both have done jobs; then the 0.1.0
    processes stop, and today's worker finishes alone. Returns its id and how many jobs the
    enqueuer made."""
    async with (
        sweepq.Worker(app, concurrency=10, **previous_app.WORKER_OPTIONS) as worker,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run)
        await deploy.mark("joined")

        async def both_work() -> str | None:
            old_done = await deploy.done_by(deploy.old_worker.worker_id, "joined")
            new_done = await deploy.done_by(worker.id, "joined")
            if min(old_done, new_done) < AT_LEAST:
                return f"since today's worker joined: 0.1.0 did {old_done}, today's {new_done}"
            return None

        await deploy.wait(both_work)
        assert await deploy.enqueuer.stop() == 0, deploy.enqueuer.errors()
        word, total = (await deploy.enqueuer.line()).split()
        assert word == "enqueued"
        assert await deploy.old_worker.stop() == 0, deploy.old_worker.errors()

        async def finished() -> str | None:
            states = Counter(r["state"] for r in await deploy.jobs())
            run = await app.sweep_status(run_id)
            ended = run is not None and run.state == "completed"
            if states["available"] or states["running"] or not ended:
                return f"jobs {dict(states)}, run {run and run.state}"
            return None

        await deploy.wait(finished)
        worker.stop()
    return worker.id, int(total)


async def check_everything_ran_once(deploy: Deploy, new_worker: str, total: int) -> None:
    jobs = await deploy.jobs()
    executions = await deploy.executions()
    # Every job the enqueuer made is there, once, and every job completed.
    made = sorted(r["n"] for r in jobs if r["task"] in (previous_app.PLAIN, previous_app.KEYED))
    assert made == list(range(1, total + 1))
    assert Counter(r["state"] for r in jobs) == {"completed": len(jobs)}
    # Each ran exactly once, to its end, on one of the two workers.
    ran: dict[int, list[asyncpg.Record]] = {}
    for e in executions:
        ran.setdefault(e["job_id"], []).append(e)
    for r in jobs:
        if r["task"] in (previous_app.PLAIN, previous_app.KEYED, LEAF):
            assert [e["ended_at"] is not None for e in ran.get(r["id"], [])] == [True], r
    assert {e["worker"] for e in executions} == {deploy.old_worker.worker_id, new_worker}
    # The 0.1.0 worker held leaves across the migration, and recorded them after it.
    migrated = deploy.marks["migrated"]
    assert any(
        e["worker"] == deploy.old_worker.worker_id
        and e["task"] == LEAF
        and e["started_at"] < migrated < e["ended_at"]
        for e in executions
    )
    # The key's limit held across both versions, and the key holds no slot.
    spans = [
        (e["started_at"], e["ended_at"]) for e in executions if e["task"] == previous_app.KEYED
    ]
    assert most_at_once(spans) == previous_app.KEY_LIMIT
    running = f"SELECT running FROM {deploy.q}.concurrency_keys WHERE key = $1"
    assert await deploy.conn.fetchval(running, previous_app.KEY) == 0


async def test_a_worker_of_0_1_0_started_after_the_migration_refuses_the_newer_schema(
    dsn: str, previous: Path, schema: str
) -> None:
    app = current_app(dsn, schema)
    async with app:
        assert await app.migrate()
    done = await run_to_end(previous, PROC, ["worker", dsn, schema])
    errors = done.stderr.decode(errors="replace")
    assert done.returncode != 0
    assert "MigrationError" in errors
    assert "has migrations this sweepq does not know" in errors
    assert b"ready" not in done.stdout


async def test_a_0_1_0_enqueuer_started_after_the_migration_enqueues_by_every_path(
    dsn: str, previous: Path, conn: asyncpg.Connection, schema: str
) -> None:
    app = current_app(dsn, schema)
    async with app:
        assert await app.migrate()
        done = await run_to_end(previous, PROC, ["enqueue-round", dsn, schema])
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        made = await conn.fetch(
            f"SELECT id, task, concurrency_key, args::jsonb ->> 'via' AS via"
            f" FROM {ident(schema)}.jobs WHERE task <> $1 AND task <> $2 ORDER BY id",
            LINK,
            LEAF,
        )
        assert [(r["task"], r["concurrency_key"], r["via"]) for r in made] == [
            (previous_app.PLAIN, None, None),
            (previous_app.KEYED, previous_app.KEY, "python"),
            (previous_app.KEYED, previous_app.KEY, "sql"),
        ]
        await conn.execute(f"INSERT INTO {ident(schema)}.gate VALUES (clock_timestamp())")
        async with sweepq.Worker(app, **previous_app.WORKER_OPTIONS) as worker:
            await worker.run_until_idle()
        for r in made:
            job = await app.get_job(r["id"])
            assert job is not None
            assert job.state == "completed"
