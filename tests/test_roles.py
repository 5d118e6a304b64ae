"""The privilege model, with real roles: each test connects as the role it checks.

The roles are made by `docs/examples/ops_roles.sql`, the file the ops guide shows, run here with
names of the test's own: an owner that migrates, a worker role (rows of every table, every
function, no DDL), an enqueue role (the SQL function and nothing else) and an observer (reads
only). Nothing a role without privileges can do, and nothing the enqueue role can do, stalls an
outcome write; no function of the schema is PUBLIC's to call.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import asyncpg
import pytest

import sweepq
from cli_runner import invoke
from sweepq.core.ident import ident
from sweepq.core.migrate import migrate
from sweepq.core.queries import Conn
from sweepq.sweeps.app import App

ROLES_SQL = Path(__file__).parent.parent / "docs" / "examples" / "ops_roles.sql"
KINDS = ("owner", "worker", "enqueue", "observer")
PASSWORD = "sweepq-test"  # for servers that do not trust local connections


@dataclass
class Roles:
    """A schema and its roles, by kind; `dsn(kind)` connects as one."""

    schema: str
    names: dict[str, str]
    base: str

    def dsn(self, kind: str) -> str:
        parts = urlsplit(self.base)
        where = parts.netloc.rpartition("@")[2]  # host and port (or none: ?host= a socket)
        netloc = f"{self.names[kind]}:{PASSWORD}@{where}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    def app(self, kind: str) -> App:
        return App(self.dsn(kind), schema=self.schema, pool_max_size=4)


def with_names(sql: str, schema: str, names: dict[str, str]) -> str:
    """The roles file with this test's schema and role names."""
    sql = re.sub(r"\bsweepq_(owner|worker|enqueue|observer)\b", lambda m: names[m[1]], sql)
    return re.sub(r"\bsweepq\.", f"{schema}.", re.sub(r"SCHEMA sweepq\b", f"SCHEMA {schema}", sql))


@pytest.fixture
async def roles(dsn: str) -> AsyncIterator[Roles]:
    tag = uuid.uuid4().hex[:8]
    schema = f"roles_{tag}"
    names = {kind: f"sweepq_{tag}_{kind}" for kind in KINDS}
    setup, after = with_names(ROLES_SQL.read_text(), schema, names).split("[start:after-migrate]")
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(setup)
        for name in names.values():
            await admin.execute(f"ALTER ROLE {ident(name)} PASSWORD '{PASSWORD}'")
        found = Roles(schema, names, dsn)
        async with found.app("owner") as owner:
            await owner.migrate()
        await admin.execute(after)
        yield found
    finally:
        await admin.execute(f"DROP SCHEMA IF EXISTS {ident(schema)} CASCADE")
        for name in names.values():
            await admin.execute(f"DROP OWNED BY {ident(name)}")
            await admin.execute(f"DROP ROLE {ident(name)}")
        await admin.close()


def register(app: App) -> None:
    @app.task(name="send")
    async def send(ctx: sweepq.Context, to: str = "") -> str:
        return to

    @app.task(name="hold")
    async def hold(ctx: sweepq.Context) -> None:
        await anyio.sleep(60)


async def enqueue_sql(conn: asyncpg.Connection, schema: str, *args: object) -> int:
    """Enqueue through the SQL function: (task, args JSON, options JSON)."""
    sql = f"SELECT job_id FROM {ident(schema)}.enqueue($1, $2::jsonb, $3::jsonb)"
    return int(await conn.fetchval(sql, *args))


