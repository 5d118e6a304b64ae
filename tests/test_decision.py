"""The end of an execution is decided in one pure function, `decide()`: a table of cases, no
worker; and the endings decided in SQL are the same as `decide()` gives (against PostgreSQL)."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import asyncpg
import pytest

import sweepq
from factories import connected_as, expire_deadline, expire_lease
from statements import claim
from sweepq.core.decision import (
    UNKNOWN_TASK_HANDBACKS,
    DeadlinePassed,
    Decision,
    Interrupted,
    LeaseLapsed,
    NotRunnable,
    UnknownTask,
    decide,
)
from sweepq.core.endings import ENDINGS, Ending
from sweepq.core.ident import ident
from sweepq.core.queries import Conn

LOST = asyncpg.exceptions.CannotConnectNowError("the database system is starting up")
UNAVAILABLE = sweepq.DatabaseUnavailableError("127.0.0.1:5432", ConnectionRefusedError("refused"))

# (what the handler raised, attempt, max_attempts, deadline_in) -> what the decision must hold
CASES: list[tuple[str, BaseException | None, int, int, float | None, dict[str, Any]]] = [
    ("returns", None, 1, 5, None, {"state": "completed", "charged": True}),
    ("returns past its deadline", None, 1, 5, -10.0, {"state": "completed"}),
    (
        "snoozes",
        sweepq.Snooze(30),
        1,
        5,
        None,
        {"state": "available", "delay": 30.0, "charged": False, "snoozed": True},
    ),
    (
        "snoozes on its last attempt",
        sweepq.Snooze(30),
        5,
        5,
        None,
        {"state": "available", "charged": False, "snoozed": True},
    ),
    (
        "retries after",
        sweepq.RetryAfter(5),
        1,
        3,
        None,
        {"state": "available", "delay": 5.0, "charged": True, "error_kind": "retry_after"},
    ),
    (
        "retries after on its last attempt",
        sweepq.RetryAfter(5),
        3,
        3,
        None,
        {"state": "failed", "failure_reason": "max_attempts_exceeded", "error_kind": "retry_after"},
    ),
    (
        "retries after without spending budget",
        sweepq.RetryAfter(5, consume_budget=False),
        3,
        3,
        None,
        {"state": "available", "delay": 5.0, "charged": False, "snoozed": True},
    ),
    (
        "cancels",
        sweepq.Cancel("customer deleted"),
        1,
        5,
        None,
        {"state": "cancelled", "error_kind": "cancelled", "error": "customer deleted"},
    ),
    (
        "fails on its last attempt",
        RuntimeError("boom"),
        5,
        5,
        None,
        {"state": "failed", "failure_reason": "max_attempts_exceeded", "error_kind": "exception"},
    ),
    (
        "loses the database",
        LOST,
        5,
        5,
        None,
        {
            "state": "available",
            "delay": 1.0,
            "charged": False,
            "error_kind": "database_unavailable",
        },
    ),
    (
        "cannot reach the database through the app",
        UNAVAILABLE,
        1,
        1,
        None,
        {"state": "available", "charged": False, "error_kind": "database_unavailable"},
    ),
    (
        "loses the database in every task of a group",
        ExceptionGroup("tasks", [LOST, UNAVAILABLE]),
        1,
        1,
        None,
        {"state": "available", "charged": False, "error_kind": "database_unavailable"},
    ),
    (
        "fails in one task of a group and loses the database in another",
        ExceptionGroup("tasks", [LOST, RuntimeError("boom")]),
        1,
        1,
        None,
        {"state": "failed", "failure_reason": "max_attempts_exceeded"},
    ),
    (
        "is stopped with its worker",
        Interrupted("the worker stopped"),
        5,
        5,
        None,
        {"state": "available", "delay": 0.0, "charged": False, "error_kind": "interrupted"},
    ),
    (
        "cannot run",
        NotRunnable("cannot run"),
        1,
        5,
        None,
        {"state": "failed", "failure_reason": "error", "error_kind": "error"},
    ),
    (
        "has no handler in this worker",
        UnknownTask("new_task", handbacks=0),
        1,
        5,
        None,
        {"state": "available", "delay": 30.0, "charged": False, "error_kind": "unknown_task"},
    ),
    (
        "has no handler in this worker on its last attempt",
        UnknownTask("new_task", handbacks=3),
        5,
        5,
        None,
        {"state": "available", "delay": 30.0, "charged": False, "error_kind": "unknown_task"},
    ),
    (
        "has no handler in the tenth worker in a row",
        UnknownTask("new_task", handbacks=UNKNOWN_TASK_HANDBACKS - 1),
        1,
        5,
        None,
        {"state": "failed", "failure_reason": "unknown_task", "charged": False},
    ),
    (
        "has no handler and its deadline comes first",
        UnknownTask("new_task", handbacks=0),
        1,
        5,
        10.0,
        {"state": "failed", "failure_reason": "deadline_exceeded", "charged": False},
    ),
    (
        "raises SystemExit",
        SystemExit(3),
        1,
        5,
        None,
        {"state": "available", "charged": True, "error_kind": "exception"},
    ),
    (
        "raises KeyboardInterrupt on its last attempt",
        KeyboardInterrupt(),
        5,
        5,
        None,
        {"state": "failed", "failure_reason": "max_attempts_exceeded", "error_kind": "exception"},
    ),
    (
        "has stored args that do not fit",
        NotRunnable("the stored args do not fit", reason="invalid_args"),
        1,
        5,
        None,
        {"state": "failed", "failure_reason": "invalid_args", "error_kind": "error"},
    ),
    (
        "snoozes past its deadline",
        sweepq.Snooze(30),
        0,
        5,
        10.0,
        {"state": "failed", "failure_reason": "deadline_exceeded", "charged": False},
    ),
    (
        "snoozes within its deadline",
        sweepq.Snooze(30),
        0,
        5,
        60.0,
        {"state": "available", "delay": 30.0},
    ),
    (
        "fails and its backoff passes its deadline",
        RuntimeError("boom"),
        1,
        5,
        0.5,
        {"state": "failed", "failure_reason": "deadline_exceeded", "error_kind": "exception"},
    ),
    (
        "is stopped after its deadline",
        Interrupted("the worker stopped"),
        1,
        5,
        -1.0,
        {"state": "failed", "failure_reason": "deadline_exceeded", "charged": False},
    ),
]


@pytest.mark.parametrize(
    ("raised", "attempt", "max_attempts", "deadline_in", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_the_decision_for_each_ending(
    raised: BaseException | None,
    attempt: int,
    max_attempts: int,
    deadline_in: float | None,
    expected: dict[str, Any],
) -> None:
    decision = decide(raised, attempt=attempt, max_attempts=max_attempts, deadline_in=deadline_in)
    got = {field: getattr(decision, field) for field in expected}
    assert got == expected


def test_a_failure_is_retried_after_a_backoff_that_grows_with_the_attempt() -> None:
    delays = [
        decide(RuntimeError("boom"), attempt=n, max_attempts=10, deadline_in=None).delay
        for n in (1, 2, 3, 4)
    ]
    for n, delay in enumerate(delays, start=1):
        assert 0.75 * 2 ** (n - 1) <= delay <= 1.25 * 2 ** (n - 1)


def test_a_failure_records_the_exception_with_its_traceback() -> None:
    try:
        raise ValueError("bad row 42")
    except ValueError as exc:
        decision = decide(exc, attempt=1, max_attempts=5, deadline_in=None)
    assert decision.error is not None
    assert "Traceback" in decision.error
    assert "ValueError: bad row 42" in decision.error


def test_a_plain_connection_error_of_the_handlers_own_is_its_failure() -> None:
    decision = decide(
        ConnectionRefusedError("api down"), attempt=1, max_attempts=5, deadline_in=None
    )
    assert (decision.state, decision.charged, decision.error_kind) == (
        "available",
        True,
        "exception",
    )


def test_a_decision_is_a_plain_value() -> None:
    assert decide(None, attempt=1, max_attempts=1, deadline_in=None) == Decision(state="completed")


# The decision table -------------------------------------------------------------------------


def _rows(endings: list[Ending]) -> list[Any]:
    return [pytest.param(e, id=f"{e.where}: {e.case}") for e in endings]


@pytest.mark.parametrize("ending", _rows(list(ENDINGS)))
def test_decide_gives_each_ending_of_the_decision_table(ending: Ending) -> None:
    decision = decide(
        ending.raised, attempt=ending.attempt, max_attempts=ending.max_attempts,
        deadline_in=ending.deadline_in, policy=ending.policy,
    )  # fmt: skip
    assert _ending_of(decision) == _expected(ending)


SQL_ENDINGS = [e for e in ENDINGS if e.where != "worker"]


@pytest.mark.parametrize(
    "ending", [pytest.param(e, id=f"{e.where}: {e.case}") for e in SQL_ENDINGS]
)
async def test_the_statements_that_decide_an_ending_write_what_decide_gives(
    tx_app: sweepq.App, conn: Conn, ending: Ending
) -> None:
    """Each ending decided in SQL, reproduced against PostgreSQL: the job's state, failure
    reason, charge and error are those of `decide()` for the same ending."""
    schema = ident(tx_app.schema)

    @tx_app.task(name="t", max_attempts=ending.max_attempts)
    async def t(ctx: sweepq.Context) -> None:
        return None

    job_id = (await tx_app.enqueue(t, conn=conn)).job_id
    worker = f"parity-{uuid.uuid4().hex[:12]}"
    raised: BaseException | None = ending.raised
    if isinstance(raised, LeaseLapsed):
        await conn.execute(
            f"UPDATE {schema}.jobs SET attempt = $2, crashes = $3 WHERE id = $1",
            job_id, ending.attempt - 1, raised.crashes,
        )  # fmt: skip
        assert len(await claim(tx_app, worker=worker, on=conn)) == 1
        if ending.deadline_in is not None and ending.deadline_in <= 0:
            await expire_deadline(tx_app, job_id, on=conn)
        await expire_lease(tx_app, job_id, on=conn)
        alive = contextlib.nullcontext() if raised.died else connected_as(tx_app, worker)
        async with alive:
            assert await tx_app.rescue_lapsed(grace_seconds=0, conn=conn) == 1
        raised = LeaseLapsed(worker, died=raised.died, crashes=raised.crashes)
        before = ending.attempt
    else:
        assert isinstance(raised, DeadlinePassed)
        await expire_deadline(tx_app, job_id, on=conn)
        if ending.where == "job_claim":
            assert await claim(tx_app, worker=worker, on=conn) == []
        else:
            assert await tx_app.expire_deadlines(conn=conn) == 1
        before = 0
    job = await tx_app.get_job(job_id, conn=conn)
    assert job is not None
    decision = decide(
        raised, attempt=ending.attempt, max_attempts=ending.max_attempts,
        deadline_in=ending.deadline_in, policy=ending.policy,
    )  # fmt: skip
    assert _ending_of(decision) == _expected(ending)
    charged = job.attempt == before and before > 0
    last = job.errors[-1] if job.errors else None
    written = (
        job.state.value,
        job.failure_reason,
        None if last is None else last.kind,
        charged,
        None if last is None else last.error,
    )
    assert written == (*_ending_of(decision), decision.error)


def _ending_of(decision: Decision) -> tuple[str, str | None, str | None, bool]:
    return (decision.state, decision.failure_reason, decision.error_kind, decision.charged)


def _expected(ending: Ending) -> tuple[str, str | None, str | None, bool]:
    return (ending.state, ending.failure_reason, ending.error_kind, ending.charged)
