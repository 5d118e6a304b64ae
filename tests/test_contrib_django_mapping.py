"""How a sweepq job reads as a Django task result: its status, its errors, its workers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

import sweepq
import sweepq.contrib.django
from sweepq.contrib.django.mapping import STATUS, exception_path, task_errors, worker_ids
from sweepq.core.decision import describe
from sweepq.core.jobs import Job, JobError


def job(state: str, *, attempt: int = 1, worker_id: str | None = None, errors: Any = ()) -> Job:
    now = datetime.now(UTC)
    return Job(
        id=sweepq.JobId(1), task="t.x", queue="default", priority=0,
        state=sweepq.JobState(state), args={}, attempt=attempt, max_attempts=3, snoozes=0,
        errors=list(errors), run_at=now, created_at=now, attempted_at=now, finished_at=None,
        deadline_at=None, failure_reason=None, worker_id=worker_id, lease_expires_at=None,
        idempotency_scope="", idempotency_key=None, identity_key=None, concurrency_key=None,
        group=None,
    )  # fmt: skip


def test_every_job_state_has_a_task_result_status() -> None:
    assert set(STATUS) == set(sweepq.JobState)
    assert {s: STATUS[s] for s in sweepq.JobState} == {
        sweepq.JobState.AVAILABLE: "READY",
        sweepq.JobState.RUNNING: "RUNNING",
        sweepq.JobState.COMPLETED: "SUCCESSFUL",
        sweepq.JobState.FAILED: "FAILED",
        sweepq.JobState.CANCELLED: "FAILED",
    }


class PaymentDeclined(Exception):
    pass


def raised(exc: BaseException) -> str:
    try:
        raise exc
    except BaseException as caught:
        return describe(caught)


@pytest.mark.parametrize(
    ("kind", "error", "path"),
    [
        ("exception", raised(ValueError("bad")), "builtins.ValueError"),
        ("exception", raised(PaymentDeclined("no")), f"{__name__}.PaymentDeclined"),
        ("exception", raised(KeyError("k")), "builtins.KeyError"),
        ("exception", "Traceback...\n  File x\nLocalThing: odd", "__main__.LocalThing"),
        ("exception", "", "builtins.Exception"),
        ("retry_after", "retry after 30s", "sweepq.RetryAfter"),
        ("cancelled", "customer left", "sweepq.Cancel"),
        ("timeout", "the handler ran past its timeout of 5 s", "builtins.TimeoutError"),
        ("lease_expired", "lease held by worker w expired", "builtins.TimeoutError"),
        ("worker_died", "worker w died while running it", "builtins.SystemError"),
        ("unknown_task", "no handler for task 't'", "builtins.LookupError"),
        ("error", "the stored args do not fit", "builtins.TypeError"),
        ("interrupted", "the worker stopped", None),
        ("database_unavailable", raised(ConnectionError("gone")), None),
    ],
)
def test_each_error_kind_reads_as_an_exception_class_or_is_not_the_tasks(
    kind: str, error: str, path: str | None
) -> None:
    assert exception_path(JobError(1, "2026-01-01T00:00:00Z", kind, error)) == path


def test_a_jobs_errors_and_attempts_read_as_the_frameworks() -> None:
    errors = [
        JobError(1, "t", "exception", raised(ValueError("one"))),
        JobError(2, "t", "interrupted", "stopped"),
        JobError(2, "t", "exception", raised(ValueError("two"))),
    ]
    failed = job("failed", attempt=2, errors=errors)
    assert [p for p, _ in task_errors(failed)] == ["builtins.ValueError"] * 2
    assert worker_ids(failed) == ["", ""]
    assert worker_ids(job("running", attempt=3, worker_id="host:1:ab")) == ["", "", "host:1:ab"]
    assert worker_ids(job("available", attempt=0)) == []
