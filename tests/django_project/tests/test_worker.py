"""Running Django tasks: `manage.py sweepq_worker` as a real process, and the testing kit's
in-process worker; results read back, waits woken by the finish, retention."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from django.db import connection
from django.tasks import TaskResultStatus, default_task_backend
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_finished, task_started
from orders.models import Order
from orders.tasks import charge, nightly_report, ping, send_receipt

import sweepq
from sweepq.contrib.django import await_for, wait_for
from sweepq.testing import drain

pytestmark = pytest.mark.django_db(transaction=True)
PROJECT = Path(__file__).resolve().parent.parent


def start_worker(schema: str) -> subprocess.Popen[str]:
    """`python manage.py sweepq_worker` on the test database and the test's schema."""
    env = {
        **os.environ,
        "DJANGO_DB_NAME": connection.settings_dict["NAME"],
        "SWEEPQ_SCHEMA": schema,
    }
    return subprocess.Popen(
        [sys.executable, "manage.py", "sweepq_worker", "--queue", "emails", "--queue", "default",
         "--threads", "2", "--poll-seconds", "30"],
        cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


async def stop(worker: subprocess.Popen[str]) -> tuple[int, str, str]:
    worker.send_signal(signal.SIGTERM)
    out, err = await anyio.to_thread.run_sync(lambda: worker.communicate(timeout=30))
    return worker.returncode, out, err


async def test_manage_py_sweepq_worker_runs_a_sync_task_and_its_result_wakes_the_wait(
    tasks_app: sweepq.App,
) -> None:
    order = await Order.objects.acreate(email="ada@example.com", total_cents=1200)
    worker = start_worker(tasks_app.schema)
    try:
        result = await send_receipt.aenqueue(order.pk)
        # Woken by the job's end (NOTIFY): the worker polls only every 30 s, the wait never.
        done = await await_for(result, timeout=60)
    finally:
        code, out, err = await stop(worker)
    assert code == 0, err
    assert "TASKS['default']" in out
    assert "worker stopped" in out
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == {"sent_to": "ada@example.com"}
    assert done.attempts == 1
    assert (await Order.objects.aget(pk=order.pk)).receipt_sent_at is not None


def test_a_worker_for_a_backend_that_does_not_exist_says_so() -> None:
    env = {**os.environ, "DJANGO_DB_NAME": connection.settings_dict["NAME"]}
    run = subprocess.run(
        [sys.executable, "manage.py", "sweepq_worker", "--django-backend", "missing"],
        cwd=PROJECT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2
    assert "--django:" in run.stderr
    assert "missing" in run.stderr


# --8<-- [start:results]
async def test_results_are_read_back_for_success_and_failure(tasks_app: sweepq.App) -> None:
    paid = await charge.aenqueue(1, 500)
    declined = await charge.aenqueue(2, -5)
    assert await drain(tasks_app) == {"completed": 1, "failed": 1}

    paid = await charge.aget_result(paid.id)
    assert paid.status == TaskResultStatus.SUCCESSFUL
    assert paid.return_value == {"order_id": 1, "charged_cents": 500}

    declined = await charge.aget_result(declined.id)
    assert declined.status == TaskResultStatus.FAILED
    (error,) = declined.errors
    assert error.exception_class is ValueError
    assert "cannot charge -5 cents for order 2" in error.traceback
    # --8<-- [end:results]


async def test_a_wait_is_woken_by_the_in_process_worker(tasks_app: sweepq.App) -> None:
    # --8<-- [start:wait]
    result = await ping.aenqueue("hello")
    async with anyio.create_task_group() as tg:
        tg.start_soon(drain, tasks_app)
        done = await await_for(result, timeout=30)  # returns when the job ends
    assert done.return_value == "pong: hello"
    # --8<-- [end:wait]


def test_a_sync_wait_works_from_sync_code() -> None:
    result = send_receipt.enqueue(123456)  # no such order: it fails
    with pytest.raises(TimeoutError, match=r"did not finish within 0\.2s"):
        wait_for(result, timeout=0.2)  # no worker runs here


async def test_a_task_with_context_sees_its_attempt_and_id_and_signals_are_sent(
    tasks_app: sweepq.App,
) -> None:
    heard: list[tuple[str, str]] = []

    def record(sender: object, task_result: object, **kwargs: object) -> None:
        heard.append((task_result.status, task_result.id))  # type: ignore[attr-defined]

    task_started.connect(record)
    task_finished.connect(record)
    try:
        result = await nightly_report.aenqueue("2026-12-01")
        await drain(tasks_app)
    finally:
        task_started.disconnect(record)
        task_finished.disconnect(record)
    done = await nightly_report.aget_result(result.id)
    assert done.return_value == {"day": "2026-12-01", "attempt": 1, "result_id": result.id}
    assert heard == [("RUNNING", result.id), ("SUCCESSFUL", result.id)]


async def test_a_failing_task_is_retried_and_reads_ready_meanwhile(tasks_app: sweepq.App) -> None:
    result = await send_receipt.aenqueue(987654)  # no such order: Order.DoesNotExist
    await drain(tasks_app, include_scheduled=False)
    waiting = await send_receipt.aget_result(result.id)
    assert waiting.status == TaskResultStatus.READY  # a retry is scheduled (3 attempts)
    assert [e.exception_class_path for e in waiting.errors] == ["orders.models.Order.DoesNotExist"]
    await drain(tasks_app)  # the retries, now
    failed = await send_receipt.aget_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.attempts == 3
    assert len(failed.errors) == 3


async def test_retention_removes_results_with_their_jobs(tasks_app: sweepq.App) -> None:
    result = await ping.aenqueue("old news")
    await drain(tasks_app)
    assert (await ping.aget_result(result.id)).return_value == "pong: old news"
    removed = await tasks_app.prune(older_than=timedelta(0))
    assert removed["jobs"] == 1
    with pytest.raises(TaskResultDoesNotExist):
        await ping.aget_result(result.id)


async def test_a_job_whose_task_cannot_be_imported_fails_saying_why(
    tasks_app: sweepq.App,
) -> None:
    enqueued = await tasks_app.enqueue("orders.tasks.renamed", {"args": [1]}, max_attempts=1)
    await drain(tasks_app)
    job = await tasks_app.get_job(enqueued.job_id)
    assert job is not None
    assert (job.state, job.failure_reason) == (sweepq.JobState.FAILED, "max_attempts_exceeded")
    assert "the Django task 'orders.tasks.renamed' cannot be imported" in job.errors[-1].error
    assert "deploy the code that defines it" in job.errors[-1].error
    with pytest.raises(TaskResultDoesNotExist, match="cannot be imported"):
        await default_task_backend.aget_result(str(enqueued.job_id))
