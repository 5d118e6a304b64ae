"""Enqueue from SQL: `{schema}.enqueue(task, args, options)` called by another driver (psycopg 3).

A job the SQL function enqueues must be indistinguishable from one `App.enqueue` enqueues: the
same row, the same dedup, the same wake-up row and notification, the same checks and bounds, and
the same outcomes. The function is rendered from the options' declaration (`core/options`) into the
newest core migration by `python -m sweepq.core.render_enqueue`; a test fails when the two
differ. `EXAMPLES` below has one value per declared option, and the rules between options are
iterated from the declaration, each refused with the same words by Python and by SQL. One
module, past 400 lines: every test here holds the one function against App.enqueue, through the
same fixtures and helpers.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeAlias
from urllib.parse import urlsplit, urlunsplit

import anyio
import asyncpg
import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

import statements
import sweepq
from factories import drop_schema
from sweepq import JobSpec
from sweepq.core import checks, render_enqueue
from sweepq.core.enqueue import COPY_MIN_ROWS
from sweepq.core.ident import ident, queue_name
from sweepq.core.options import NAMES, OPTIONS, RULES, check_reserved, resolve
from sweepq.core.options.rules import IndexEntry, Needs, NotBoth, Rule
from sweepq.core.queries import Conn, notify_channel
from sweepq.core.tasks import (
    DEFAULT_MAX_ATTEMPTS,
    MAX_ARGS_BYTES,
    MAX_ATTEMPTS_RANGE,
    PRIORITY_RANGE,
)

Pg: TypeAlias = psycopg.AsyncConnection[tuple[Any, ...]]
ROOT = Path(__file__).resolve().parent.parent
BAD_INPUT = "22SQ1"  # the SQLSTATE of every refusal of the function


# one valid value per job option ---------------------------------------------------------------

# Python's form (each option's declared `example`); `as_json` gives the SQL form.
EXAMPLES: dict[str, Any] = {o.name: o.example for o in OPTIONS}
# What an option needs beside it to be accepted (the rules that say so).
COMPANIONS: dict[str, dict[str, Any]] = {
    rule.option: {rule.needs: EXAMPLES[rule.needs]} for rule in RULES if isinstance(rule, Needs)
}


def as_json(options: Mapping[str, Any]) -> dict[str, Any]:
    """Options as the SQL function takes them: times as ISO 8601, durations as seconds."""
    converted: dict[str, Any] = {}
    for name, value in options.items():
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, timedelta):
            value = value.total_seconds()
        converted[name] = value
    return converted


# calling the function -------------------------------------------------------------------------


def call(app: sweepq.App) -> sql.Composed:
    return sql.SQL("SELECT job_id, outcome FROM {}(%s, %s, %s)").format(
        sql.SQL(app.enqueue_function)
    )


class RawJson(str):
    """Args given as JSON text, sent as they are (for values json.dumps cannot write)."""


async def sql_enqueue(
    pg: Pg,
    app: sweepq.App,
    task: str | None,
    args: object = None,
    options: object = None,
) -> sweepq.Enqueued:
    """Enqueue through the SQL function on `pg` (in its transaction, if one is open)."""
    sent = Jsonb(args, dumps=str) if isinstance(args, RawJson) else Jsonb(args)
    cursor = await pg.execute(call(app), (task, sent, Jsonb(options)))
    row = await cursor.fetchone()
    assert row is not None
    assert await cursor.fetchone() is None  # exactly one row
    return sweepq.Enqueued(row[0], row[1])


@pytest.fixture
async def pg(app: sweepq.App) -> AsyncIterator[Pg]:
    """Committed tier: a psycopg connection in autocommit (`pg.transaction()` for a block)."""
    async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as connection:
        yield connection


@pytest.fixture
async def pg_tx(dsn: str, tx_schema: str) -> AsyncIterator[Pg]:
    """Rolled-back tier: a psycopg connection inside a transaction rolled back at the end."""
    async with await psycopg.AsyncConnection.connect(dsn) as connection:
        await connection.execute("SELECT 1")  # opens the transaction
        try:
            yield connection
        finally:
            await connection.rollback()


def register(app: sweepq.App, seen: list[dict[str, Any]] | None = None) -> sweepq.Task:
    @app.task(name="send")
    async def send(ctx: sweepq.Context, to: str, n: int = 0) -> None:
        if seen is not None:
            seen.append({"to": to, "n": n, "job_id": ctx.job_id})

    return send


async def jobs_and_wakeups(app: sweepq.App) -> tuple[int, int]:
    schema = ident(app.schema)
    record = await app.pool.fetchrow(
        f"SELECT (SELECT count(*) FROM {schema}.jobs), "
        f"(SELECT count(*) FROM {schema}.concurrency_wakeups)"
    )
    assert record is not None
    return record[0], record[1]


async def run_worker(app: sweepq.App, *queues: str, concurrency: int = 2) -> int:
    async with sweepq.Worker(app, queues=list(queues or ["default"]), concurrency=concurrency) as w:
        return await w.run_until_idle()


# transactions: commit, roll back, notify ------------------------------------------------------


async def test_a_job_enqueued_in_a_committed_psycopg_transaction_runs_with_its_args(
    app: sweepq.App, pg: Pg
) -> None:
    seen: list[dict[str, Any]] = []
    register(app, seen)
    schema = ident(app.schema)
    await pg.execute(f"CREATE TABLE {schema}.signups (email text PRIMARY KEY)")
    async with pg.transaction():
        await pg.execute(f"INSERT INTO {schema}.signups VALUES (%s)", ("ada@example.com",))
        result = await sql_enqueue(pg, app, "send", {"to": "ada@example.com", "n": 7})
        assert result.outcome == "created"
        assert await app.get_job(result.job_id) is None  # other connections: not before commit
    job = await app.get_job(result.job_id)
    assert job is not None
    assert (job.task, job.queue, job.state, job.args) == (
        "send",
        "default",
        sweepq.JobState.AVAILABLE,
        {"to": "ada@example.com", "n": 7},
    )
    assert await run_worker(app) == 1
    assert seen == [{"to": "ada@example.com", "n": 7, "job_id": result.job_id}]
    done = await app.get_job(result.job_id)
    assert done is not None
    assert done.state is sweepq.JobState.COMPLETED


async def test_a_rolled_back_enqueue_leaves_no_job_no_wakeup_and_no_notification(
    app: sweepq.App, pg: Pg
) -> None:
    async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as listener:
        await listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(app.queries.channel)))
        async with pg.transaction():
            await sql_enqueue(
                pg, app, "send", {"to": "a"}, {"queue": "rolled", "concurrency_key": "k"}
            )
            raise psycopg.Rollback()
        assert await jobs_and_wakeups(app) == (0, 0)
        # Committed, but not due: no notification either (as job_insert).
        await sql_enqueue(pg, app, "send", {"to": "b"}, {"queue": "later", "delay": 3600})
        # Notifications arrive in commit order: the first one must be this job's queue.
        await sql_enqueue(pg, app, "send", {"to": "c"}, {"queue": "committed"})
        received = [
            (n.channel, n.payload) async for n in listener.notifies(timeout=5.0, stop_after=1)
        ]
    assert received == [(app.queries.channel, "committed")]
    assert await jobs_and_wakeups(app) == (2, 0)


async def test_a_long_schema_name_notifies_the_hashed_channel_workers_listen_on(
    dsn: str,
) -> None:
    schema = f"long_{uuid.uuid4().hex}".ljust(63, "x")
    channel = notify_channel(schema)
    assert channel != f"sweepq_{schema}"  # 70 bytes: hashed
    app = sweepq.App(dsn, schema=schema)
    async with app:
        try:
            await app.migrate()
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as pg:
                await pg.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                await sql_enqueue(pg, app, "send", {"to": "a"})
                received = [n.payload async for n in pg.notifies(timeout=5.0, stop_after=1)]
            assert received == ["default"]
        finally:
            await drop_schema(app.pool, schema)


# dedup ----------------------------------------------------------------------------------------


def collect_notices(pg: Pg) -> list[tuple[str | None, str | None]]:
    """(severity, message) of each notice the server sends `pg` from now on."""
    notices: list[tuple[str | None, str | None]] = []
    # A Diagnostic is readable only inside the handler.
    pg.add_notice_handler(lambda d: notices.append((d.severity, d.message_primary)))
    return notices


async def test_the_same_idempotency_key_twice_points_at_the_first_job_active_then_terminal(
    app: sweepq.App, pg: Pg
) -> None:
    task = register(app)
    notices = collect_notices(pg)
    options = {"idempotency_key": "welcome:1"}
    first = await sql_enqueue(pg, app, "send", {"to": "a"}, options)
    again = await sql_enqueue(pg, app, "send", {"to": "a"}, options)
    assert first.outcome == "created"
    assert again == sweepq.Enqueued(first.job_id, "existing_active")
    # One index for both: App.enqueue with the key finds the job SQL made, and the other way.
    assert await app.enqueue(task, {"to": "a"}, idempotency_key="welcome:1") == again
    python_first = await app.enqueue(task, {"to": "b"}, idempotency_key="welcome:2")
    by_sql = await sql_enqueue(pg, app, "send", {"to": "b"}, {"idempotency_key": "welcome:2"})
    assert by_sql == sweepq.Enqueued(python_first.job_id, "existing_active")
    assert notices == []

    await run_worker(app)
    late = await sql_enqueue(pg, app, "send", {"to": "a"}, options)
    assert late == sweepq.Enqueued(first.job_id, "existing_terminal")
    # As App.enqueue logs it: a WARNING that nothing will run for this call.
    assert notices == [
        (
            "WARNING",
            f"enqueue deduplicated against terminal job {first.job_id} (state completed, "
            "task send, idempotency_key='welcome:1'); no new job was created",
        )
    ]
    # Another scope is another key.
    other = await sql_enqueue(
        pg, app, "send", {"to": "a"}, {**options, "idempotency_scope": "tenant-b"}
    )
    assert other.outcome == "created"


async def test_an_identity_key_dedups_while_its_job_is_active_and_not_after(
    app: sweepq.App, pg: Pg
) -> None:
    task = register(app)
    options = {"identity_key": "rebuild"}
    first = await sql_enqueue(pg, app, "send", {"to": "a"}, options)
    assert first.outcome == "created"
    assert await sql_enqueue(pg, app, "send", {"to": "b"}, options) == sweepq.Enqueued(
        first.job_id, "existing_active"
    )
    assert await app.enqueue(task, {"to": "c"}, identity_key="rebuild") == sweepq.Enqueued(
        first.job_id, "existing_active"
    )
    await run_worker(app)
    after = await sql_enqueue(pg, app, "send", {"to": "d"}, options)
    assert after.outcome == "created"
    assert after.job_id != first.job_id


async def test_unique_for_dedups_against_a_finished_job_of_the_identity_within_the_window(
    app: sweepq.App, pg: Pg
) -> None:
    task = register(app)
    options = {"identity_key": "rebuild", "unique_for": 600}
    first = await sql_enqueue(pg, app, "send", {"to": "a"}, options)
    await run_worker(app)
    notices = collect_notices(pg)
    again = await sql_enqueue(pg, app, "send", {"to": "b"}, options)
    assert again == sweepq.Enqueued(first.job_id, "existing_terminal")
    assert notices == [
        (
            "WARNING",
            f"enqueue deduplicated against terminal job {first.job_id} (state completed, "
            "task send, identity_key='rebuild'); no new job was created",
        )
    ]
    # The same lock and the same window as App.enqueue's.
    by_python = await app.enqueue(task, {"to": "c"}, identity_key="rebuild", unique_for=600)
    assert by_python == again
    # Without unique_for the finished job does not count: "not already running".
    assert (await sql_enqueue(pg, app, "send", {"to": "d"}, {"identity_key": "rebuild"})).created


# what the job row holds -----------------------------------------------------------------------


async def test_a_concurrency_key_job_is_claimed_through_its_key_like_one_app_enqueue_made(
    app: sweepq.App, pg: Pg
) -> None:
    task = register(app)
    await app.set_concurrency_limit("smtp", 1)
    by_sql = await sql_enqueue(pg, app, "send", {"to": "a"}, {"concurrency_key": "smtp"})
    assert await jobs_and_wakeups(app) == (1, 1)  # a wake-up row, not the key's row
    by_python = await app.enqueue(task, {"to": "b"}, concurrency_key="smtp")
    [first] = await statements.claim(app, limit=5)
    assert first.id == by_sql.job_id
    assert await statements.claim(app, limit=5) == []  # the key is at its limit
    assert await statements.finish(app, first)
    [second] = await statements.claim(app, limit=5)
    assert second.id == by_python.job_id


async def test_a_group_counts_cancels_and_retries_jobs_enqueued_by_sql(
    app: sweepq.App, pg: Pg
) -> None:
    task = register(app)
    for n in range(2):
        await sql_enqueue(pg, app, "send", {"to": "a", "n": n}, {"group": "import-7"})
    await app.enqueue(task, {"to": "b"}, group="import-7")
    counts = await app.group_counts("import-7")
    assert (counts.available, counts.outstanding) == (3, 3)
    assert await app.cancel_group("import-7") == 3
    assert (await app.group_counts("import-7")).cancelled == 3


async def test_delay_and_run_at_schedule_the_job_and_a_worker_leaves_it_until_then(
    app: sweepq.App, pg: Pg
) -> None:
    register(app)
    later = await sql_enqueue(pg, app, "send", {"to": "a"}, {"delay": 3600})
    at = await sql_enqueue(pg, app, "send", {"to": "b"}, {"run_at": "2031-05-06T07:08:09Z"})
    past = await sql_enqueue(
        pg, app, "send", {"to": "c"}, {"run_at": "2001-01-01T00:00:00.5+02:00"}
    )
    job = await app.get_job(later.job_id)
    assert job is not None
    assert job.run_at - job.created_at == timedelta(hours=1)
    job = await app.get_job(at.job_id)
    assert job is not None
    assert job.run_at == datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    assert await run_worker(app) == 1  # only the job whose run_at has passed
    job = await app.get_job(past.job_id)
    assert job is not None
    assert job.state is sweepq.JobState.COMPLETED


async def test_a_deadline_is_armed_from_the_enqueue_and_enforced(app: sweepq.App, pg: Pg) -> None:
    register(app)
    result = await sql_enqueue(pg, app, "send", {"to": "a"}, {"deadline": 90, "delay": 3600})
    job = await app.get_job(result.job_id)
    assert job is not None
    assert job.deadline_at is not None
    assert job.deadline_at - job.created_at == timedelta(seconds=90)
    deadline_after = await app.pool.fetchval(
        f"SELECT deadline_after FROM {ident(app.schema)}.jobs WHERE id = $1", result.job_id
    )
    assert deadline_after == timedelta(seconds=90)  # what a retry re-arms


async def test_priority_orders_jobs_and_queue_routes_them(app: sweepq.App, pg: Pg) -> None:
    seen: list[dict[str, Any]] = []
    register(app, seen)
    for n, priority in enumerate([1, 5, 3]):
        await sql_enqueue(
            pg, app, "send", {"to": "a", "n": n}, {"priority": priority, "queue": "mail"}
        )
    await sql_enqueue(pg, app, "send", {"to": "other"}, {"priority": 100, "queue": "other"})
    assert await run_worker(app, "mail", concurrency=1) == 3
    assert [s["n"] for s in seen] == [1, 2, 0]  # priorities 5, 3, 1


async def test_args_that_do_not_fit_the_handler_fail_the_job_when_the_worker_runs_it(
    app: sweepq.App, pg: Pg
) -> None:
    seen: list[dict[str, Any]] = []
    register(app, seen)
    # The function cannot see the handler's signature: it stores any JSON object.
    result = await sql_enqueue(pg, app, "send", {"too": "a", "n": "seven"})
    assert result.created
    await run_worker(app)
    assert seen == []
    job = await app.get_job(result.job_id)
    assert job is not None
    assert job.state is sweepq.JobState.FAILED
    assert "args" in job.errors[-1].error


# the same row as App.enqueue ------------------------------------------------------------------

ROW_SQL = """
SELECT to_jsonb(j) - 'id' - 'args' || jsonb_build_object('args', j.args::jsonb)
FROM {schema}.jobs AS j WHERE j.id = $1
"""
WAKEUPS_SQL = "SELECT coalesce(jsonb_agg(to_jsonb(w)), '[]') FROM {schema}.concurrency_wakeups AS w"
CLEAR_SQL = "DELETE FROM {schema}.jobs; DELETE FROM {schema}.concurrency_wakeups"


async def both_rows(
    app: sweepq.App, conn: Conn, options: Mapping[str, Any], first: str = "python"
) -> tuple[tuple[str, str], tuple[str, str]]:
    """The row and wake-ups of `App.enqueue(options)` (or, with first="many", of the first of
    many jobs of `App.enqueue_many`), then those of the SQL function, both in one transaction
    (the same now()), the first deleted before the second is made."""
    schema = ident(app.schema)
    args = {"to": "a@example.com", "n": 3}
    rows: list[tuple[str, str]] = []
    for how in (first, "sql"):
        if how == "python":
            job_id = (await app.enqueue("send", args, conn=conn, **options)).job_id
        elif how == "many":
            # Behind enough plain jobs to be sent by COPY (the job itself too, if it is plain).
            specs = [JobSpec("send", args, **options)]
            specs += [JobSpec("send", args) for _ in range(COPY_MIN_ROWS)]
            results = await app.enqueue_many(specs, conn=conn)
            ids = [r.job_id for r in results]
            assert ids == sorted(ids), "ids follow the input order"
            job_id = ids[0]
        else:
            record = await conn.fetchrow(
                f"SELECT * FROM {app.enqueue_function}($1, $2::jsonb, $3::jsonb)",
                "send",
                json.dumps(args),
                json.dumps(as_json(options)),
            )
            assert record is not None
            assert record["outcome"] == "created"
            job_id = record["job_id"]
        row = await conn.fetchval(ROW_SQL.format(schema=schema), job_id)
        wakeups = await conn.fetchval(WAKEUPS_SQL.format(schema=schema))
        rows.append((row, wakeups))
        await conn.execute(CLEAR_SQL.format(schema=schema))
    return rows[0], rows[1]


async def test_with_no_options_the_row_is_the_one_app_enqueue_writes_for_a_default_task(
    tx_app: sweepq.App, conn: Conn
) -> None:
    register(tx_app)  # registered with @app.task's defaults, which the function assumes
    python, by_sql = await both_rows(tx_app, conn, {})
    assert python == by_sql


@pytest.mark.parametrize("name", [o.name for o in OPTIONS])
async def test_each_job_option_is_stored_as_app_enqueue_stores_it(
    tx_app: sweepq.App, conn: Conn, name: str
) -> None:
    register(tx_app)
    options = {**COMPANIONS.get(name, {}), name: EXAMPLES[name]}
    python, by_sql = await both_rows(tx_app, conn, options)
    assert python == by_sql
    if name != "unique_for":  # checked, not stored: the option shows in the row
        without, _ = await both_rows(tx_app, conn, COMPANIONS.get(name, {}))
        assert python != without


@pytest.mark.parametrize("name", [o.name for o in OPTIONS])
async def test_each_job_option_is_stored_alike_when_enqueue_many_sends_jobs_by_copy(
    tx_app: sweepq.App, conn: Conn, name: str
) -> None:
    register(tx_app)
    options = {**COMPANIONS.get(name, {}), name: EXAMPLES[name]}
    many, by_sql = await both_rows(tx_app, conn, options, first="many")
    # The wake-ups of the plain jobs are none; the job's own (a concurrency key) is compared.
    assert many == by_sql


async def test_all_options_at_once_give_the_same_row_and_wakeup(
    tx_app: sweepq.App, conn: Conn
) -> None:
    register(tx_app)
    not_both = {rule.second for rule in RULES if isinstance(rule, NotBoth)}
    options = {k: v for k, v in EXAMPLES.items() if k not in not_both}
    python, by_sql = await both_rows(tx_app, conn, options)
    assert python == by_sql
    assert '"smtp"' in python[1]  # the concurrency key's wake-up row


def test_every_declared_example_is_accepted_by_python() -> None:
    task = sweepq.Task(_noop, name="send", queue="default", max_attempts=DEFAULT_MAX_ATTEMPTS)
    for name, value in EXAMPLES.items():
        assert value is not None, f"job option {name!r} (core/options) declares no example"
        resolve({**COMPANIONS.get(name, {}), name: value}, task)


async def test_an_unknown_option_is_refused_naming_exactly_the_options_python_declares(
    pg_tx: Pg, tx_app: sweepq.App
) -> None:
    message = await refusal(pg_tx, tx_app, "send", {}, {"colour": "red", "size": None})
    listed = re.fullmatch(
        r"sweepq: unknown job option\(s\) 'colour', 'size'; the options are: (.*)", message
    )
    assert listed is not None, message
    assert listed[1].split(", ") == [o.name for o in OPTIONS]


# bad input ------------------------------------------------------------------------------------

WRITES_SQL = """
SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint,
       (SELECT last_value FROM pg_sequences WHERE schemaname = %s AND sequencename = 'jobs_id_seq')