@pytest.mark.committed  # each role connects on its own: what it sees is committed
async def test_the_enqueue_role_enqueues_through_the_function_and_can_do_nothing_else(
    roles: Roles,
) -> None:
    schema = ident(roles.schema)
    conn = await asyncpg.connect(roles.dsn("enqueue"))
    try:
        plain = await enqueue_sql(conn, roles.schema, "send", '{"to": "a"}', "{}")
        keyed = await enqueue_sql(
            conn, roles.schema, "send", "{}", '{"concurrency_key": "stripe", "group": "batch"}'
        )
        once = '{"identity_key": "report", "unique_for": 3600}'
        first = await enqueue_sql(conn, roles.schema, "send", "{}", once)
        assert await enqueue_sql(conn, roles.schema, "send", "{}", once) == first
        # Names the sweeps keep, and sweepq's own tasks, are refused with a clear error.
        for task, options, says in [
            ("send", '{"group": "sweep:1"}', "beginning with 'sweep:' are kept"),
            ("send", '{"idempotency_scope": "sweep:1", "idempotency_key": "[150]"}', "kept"),
            ("send", '{"idempotency_scope": "sweep-link:2", "idempotency_key": "x"}', "kept"),
            ("sweepq.sweep.users.leaf", "{}", "are sweepq's own tasks"),
        ]:
            with pytest.raises(asyncpg.PostgresError, match=re.escape(says)) as refused:
                await enqueue_sql(conn, roles.schema, task, '{"run": 1, "item": {}}', options)
            assert refused.value.sqlstate == "22SQ1"
        # Every table and every other function is out of reach: no reading args, results or
        # errors, no forged job, no wake-up rows, no lock on a job.
        for statement in [
            f"SELECT args FROM {schema}.jobs",
            f"SELECT * FROM {schema}.sweep_runs",
            f"INSERT INTO {schema}.jobs (task, queue, state, max_attempts, worker_id,"
            " lease_expires_at) VALUES ('send', 'default', 'running', 1, 'w',"
            " now() + interval '100 years')",
            f"INSERT INTO {schema}.concurrency_wakeups (key, run_at) VALUES ('k', now())",
            f"UPDATE {schema}.jobs SET state = 'completed'",
            f"DELETE FROM {schema}.jobs",
            f"SELECT * FROM {schema}.job_settled(1)",
            f"SELECT {schema}.job_waiters_notify(ARRAY[1]::bigint[])",
            f"SELECT {schema}.concurrency_release(ARRAY['k'], ARRAY[NULL]::timestamptz[])",
            f"SELECT {schema}.job_errors_append('[]', '{{}}')",
        ]:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(statement)
    finally:
        await conn.close()
    admin = await asyncpg.connect(roles.base)
    try:
        rows = await admin.fetch(f"SELECT id, job_group, concurrency_key FROM {schema}.jobs")
    finally:
        await admin.close()
    assert {r["id"] for r in rows} == {plain, keyed, first}


@pytest.mark.committed  # each role connects on its own: what it sees is committed
async def test_no_lock_another_role_can_take_stalls_the_outcomes_of_jobs(roles: Roles) -> None:
    """The locks of earlier versions (any role could take them), the SQL function's locks held
    in an open transaction, and a waiter's read in an open transaction: none gates a worker."""
    schema = ident(roles.schema)
    outsider = await asyncpg.connect(roles.dsn("enqueue"))
    idle = await asyncpg.connect(roles.dsn("enqueue"))
    waiter = await asyncpg.connect(roles.dsn("worker"))
    app = roles.app("worker")
    register(app)
    try:
        for key in (
            f"sweepq:job_waiters:{roles.schema}",
            f"sweepq:migrate:{roles.schema}",
            "sweepq:identity:report",
        ):
            await outsider.execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", key)
        async with app:
            jobs = [
                e.job_id
                for e in await app.enqueue_many(
                    [sweepq.JobSpec("send", {"to": str(n)}) for n in range(200)]
                    + [sweepq.JobSpec("send", concurrency_key="stripe") for _ in range(10)]
                    + [sweepq.JobSpec("send", identity_key="report", unique_for=60)]
                )
            ]
            # An enqueue role's transaction left open after enqueuing, keyed and unique_for.
            tx = idle.transaction()
            await tx.start()
            await enqueue_sql(idle, roles.schema, "send", "{}", '{"concurrency_key": "stripe"}')
            # A waiter's read inside a transaction it keeps open: its row lock is gone already.
            held = waiter.transaction()
            await held.start()
            assert await waiter.fetchval(f"SELECT count(*) FROM {schema}.job_settled($1)", jobs[0])
            async with anyio.create_task_group() as tg:
                waits: list[sweepq.Job] = []

                async def wait_one() -> None:
                    waits.append(await app.wait_for(jobs[-1], timeout=60))

                tg.start_soon(wait_one)
                with anyio.fail_after(60):
                    async with sweepq.Worker(app, concurrency=20, poll_seconds=0.05) as worker:
                        assert await worker.run_until_idle() == len(jobs)
            assert [w.state for w in waits] == [sweepq.JobState.COMPLETED]
            states = {(await app.get_job(j)).state for j in jobs}  # type: ignore[union-attr]
            assert states == {sweepq.JobState.COMPLETED}
            await held.rollback()
            await tx.rollback()
    finally:
        for conn in (outsider, idle, waiter):
            await conn.close()


