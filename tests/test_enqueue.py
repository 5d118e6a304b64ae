"""Enqueue: what a new job row holds, what the outcome says, and transactions of the caller."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sweepq
from factories import backdate_jobs, count_rows
from sweepq.core.enqueue import COPY_MIN_ROWS
from sweepq.core.ident import ident
from sweepq.core.queries import Conn
from waiting import wait_until


def terminal_warnings(caplog: pytest.LogCaptureFixture, job_id: int) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "sweepq" and r.levelno == logging.WARNING and str(job_id) in r.getMessage()
    ]


async def test_enqueue_stores_the_given_options_on_an_available_job(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="send", queue="mail", max_attempts=7, priority=3)
    async def send(ctx: sweepq.Context, to: str, cc: list[str] | None = None) -> None:
        return None

    r = await tx_app.enqueue(
        send,
        {"to": "a@b", "cc": ["c@d"]},
        queue="urgent",
        priority=-5,
        delay=timedelta(seconds=60),
        max_attempts=2,
        idempotency_key="k1",
        idempotency_scope="billing",
        identity_key="user:1",
        deadline=timedelta(seconds=30),
        concurrency_key="smtp",
        conn=conn,
    )
    assert r.outcome == "created"
    assert r.created
    job = await tx_app.get_job(r.job_id, conn=conn)
    assert job is not None
    assert job.id == r.job_id
    assert job.task == "send"
    assert job.queue == "urgent"
    assert job.priority == -5
    assert job.state is sweepq.JobState.AVAILABLE
    assert job.args == {"to": "a@b", "cc": ["c@d"]}
    assert (job.attempt, job.max_attempts, job.snoozes) == (0, 2, 0)
    assert job.errors == []
    # One statement, one now(): the offsets are exact.
    assert job.run_at - job.created_at == timedelta(seconds=60)
    assert job.deadline_at is not None
    assert job.deadline_at - job.created_at == timedelta(seconds=30)
    assert (job.idempotency_scope, job.idempotency_key) == ("billing", "k1")
    assert job.identity_key == "user:1"
    assert job.concurrency_key == "smtp"
    assert job.finished_at is None
    assert job.failure_reason is None
    assert job.worker_id is None
    assert job.lease_expires_at is None


async def test_enqueue_falls_back_to_the_task_defaults(tx_app: sweepq.App, conn: Conn) -> None:
    @tx_app.task(name="send", queue="mail", max_attempts=7, priority=3)
    async def send(ctx: sweepq.Context, to: str) -> None:
        return None

    r = await tx_app.enqueue("send", {"to": "a@b"}, conn=conn)
    job = await tx_app.get_job(r.job_id, conn=conn)
    assert job is not None
    assert (job.queue, job.priority, job.max_attempts) == ("mail", 3, 7)
    assert job.run_at == job.created_at
    assert job.deadline_at is None
    assert job.idempotency_key is None
    assert job.identity_key is None
    assert job.concurrency_key is None


async def test_enqueue_accepts_a_struct_and_fills_in_defaults(
    tx_app: sweepq.App, conn: Conn
) -> None:
    class Args(msgspec.Struct):
        to: str
        copies: int = 1

    @tx_app.task(name="send")
    async def send(ctx: sweepq.Context, to: str, copies: int = 1) -> None:
        return None

    r = await tx_app.enqueue(send, Args(to="x@y"), conn=conn)
    job = await tx_app.get_job(r.job_id, conn=conn)
    assert job is not None
    assert job.args == {"to": "x@y", "copies": 1}


async def test_enqueue_at_an_aware_run_at_stores_that_instant(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="later")
    async def later(ctx: sweepq.Context) -> None:
        return None

    when = datetime(2031, 5, 4, 3, 2, 1, tzinfo=UTC)
    r = await tx_app.enqueue(later, run_at=when, conn=conn)
    job = await tx_app.get_job(r.job_id, conn=conn)
    assert job is not None
    assert job.run_at == when


async def test_get_job_of_an_id_that_does_not_exist_returns_none(
    tx_app: sweepq.App, conn: Conn
) -> None:
    assert await tx_app.get_job(2**62, conn=conn) is None
    assert await tx_app.get_job(-1, conn=conn) is None


async def test_idempotency_hit_on_an_active_job_says_existing_active_without_a_warning(
    tx_app: sweepq.App, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sweepq")

    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context, n: int) -> None:
        return None

    first = await tx_app.enqueue(t, {"n": 1}, idempotency_key="k", conn=conn)
    again = await tx_app.enqueue(t, {"n": 2}, idempotency_key="k", conn=conn)
    assert first.outcome == "created"
    assert again.outcome == "existing_active"
    assert not again.created
    assert again.job_id == first.job_id
    assert await count_rows(tx_app, "jobs", on=conn) == 1
    job = await tx_app.get_job(first.job_id, conn=conn)
    assert job is not None
    assert job.args == {"n": 1}  # the existing job is not overwritten
    assert terminal_warnings(caplog, first.job_id) == []


async def test_idempotency_keys_dedup_only_within_their_scope(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    a = await tx_app.enqueue(t, idempotency_key="k", idempotency_scope="a", conn=conn)
    b = await tx_app.enqueue(t, idempotency_key="k", idempotency_scope="b", conn=conn)
    a2 = await tx_app.enqueue(t, idempotency_key="k", idempotency_scope="a", conn=conn)
    assert (a.outcome, b.outcome, a2.outcome) == ("created", "created", "existing_active")
    assert a.job_id != b.job_id
    assert a2.job_id == a.job_id


async def test_idempotency_hit_on_a_terminal_job_says_existing_terminal_and_warns(
    tx_app: sweepq.App, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sweepq")

    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    first = await tx_app.enqueue(t, idempotency_key="once", conn=conn)
    await tx_app.cancel(first.job_id, conn=conn)
    assert terminal_warnings(caplog, first.job_id) == []
    again = await tx_app.enqueue(t, idempotency_key="once", conn=conn)
    assert again.outcome == "existing_terminal"
    assert again.job_id == first.job_id
    assert await count_rows(tx_app, "jobs", on=conn) == 1
    warnings = terminal_warnings(caplog, first.job_id)
    assert len(warnings) == 1
    assert "'once'" in warnings[0].getMessage()


async def test_idempotency_hit_on_a_completed_job_says_existing_terminal_and_warns(
    app: sweepq.App, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sweepq")

    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    first = await app.enqueue(t, idempotency_key="once")
    async with sweepq.Worker(app, concurrency=1) as worker:
        assert await worker.run_until_idle() == 1
    again = await app.enqueue(t, idempotency_key="once")
    assert again == sweepq.Enqueued(first.job_id, "existing_terminal")
    assert len(terminal_warnings(caplog, first.job_id)) == 1
    async with sweepq.Worker(app, concurrency=1) as worker:
        assert await worker.run_until_idle() == 0


async def test_identity_hit_on_an_active_job_says_existing_active(
    tx_app: sweepq.App, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sweepq")

    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    first = await tx_app.enqueue(t, identity_key="report:7", conn=conn)
    again = await tx_app.enqueue(t, identity_key="report:7", conn=conn)
    other = await tx_app.enqueue(t, identity_key="report:8", conn=conn)
    assert again == sweepq.Enqueued(first.job_id, "existing_active")
    assert other.outcome == "created"
    assert await count_rows(tx_app, "jobs", on=conn) == 2
    assert terminal_warnings(caplog, first.job_id) == []


async def test_identity_is_free_again_once_its_job_is_terminal(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    first = await tx_app.enqueue(t, identity_key="report:7", conn=conn)
    await tx_app.cancel(first.job_id, conn=conn)
    second = await tx_app.enqueue(t, identity_key="report:7", conn=conn)
    assert second.outcome == "created"
    assert second.job_id != first.job_id


async def test_unique_for_hit_on_a_terminal_job_says_existing_terminal_and_warns(
    tx_app: sweepq.App, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sweepq")

    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    window = timedelta(hours=1)
    first = await tx_app.enqueue(t, identity_key="digest", unique_for=window, conn=conn)
    active = await tx_app.enqueue(t, identity_key="digest", unique_for=window, conn=conn)
    assert active == sweepq.Enqueued(first.job_id, "existing_active")
    await tx_app.cancel(first.job_id, conn=conn)
    again = await tx_app.enqueue(t, identity_key="digest", unique_for=window, conn=conn)
    assert again == sweepq.Enqueued(first.job_id, "existing_terminal")
    assert await count_rows(tx_app, "jobs", on=conn) == 1
    warnings = terminal_warnings(caplog, first.job_id)
    assert len(warnings) == 1
    assert "identity_key='digest'" in warnings[0].getMessage()


async def test_a_job_created_before_the_unique_for_window_does_not_block(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    first = await tx_app.enqueue(t, identity_key="digest", unique_for=3600, conn=conn)
    await tx_app.cancel(first.job_id, conn=conn)
    await backdate_jobs(tx_app, timedelta(hours=2), "created_at", ids=[first.job_id], on=conn)
    second = await tx_app.enqueue(t, identity_key="digest", unique_for=3600, conn=conn)
    assert second.outcome == "created"
    assert second.job_id != first.job_id


async def test_enqueue_many_returns_results_in_input_order_and_dedups_within_the_call(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context, n: int) -> None:
        return None

    before = await tx_app.enqueue(t, {"n": 0}, idempotency_key="old", conn=conn)
    results = await tx_app.enqueue_many(
        [
            sweepq.JobSpec(t, {"n": 1}),
            sweepq.JobSpec(t, {"n": 2}, idempotency_key="a"),
            sweepq.JobSpec("t", {"n": 3}, idempotency_key="old"),
            sweepq.JobSpec(t, {"n": 4}, idempotency_key="a"),
            sweepq.JobSpec(t, {"n": 5}, identity_key="i"),
            sweepq.JobSpec(t, {"n": 6}, identity_key="i"),
            sweepq.JobSpec(t, {"n": 7}, priority=9),
        ],
        conn=conn,
    )
    outcomes = [r.outcome for r in results]
    assert outcomes == [
        "created",
        "created",
        "existing_active",
        "existing_active",
        "created",
        "existing_active",
        "created",
    ]
    assert results[2].job_id == before.job_id
    assert results[3].job_id == results[1].job_id
    assert results[5].job_id == results[4].job_id
    assert await count_rows(tx_app, "jobs", on=conn) == 5
    for result, n in zip(results, [1, 2, 0, 2, 5, 5, 7], strict=True):
        job = await tx_app.get_job(result.job_id, conn=conn)
        assert job is not None
        assert job.args == {"n": n}


async def test_enqueue_many_of_nothing_returns_nothing_and_writes_nothing(
    tx_app: sweepq.App, conn: Conn
) -> None:
    before = await count_rows(tx_app, "jobs", on=conn)
    assert await tx_app.enqueue_many([], conn=conn) == []
    assert await count_rows(tx_app, "jobs", on=conn) == before


async def test_a_transaction_rolled_back_by_the_caller_leaves_no_job(app: sweepq.App) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    class Boom(Exception):
        pass

    ids: list[int] = []

    async def enqueue_then_fail(c: Conn) -> None:
        async with c.transaction():
            ids.append((await app.enqueue(t, conn=c)).job_id)
            ids.append((await app.enqueue(t, identity_key="i", unique_for=60, conn=c)).job_id)
            results = await app.enqueue_many([sweepq.JobSpec(t, idempotency_key="k")], conn=c)
            ids.append(results[0].job_id)
            assert await count_rows(app, "jobs", on=c) == 3
            raise Boom

    async with app.pool.acquire() as c:
        with pytest.raises(Boom):
            await enqueue_then_fail(c)
        assert await count_rows(app, "jobs", on=c) == 0
    assert len(ids) == 3
    for job_id in ids:
        assert await app.get_job(job_id) is None
    # The keys were never taken: the same enqueues create jobs now.
    assert (await app.enqueue(t, idempotency_key="k")).outcome == "created"
    assert (await app.enqueue(t, identity_key="i", unique_for=60)).outcome == "created"


async def _heard(heard: list[str], last: str) -> bool:
    return last in heard


async def test_a_copied_batch_rolled_back_by_the_caller_leaves_nothing_and_wakes_no_one(
    app: sweepq.App,
) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    heard: list[str] = []
    listener = await asyncpg.connect(app.dsn)
    await listener.add_listener(app.queries.channel, lambda *a: heard.append(a[3]))
    try:
        many = [sweepq.JobSpec(t, queue="rolled") for _ in range(COPY_MIN_ROWS * 2)]
        async with app.pool.acquire() as c:
            tx = c.transaction()
            await tx.start()
            await app.enqueue_many(many, conn=c)
            assert await count_rows(app, "jobs", on=c) == len(many)
            await tx.rollback()
            assert await count_rows(app, "jobs", on=c) == 0
        # Committed but not due: no notification; then due ones, in one queue and one single.
        await app.enqueue_many([sweepq.JobSpec(t, queue="later", delay=60) for _ in many])
        await app.enqueue_many([sweepq.JobSpec(t, queue="copied") for _ in many])
        await app.enqueue(t, queue="single")
        await app.enqueue(t, queue="single-later", delay=60)
        # Notifications arrive in commit order: once this one is heard, so is all the above.
        await app.pool.execute("SELECT pg_notify($1, 'end')", app.queries.channel)
        await wait_until(lambda: _heard(heard, "end"), what="the closing notification")
    finally:
        await listener.close()
    assert heard == ["copied", "single", "end"]
    assert await count_rows(app, "jobs") == len(many) * 2 + 2


async def test_enqueue_many_sends_plain_jobs_by_copy_and_keyed_ones_by_insert_in_input_order(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context, n: int) -> None:
        return None

    await tx_app.enqueue(t, {"n": -1}, idempotency_key="taken", conn=conn)
    specs = [
        sweepq.JobSpec(t, {"n": n}, idempotency_key="taken" if n == 5 else None)
        if n % 5 == 0
        else sweepq.JobSpec(t, {"n": n}, concurrency_key="k" if n % 7 == 0 else None)
        for n in range(COPY_MIN_ROWS * 3)
    ]
    results = await tx_app.enqueue_many(specs, conn=conn)
    assert [r.outcome for r in results] == [
        "existing_active" if n == 5 else "created" for n in range(len(specs))
    ]
    created = [r.job_id for r in results if r.outcome == "created"]
    assert created == sorted(created)
    for n, result in enumerate(results):
        job = await tx_app.get_job(result.job_id, conn=conn)
        assert job is not None
        assert job.args == {"n": -1 if n == 5 else n}
    assert await count_rows(tx_app, "concurrency_wakeups", on=conn) == 1


async def test_a_job_enqueued_in_an_open_transaction_is_invisible_until_commit(
    app: sweepq.App,
) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    async with app.pool.acquire() as c:
        tx = c.transaction()
        await tx.start()
        r = await app.enqueue(t, conn=c)
        assert await app.get_job(r.job_id) is None
        async with sweepq.Worker(app, concurrency=1) as worker:
            assert await worker.run_until_idle() == 0
        await tx.commit()
    job = await app.get_job(r.job_id)
    assert job is not None
    assert job.state is sweepq.JobState.AVAILABLE


# Scalars JSON keeps exactly: args are stored as json text, so NUL characters and floats of any
# magnitude come back as they went in.
_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text
)
json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(payload=json_values)
async def test_json_args_round_trip_through_enqueue_and_get_job_unchanged(
    tx_app: sweepq.App, conn: Conn, payload: Any
) -> None:
    if "roundtrip" not in tx_app.tasks:

        @tx_app.task(name="roundtrip")
        async def roundtrip(ctx: sweepq.Context, payload: Any, label: str = "") -> None:
            return None

    r = await tx_app.enqueue("roundtrip", {"payload": payload}, conn=conn)
    job = await tx_app.get_job(r.job_id, conn=conn)
    assert job is not None
    assert job.args == {"payload": payload, "label": ""}
    assert type(job.args["payload"]) is type(payload)
    # What the worker decodes for the handler is the same value.
    raw = await conn.fetchval(
        f"SELECT args::text FROM {ident(tx_app.schema)}.jobs WHERE id = $1", r.job_id
    )
    assert tx_app.tasks["roundtrip"].decode_args(raw) == {"payload": payload, "label": ""}


async def test_a_large_float_in_an_untyped_argument_comes_back_as_a_float(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="t")
    async def t(ctx: sweepq.Context, payload: Any) -> None:
        return None

    r = await tx_app.enqueue(t, {"payload": 1.5e16}, conn=conn)
    job = await tx_app.get_job(r.job_id, conn=conn)
    assert job is not None
    assert isinstance(job.args["payload"], float)


async def test_enqueue_of_a_closed_app_says_how_to_open_it(dsn: str) -> None:
    closed = sweepq.App(dsn, schema="sweepq_never_opened")

    @closed.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    with pytest.raises(sweepq.ConfigurationError, match="async with app"):
        await closed.enqueue(t)


async def test_on_duplicate_raise_sends_keyed_jobs_by_copy_and_writes_nothing_on_a_duplicate(
    app: sweepq.App,
) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context, n: int) -> None:
        return None

    def specs(keys: list[str], scope: str = "s") -> list[sweepq.JobSpec]:
        return [
            sweepq.JobSpec(t, {"n": n}, idempotency_scope=scope, idempotency_key=k)
            for n, k in enumerate(keys)
        ]

    many = [f"k{n}" for n in range(COPY_MIN_ROWS * 2)]
    results = await app.enqueue_many(specs(many), on_duplicate="raise")
    ids = [r.job_id for r in results]
    assert [r.outcome for r in results] == ["created"] * len(many)
    assert ids == sorted(ids)
    # A key taken already, by COPY and by the deduplicating INSERT (a call below COPY's size);
    # then two jobs of one call with one key.
    for keys in (["new1", *many[:1], *[f"x{n}" for n in range(COPY_MIN_ROWS)]], ["new2", "k3"]):
        with pytest.raises(sweepq.DuplicateJobError) as raised:
            await app.enqueue_many(specs(keys), on_duplicate="raise")
        assert "already exists" in str(raised.value)
        assert "nothing was enqueued" in str(raised.value)
    with pytest.raises(sweepq.DuplicateJobError, match="new3"):
        await app.enqueue_many(specs(["new3"] * COPY_MIN_ROWS), on_duplicate="raise")
    assert await count_rows(app, "jobs") == len(many)
    # The same keys in another scope are no duplicates; an unknown mode is refused up front.
    assert len(await app.enqueue_many(specs(many, "other"), on_duplicate="raise")) == len(many)
    with pytest.raises(sweepq.InvalidJobOptionError, match="on_duplicate must be"):
        await app.enqueue_many(specs(["y"]), on_duplicate="ignore")  # type: ignore[arg-type]
    assert await count_rows(app, "jobs") == len(many) * 2


async def test_on_duplicate_raise_inside_the_callers_transaction_leaves_it_to_roll_back(
    app: sweepq.App,
) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    await app.enqueue(t, identity_key="busy")
    keyed = [sweepq.JobSpec(t, idempotency_key=f"k{n}") for n in range(COPY_MIN_ROWS)]
    async with app.pool.acquire() as c:
        tx = c.transaction()
        await tx.start()
        await app.enqueue(t, conn=c)
        with pytest.raises(sweepq.DuplicateJobError, match="identity_key"):
            await app.enqueue_many(
                [*keyed, sweepq.JobSpec(t, identity_key="busy")], conn=c, on_duplicate="raise"
            )
        await tx.rollback()
    assert await count_rows(app, "jobs") == 1