FROM pg_stat_xact_user_tables WHERE schemaname = %s
"""


async def footprint(pg: Pg, schema: str) -> tuple[Any, ...]:
    """Tuples written in this transaction to the schema, and the jobs' sequence."""
    row = await (await pg.execute(WRITES_SQL, (schema, schema))).fetchone()
    assert row is not None
    return tuple(row)


async def refusal(pg: Pg, app: sweepq.App, task: str | None, args: object, options: object) -> str:
    """The message of the function's refusal; asserts it wrote nothing and drew no id."""
    before = await footprint(pg, app.schema)
    with pytest.raises(psycopg.DataError) as raised:
        async with pg.transaction():  # a savepoint: the test's transaction goes on
            await sql_enqueue(pg, app, task, args, options)
    assert raised.value.sqlstate == BAD_INPUT
    assert await footprint(pg, app.schema) == before
    message = raised.value.diag.message_primary
    assert message is not None
    assert message.startswith("sweepq: ")
    return message


def nested_list(depth: int) -> Any:
    """A list nested `depth` deep; in args (an object) one level more."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


BAD: list[tuple[str | None, object, object, str]] = [
    # task, args, options, what the message must say
    ("", {}, {}, "task must be the name of a registered task, 1 to 512 characters, got ''"),
    (None, {}, {}, "task must be the name of a registered task, 1 to 512 characters, got NULL"),
    ("t" * 1_000_000, {}, {}, "1 to 512 characters, got 'tttttttttt"),
    ("sweepq.sweep.nightly.start", {}, {}, "names beginning with 'sweepq.' are sweepq's own"),
    ("send", {"v": nested_list(64)}, {}, "the args: JSON nested more than 64 levels deep"),
    (
        "send",
        RawJson('{"v": ' + "[" * 3_000 + "]" * 3_000 + "}"),
        {},
        "the args: JSON nested more than 64 levels deep",
    ),
    ("send", {}, {"idempotency_scope": "sweep:1"}, "beginning with 'sweep:' are kept"),
    ("send", {}, {"idempotency_scope": "sweep-link:1"}, "beginning with 'sweep-link:' are kept"),
    ("send", [1, 2], {}, "args must be a JSON object"),
    ("send", "to", {}, "args must be a JSON object"),
    ("send", {}, ["queue"], "options must be a JSON object of job options, got a JSON array"),
    ("send", {}, {"delay_seconds": 5}, "unknown job option(s) 'delay_seconds'"),
    ("send", {}, {"queue": ""}, "queue must be a queue name"),
    ("send", {}, {"queue": "-mail"}, "queue must be a queue name"),
    ("send", {}, {"queue": "a b"}, "queue must be a queue name"),
    ("send", {}, {"queue": 5}, "queue must be a queue name"),
    ("send", {}, {"priority": 1.5}, "priority must be an integer in -32768..32767, got 1.5"),
    ("send", {}, {"priority": "1"}, 'priority must be an integer in -32768..32767, got "1"'),
    ("send", {}, {"priority": True}, "priority must be an integer in -32768..32767, got true"),
    ("send", {}, {"max_attempts": 0}, "max_attempts must be an integer in 1..1000000, got 0"),
    ("send", {}, {"delay": -1}, "delay must be a number of seconds between 0 and 100 years"),
    ("send", {}, {"delay": "5"}, "delay must be a number of seconds"),
    ("send", {}, {"deadline": 0}, "deadline must be a number of seconds above 0"),
    (
        "send",
        {},
        {"identity_key": "x", "unique_for": -1},
        "unique_for must be a number of seconds above 0",
    ),
    ("send", {}, {"run_at": "2030-01-01T09:00:00"}, "run_at must be an ISO 8601 time with a UTC"),
    ("send", {}, {"run_at": "2030-02-30T09:00:00Z"}, "run_at must be an ISO 8601 time"),
    ("send", {}, {"run_at": "tomorrow"}, "run_at must be an ISO 8601 time"),
    ("send", {}, {"run_at": 1893456000}, "run_at must be an ISO 8601 time"),
    ("send", {}, {"idempotency_key": ""}, "idempotency_key must be a non-empty string of at most"),
    ("send", {}, {"idempotency_scope": 7}, "idempotency_scope must be a string of at most 512"),
    ("send", {}, {"identity_key": ["a"]}, "identity_key must be a non-empty string"),
    ("send", {}, {"concurrency_key": ""}, "concurrency_key must be a non-empty string"),
    ("send", {}, {"group": False}, "group must be a non-empty string"),
]


@pytest.mark.parametrize(("task", "args", "options", "says"), BAD)
async def test_bad_input_is_refused_with_a_message_naming_it_and_writes_nothing(
    pg_tx: Pg, tx_app: sweepq.App, task: str | None, args: object, options: object, says: str
) -> None:
    message = await refusal(pg_tx, tx_app, task, args, options)
    assert says in message


def breaking(rule: Rule) -> dict[str, Any]:
    """Options that break `rule` and nothing else."""
    if isinstance(rule, NotBoth):
        return {rule.first: EXAMPLES[rule.first], rule.second: EXAMPLES[rule.second]}
    if isinstance(rule, Needs):
        return {rule.option: EXAMPLES[rule.option]}
    if isinstance(rule, IndexEntry):
        return dict.fromkeys(rule.parts, "€" * checks.MAX_KEY_LENGTH)
    raise AssertionError(f"no options break {rule!r}: add them here")


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: type(rule).__name__)
async def test_each_rule_between_options_is_refused_in_the_same_words_by_python_and_sql(
    pg_tx: Pg, tx_app: sweepq.App, rule: Rule
) -> None:
    options = breaking(rule)
    task = sweepq.Task(_noop, name="send", queue="default", max_attempts=DEFAULT_MAX_ATTEMPTS)
    with pytest.raises(sweepq.InvalidJobOptionError) as raised:
        resolve(options, task)
    assert await refusal(pg_tx, tx_app, "send", {}, as_json(options)) == f"sweepq: {raised.value}"


@pytest.mark.parametrize("option", ["group", "idempotency_scope"])
async def test_a_reserved_name_is_refused_in_the_same_words_by_python_and_sql(
    pg_tx: Pg, tx_app: sweepq.App, option: str
) -> None:
    # The sweeps layer keeps 'sweep:' for the groups and scopes of its runs (reserved_names).
    with pytest.raises(sweepq.InvalidJobOptionError) as raised:
        check_reserved(option, "sweep:2", [(option, "sweep:")])
    message = await refusal(pg_tx, tx_app, "send", {}, {option: "sweep:2"})
    assert message == f"sweepq: {raised.value}"


@pytest.mark.parametrize(
    "option", [o for o in OPTIONS if o.kind.sql_type == "text"], ids=lambda o: o.name
)
async def test_a_bad_text_option_is_refused_in_the_same_words_by_python_and_sql(
    pg_tx: Pg, tx_app: sweepq.App, option: Any
) -> None:
    bad = "x" * (checks.MAX_KEY_LENGTH + 1) if option.name != "queue" else "-x"
    task = sweepq.Task(_noop, name="send", queue="default", max_attempts=DEFAULT_MAX_ATTEMPTS)
    with pytest.raises((sweepq.InvalidJobOptionError, sweepq.InvalidIdentifierError)) as raised:
        resolve({option.name: bad}, task)
    message = await refusal(pg_tx, tx_app, "send", {}, {option.name: bad})
    if option.name != "queue":  # the queue's refusal is the identifier's, worded by ident.py
        said = str(raised.value).split(", got ")[0]
        assert message.split(", got ")[0] == f"sweepq: {said}"


# the function is rendered from the declaration ----------------------------------------------


def test_the_newest_migration_is_the_enqueue_function_rendered_from_the_declaration() -> None:
    migrations = sorted(render_enqueue.MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.sql"))
    texts = {m: m.read_text("utf-8") for m in migrations}
    defining = [m for m, text in texts.items() if "FUNCTION {schema}.enqueue(" in text]
    rendered = [m for m, text in texts.items() if render_enqueue.region(text) is not None]
    assert rendered, f"no core migration holds the enqueue function; run `{render_enqueue.COMMAND}`"
    assert defining[-1] == rendered[-1], (
        f"{defining[-1].name} defines the SQL function by hand after {rendered[-1].name}; "
        f"render it instead: `{render_enqueue.COMMAND}`"
    )
    assert render_enqueue.region(texts[rendered[-1]]) == render_enqueue.render(), (
        f"{rendered[-1].name} does not hold the render of the job options' declaration "
        f"(core/options); run `{render_enqueue.COMMAND}` (it renders into the newest migration: "
        "if that one is released, write the next migration first, with the option's column)"
    )


def test_the_renderers_check_passes_on_the_migration_as_committed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert render_enqueue.main(["--check"]) == 0, capsys.readouterr().out


def test_the_functions_defaults_are_the_ones_app_task_gives() -> None:
    given = inspect.signature(sweepq.App.task).parameters
    for option in OPTIONS:
        if option.from_task:
            assert option.default == given[option.name].default, option.name


async def test_text_postgresql_cannot_store_is_refused_before_the_function_runs(
    pg_tx: Pg, tx_app: sweepq.App
) -> None:
    for task, options in [("se\x00nd", {}), ("send", {"group": "a\x00b"})]:
        with pytest.raises(psycopg.DataError):
            async with pg_tx.transaction():
                await sql_enqueue(pg_tx, tx_app, task, {}, options)
    assert (await footprint(pg_tx, tx_app.schema))[0] == 0


# the bounds are Python's ----------------------------------------------------------------------

SPAN = checks.MAX_SPAN.total_seconds()
KEY = checks.MAX_KEY_LENGTH
BOUNDS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    # (the largest or smallest accepted, the next value, refused)
    ({"priority": PRIORITY_RANGE.start}, {"priority": PRIORITY_RANGE.start - 1}),
    ({"priority": PRIORITY_RANGE.stop - 1}, {"priority": PRIORITY_RANGE.stop}),
    ({"max_attempts": MAX_ATTEMPTS_RANGE.start}, {"max_attempts": MAX_ATTEMPTS_RANGE.start - 1}),
    ({"max_attempts": MAX_ATTEMPTS_RANGE.stop - 1}, {"max_attempts": MAX_ATTEMPTS_RANGE.stop}),
    ({"delay": 0}, {"delay": -0.001}),
    ({"delay": SPAN}, {"delay": SPAN + 0.001}),
    ({"deadline": 0.001}, {"deadline": 0}),
    ({"deadline": SPAN}, {"deadline": SPAN + 0.001}),
    ({"identity_key": "u", "unique_for": SPAN}, {"identity_key": "u", "unique_for": SPAN + 1}),
    ({"idempotency_key": "k" * KEY}, {"idempotency_key": "k" * (KEY + 1)}),
    ({"idempotency_scope": "s" * KEY}, {"idempotency_scope": "s" * (KEY + 1)}),
    ({"identity_key": "i" * KEY}, {"identity_key": "i" * (KEY + 1)}),
    ({"concurrency_key": "c" * KEY}, {"concurrency_key": "c" * (KEY + 1)}),
    ({"group": "g" * KEY}, {"group": "g" * (KEY + 1)}),
    ({"queue": "q" * 128}, {"queue": "q" * 129}),
    (
        {"idempotency_key": "é" * 512, "idempotency_scope": "é" * 512},  # 2,048 bytes
        {"idempotency_key": "é" * 512, "idempotency_scope": "é" * 512 + "x"},
    ),
    (
        {"run_at": (datetime.now(UTC) + checks.MAX_SPAN - timedelta(days=1)).isoformat()},
        {"run_at": (datetime.now(UTC) + checks.MAX_SPAN + timedelta(days=1)).isoformat()},
    ),
    (
        {"run_at": (datetime.now(UTC) - checks.MAX_SPAN + timedelta(days=1)).isoformat()},
        {"run_at": (datetime.now(UTC) - checks.MAX_SPAN - timedelta(days=1)).isoformat()},
    ),
]


@pytest.mark.parametrize(("accepted", "refused"), BOUNDS)
async def test_each_bound_is_the_one_python_checks(
    pg_tx: Pg, tx_app: sweepq.App, accepted: dict[str, Any], refused: dict[str, Any]
) -> None:
    assert_python_accepts(accepted, True)
    assert_python_accepts(refused, False)
    assert (await sql_enqueue(pg_tx, tx_app, "send", {}, accepted)).created
    await refusal(pg_tx, tx_app, "send", {}, refused)


def assert_python_accepts(options: dict[str, Any], accepted: bool) -> None:
    """Whether App.enqueue's checks (`options.resolve`) take the same options."""
    task = sweepq.Task(_noop, name="send", queue="default", max_attempts=DEFAULT_MAX_ATTEMPTS)
    python = {k: datetime.fromisoformat(v) if k == "run_at" else v for k, v in options.items()}
    try:
        resolve(python, task)
    except (sweepq.InvalidJobOptionError, sweepq.InvalidIdentifierError):
        assert not accepted, f"Python refuses {options}"
    else:
        assert accepted, f"Python accepts {options}"