class Items(sweepq.TableSweep):
    name = "items"
    key = ("id",)
    page_size = 10

    async def handle(self, ctx: sweepq.Context, item: dict[str, object]) -> None:
        return None


@pytest.mark.committed  # each role connects on its own: what it sees is committed
async def test_the_worker_role_runs_workers_sweeps_and_waits_and_changes_no_schema(
    roles: Roles,
) -> None:
    schema = ident(roles.schema)
    admin = await asyncpg.connect(roles.base)
    try:
        # The application's own table, which its sweep walks: the application grants it.
        await admin.execute(
            f"CREATE TABLE {schema}.items AS SELECT g AS id FROM generate_series(1, 35) AS g;"
            f" ALTER TABLE {schema}.items ADD PRIMARY KEY (id);"
            f" GRANT SELECT ON {schema}.items TO {ident(roles.names['worker'])}"
        )
    finally:
        await admin.close()
    app = roles.app("worker")
    register(app)
    Items.table = f"{roles.schema}.items"
    app.register_sweep(Items)
    async with app:
        assert await app.migrate() == []  # up to date: nothing to do, nothing it may not do
        await app.check_migrated()
        job = await app.enqueue("send", {"to": "x"}, concurrency_key="k")
        once = await app.enqueue("send", identity_key="daily", unique_for=timedelta(hours=1))
        run = await app.start_sweep("items")
        async with sweepq.Worker(app, concurrency=10, poll_seconds=0.05) as worker:
            await worker.run_until_idle()
        done = await app.wait_for(job.job_id, timeout=10)
        assert (done.state, done.result) == (sweepq.JobState.COMPLETED, "x")
        assert (await app.get_job(once.job_id)).state is sweepq.JobState.COMPLETED  # type: ignore[union-attr]
        status = await app.sweep_status(run.run_id)
        assert status is not None
        assert (status.state, status.completed) == (sweepq.SweepState.COMPLETED, 35)
        removed = await app.prune(older_than=timedelta(0))
        assert removed["jobs"] > 0
        for statement in [
            f"DROP TABLE {schema}.jobs",
            f"ALTER TABLE {schema}.jobs ADD COLUMN x int",
            f"TRUNCATE {schema}.jobs",
        ]:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await app.pool.execute(statement)


@pytest.mark.committed  # each role connects on its own: what it sees is committed
async def test_the_observer_role_reads_every_view_and_writes_nothing(roles: Roles) -> None:
    worker = roles.app("worker")
    register(worker)
    async with worker:
        job = await worker.enqueue("send", {"to": "y"})
    admin = await asyncpg.connect(roles.base)
    try:
        await admin.execute(
            f"UPDATE {ident(roles.schema)}.jobs SET state = 'failed', failure_reason = 'error',"
            " finished_at = now() WHERE id = $1",
            job.job_id,
        )
    finally:
        await admin.close()
    db = ["--dsn", roles.dsn("observer"), "--schema", roles.schema]
    for command in (
        ["top", "--once"],
        ["doctor"],
        ["jobs", "list"],
        ["jobs", "show", str(job.job_id)],
        ["sweep", "status"],
    ):
        result = await invoke([*command, *db])
        assert result.exit_code in (0, 1), (command, result.output)
        assert "permission denied" not in result.output, (command, result.output)
        assert "Traceback" not in result.output, (command, result.output)
    refused = await invoke(["jobs", "retry", str(job.job_id), *db])
    assert refused.exit_code == 2, refused.output
    assert "permission denied" in refused.output
    observer = roles.app("observer")
    async with observer:
        after = await observer.get_job(job.job_id)
    assert after is not None
    assert after.state is sweepq.JobState.FAILED


@pytest.mark.committed  # each role connects on its own: what it sees is committed
async def test_each_role_meets_closed_groups_as_its_grants_say(roles: Roles) -> None:
    """The enqueue role enqueues into an open group and is refused a closed one with no grant on
    job_groups (the jobs table's trigger runs as the owner); the worker role closes groups and
    its workers fire them; the observer reads job_groups and cannot close a group."""
    schema = ident(roles.schema)
    worker = roles.app("worker")
    register(worker)
    outsider = await asyncpg.connect(roles.dsn("enqueue"))
    try:
        async with worker:
            await worker.enqueue("send", {"to": "a"}, group="batch")
            assert await enqueue_sql(outsider, roles.schema, "send", "{}", '{"group": "open"}')
            await enqueue_sql(outsider, roles.schema, "send", "{}", '{"group": "batch"}')
            then = sweepq.JobSpec("send", {"to": "all done"})
            closure = await worker.close_group("batch", then=then)
            assert not closure.fired
            with pytest.raises(asyncpg.PostgresError, match="group 'batch' is closed") as refused:
                await enqueue_sql(outsider, roles.schema, "send", "{}", '{"group": "batch"}')
            assert (refused.value.sqlstate, refused.value.detail) == ("55SQ1", "batch")
            for statement in [
                f"SELECT * FROM {schema}.job_groups",
                f"UPDATE {schema}.job_groups SET sealed_at = NULL",
                f"SELECT {schema}.job_groups_admit()",
            ]:
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await outsider.execute(statement)
            async with sweepq.Worker(worker, concurrency=4, poll_seconds=0.05) as running:
                assert await running.run_until_idle() == 4  # three of the groups, then `then`
            row = await worker.pool.fetchrow(
                f"SELECT then_job, fired_at FROM {schema}.job_groups WHERE name = 'batch'"
            )
            assert row is not None
            assert row["fired_at"] is not None
            done = await worker.get_job(row["then_job"])
            assert done is not None
            assert (done.args, done.state) == ({"to": "all done"}, sweepq.JobState.COMPLETED)
            observer = roles.app("observer")
            async with observer:
                count = f"SELECT count(*) FROM {schema}.job_groups"
                assert await observer.pool.fetchval(count) == 2
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await observer.close_group("open")
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await observer.reopen_group("batch")
            # The worker role's retention removes the rows of groups whose jobs it removed.
            assert (await worker.prune(older_than=timedelta(0)))["job_groups"] == 2
    finally:
        await outsider.close()


async def test_no_function_of_the_schema_is_executable_by_public(
    tx_app: sweepq.App, conn: Conn
) -> None:
    rows = await conn.fetch(
        "SELECT p.oid::regprocedure::text FROM pg_proc AS p"
        " JOIN pg_namespace AS n ON n.oid = p.pronamespace"
        " WHERE n.nspname = $1 AND (p.proacl IS NULL OR EXISTS ("
        "   SELECT FROM aclexplode(p.proacl) AS a"
        "   WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'))",
        tx_app.schema,
    )
    assert [r[0] for r in rows] == []
    definers = await conn.fetch(
        "SELECT p.proname, p.proconfig FROM pg_proc AS p"
        " JOIN pg_namespace AS n ON n.oid = p.pronamespace"
        " WHERE n.nspname = $1 AND p.prosecdef ORDER BY p.proname",
        tx_app.schema,
    )
    # The functions that run as the owner (the enqueue function, and the jobs table's trigger
    # that admits jobs into groups) pin their search_path.
    pinned = "search_path=pg_catalog, pg_temp"
    found = [(r[0], r[1][0]) for r in definers]
    assert found == [("enqueue", pinned), ("job_groups_admit", pinned)]


async def test_the_layers_reserved_names_are_the_ones_its_migrations_write(
    tx_app: sweepq.App, conn: Conn
) -> None:
    rows = await conn.fetch(
        f"SELECT kind, prefix, component FROM {ident(tx_app.schema)}.reserved_names"
    )
    written = {(r[0], r[1], r[2]) for r in rows}
    declared = {
        (option, prefix, layer.component)
        for layer in tx_app.registry.layers  # the App's layers, as it enforces them
        for option, prefix in layer.reserved
    }
    assert written == declared
    assert declared  # the sweeps keep theirs

    @tx_app.task(name="send")
    async def send(ctx: sweepq.Context) -> None:
        return None

    for options in ({"group": "sweep:2"}, {"idempotency_scope": "sweep-link:2"}):
        with pytest.raises(sweepq.InvalidJobOptionError, match="kept for sweepq's own jobs"):
            await tx_app.enqueue(send, **options, conn=conn)  # type: ignore[arg-type]
        specs = [sweepq.JobSpec(send, **options)] * 20  # type: ignore[arg-type]
        with pytest.raises(sweepq.InvalidJobOptionError, match="kept for sweepq's own jobs"):
            await tx_app.enqueue_many(specs, conn=conn)
    assert await conn.fetchval(f"SELECT count(*) FROM {ident(tx_app.schema)}.jobs") == 0