async def _noop(ctx: sweepq.Context) -> None:
    return None


async def _one_string(ctx: sweepq.Context, s: str) -> None:
    return None


async def _several(ctx: sweepq.Context, a: Any, b: Any, quoted: str, s: str) -> None:
    return None


@pytest.mark.parametrize(
    ("handler", "shape"),
    [
        (_one_string, lambda fill: {"s": fill}),
        (
            _several,
            lambda fill: {
                "a": [1, 2, 3],
                "b": {"c": None, "d": "x: y, z"},
                "quoted": 'a "b", c: d \\',
                "s": fill,
            },
        ),
    ],
    ids=["one string", "separators, quotes and backslashes in strings"],
)
async def test_args_may_be_up_to_the_byte_limit_of_app_enqueue_measured_as_compact_json(
    pg_tx: Pg,
    tx_app: sweepq.App,
    handler: Callable[..., Any],
    shape: Callable[[str], dict[str, Any]],
) -> None:
    task = sweepq.Task(handler, name="send", queue="default", max_attempts=DEFAULT_MAX_ATTEMPTS)
    frame = len(task.encode_args(shape("")))  # as App.enqueue measures it: compact JSON
    fits, over = shape("x" * (MAX_ARGS_BYTES - frame)), shape("x" * (MAX_ARGS_BYTES - frame + 1))
    assert len(task.encode_args(fits)) == MAX_ARGS_BYTES
    with pytest.raises(sweepq.InvalidArgumentsError, match="over the 1,048,576-byte limit"):
        task.encode_args(over)
    assert (await sql_enqueue(pg_tx, tx_app, "send", fits, {})).created
    message = await refusal(pg_tx, tx_app, "send", over, {})
    assert f"args are {MAX_ARGS_BYTES + 1} bytes of JSON, over the 1,048,576-byte limit" in message