@pytest.mark.committed  # each role connects on its own: what it sees is committed
async def test_the_worker_role_pauses_queues_the_observer_lists_them_and_the_enqueue_role_neither(
    roles: Roles,
) -> None:
    schema = ident(roles.schema)
    worker = roles.app("worker")
    register(worker)
    outsider = await asyncpg.connect(roles.dsn("enqueue"))
    try:
        async with worker:
            assert await worker.pause_queue("default", reason="deploy") is True
            await worker.enqueue("send", {"to": "z"})
            async with sweepq.Worker(worker, concurrency=2, poll_seconds=0.05) as running:
                assert await running.run_until_idle() == 0  # its claim reads the pause
            db = ["--dsn", roles.dsn("observer"), "--schema", roles.schema]
            listed = await invoke(["queues", "list", *db])
            assert listed.exit_code == 0, listed.output
            assert "deploy" in listed.output
            refused = await invoke(["queues", "resume", "default", *db])
            assert refused.exit_code == 2, refused.output
            assert "permission denied" in refused.output
            for statement in [
                f"SELECT * FROM {schema}.queue_pauses",
                f"DELETE FROM {schema}.queue_pauses",
            ]:
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await outsider.execute(statement)
            assert await worker.resume_queue("default") is True
            async with sweepq.Worker(worker, concurrency=2, poll_seconds=0.05) as running:
                assert await running.run_until_idle() == 1
    finally:
        await outsider.close()


@pytest.mark.committed  # the role connects on its own: what it sees is committed
async def test_a_worker_role_granted_table_by_table_still_claims_after_pauses_and_rates(
    dsn: str,
) -> None:
    """A role granted the jobs table one grant at a time (no default privileges) is granted the
    pauses the claim of version 13 reads and the rate functions the claim of version 14 calls,
    as the migrations say."""
    tag = uuid.uuid4().hex[:8]
    schema, role = f"grants_{tag}", f"sweepq_{tag}_worker"
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f"CREATE ROLE {ident(role)} LOGIN PASSWORD '{PASSWORD}'")
        owner = App(dsn, schema=schema, pool_max_size=2)
        async with owner:
            steps = owner.migrations()
            before = [m for m in steps if m.component != "core" or m.version < 13]
            async with owner.pool.acquire() as c:
                await migrate(c, schema, before)
            await admin.execute(
                f"GRANT USAGE ON SCHEMA {ident(schema)} TO {ident(role)};"
                f" GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {ident(schema)}"
                f" TO {ident(role)};"
                f" GRANT USAGE ON ALL SEQUENCES IN SCHEMA {ident(schema)} TO {ident(role)};"
                f" GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {ident(schema)} TO {ident(role)}"
            )
            await owner.migrate()
        as_role = Roles(schema, {"worker": role}, dsn).app("worker")
        register(as_role)
        async with as_role:
            await as_role.enqueue("send", {"to": "a"})
            assert await as_role.pause_queue("default") is True
            async with sweepq.Worker(as_role, concurrency=2, poll_seconds=0.05) as worker:
                assert await worker.run_until_idle() == 0
            assert await as_role.resume_queue("default") is True
            async with sweepq.Worker(as_role, concurrency=2, poll_seconds=0.05) as worker:
                assert await worker.run_until_idle() == 1
            await as_role.set_rate_limit("partner", 1, per=3600)
            for to in ("b", "c"):
                await as_role.enqueue("send", {"to": to}, concurrency_key="partner")
            async with sweepq.Worker(as_role, concurrency=2, poll_seconds=0.05) as worker:
                assert await worker.run_until_idle() == 1
    finally:
        await admin.execute(f"DROP SCHEMA IF EXISTS {ident(schema)} CASCADE")
        await admin.execute(f"DROP OWNED BY {ident(role)}")
        await admin.execute(f"DROP ROLE {ident(role)}")
        await admin.close()