async def test_a_duration_too_small_for_a_float_is_zero_microseconds_as_in_python(
    pg_tx: Pg, tx_app: sweepq.App
) -> None:
    cursor = await pg_tx.execute(
        sql.SQL("SELECT job_id FROM {}(%s, NULL, %s::jsonb)").format(
            sql.SQL(tx_app.enqueue_function)
        ),
        ("send", '{"deadline": 1e-400, "delay": 1e-400}'),
    )
    row = await cursor.fetchone()
    assert row is not None
    cursor = await pg_tx.execute(
        f"SELECT deadline_after, run_at - created_at FROM {ident(tx_app.schema)}.jobs"
        " WHERE id = %s",
        (row[0],),
    )
    assert await cursor.fetchone() == (timedelta(0), timedelta(0))


@pytest.mark.parametrize(
    "queue", ["default", "a", "_x", "9", "a.b:c-d_e", "-a", ".a", "a b", "é", "a/b", "a\n"]
)
async def test_queue_names_are_checked_as_python_checks_them(
    pg_tx: Pg, tx_app: sweepq.App, queue: str
) -> None:
    try:
        queue_name(queue)
    except sweepq.InvalidIdentifierError:
        await refusal(pg_tx, tx_app, "send", {}, {"queue": queue})
    else:
        assert (await sql_enqueue(pg_tx, tx_app, "send", {}, {"queue": queue})).created


async def test_null_means_the_default_as_none_does_in_python(pg_tx: Pg, tx_app: sweepq.App) -> None:
    cursor = await pg_tx.execute(
        sql.SQL("SELECT * FROM {}(%s, NULL, NULL)").format(sql.SQL(tx_app.enqueue_function)),
        ("send",),
    )
    row = await cursor.fetchone()
    assert row is not None
    options = dict.fromkeys(NAMES)
    result = await sql_enqueue(pg_tx, tx_app, "send", None, options)
    schema = ident(tx_app.schema)
    cursor = await pg_tx.execute(
        f"SELECT args::text, queue, priority, max_attempts, idempotency_scope, deadline_at"
        f" FROM {schema}.jobs WHERE id = ANY(%s) ORDER BY id",
        ([row[0], result.job_id],),
    )
    expected = ("{}", "default", 0, DEFAULT_MAX_ATTEMPTS, "", None)
    assert await cursor.fetchall() == [expected, expected]


# the psql example of the jobs guide -----------------------------------------------------------

PSQL_BLOCK = re.compile(r"```sh\n(?P<script>psql \"\$SWEEPQ_DSN\".*?)```", re.DOTALL)


async def test_the_guides_psql_example_enqueues_a_job(dsn: str) -> None:
    # psql comes with PostgreSQL's client; the guide's example is for people who have it.
    assert shutil.which("psql") is not None, "install psql (postgresql-client) to run this test"
    page = (ROOT / "docs" / "guides" / "jobs-clients.md").read_text(encoding="utf-8")
    match = PSQL_BLOCK.search(page)
    assert match is not None, "jobs-clients.md has no ```sh block starting with psql"
    name = f"sweepq_psql_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        database = urlunsplit(urlsplit(dsn)._replace(path=f"/{name}"))
        async with sweepq.App(database, schema="sweepq") as app:  # as in the guide's example
            await app.migrate()
            env = {**os.environ, "SWEEPQ_DSN": database}
            with anyio.fail_after(30):
                done = await anyio.run_process(["bash", "-c", match["script"]], env=env)
            assert "created" in done.stdout.decode()
            job = await app.get_job(1)
            assert job is not None
            assert (job.task, job.queue) == ("send_welcome_email", "email")
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
