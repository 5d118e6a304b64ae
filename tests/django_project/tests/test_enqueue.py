"""Enqueueing Django tasks: in the caller's transaction, with the framework's options and
sweepq's."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.test import AsyncClient
from django.utils import timezone
from orders.models import Order
from orders.tasks import charge, send_receipt

import sweepq
from sweepq.contrib.django import job_options
from sweepq.testing import assert_enqueued, drain, refute_enqueued

pytestmark = pytest.mark.django_db(transaction=True)


def jobs_of(schema: str, task: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT count(*) FROM "{schema}".jobs WHERE task = %s', [task])
        (count,) = cursor.fetchone()
    return int(count)


def test_a_task_enqueued_in_a_transaction_exists_only_if_it_commits() -> None:
    schema = default_task_backend.schema
    before = jobs_of(schema, send_receipt.module_path)
    with transaction.atomic():
        order = Order.objects.create(email="ada@example.com", total_cents=1200)
        committed = send_receipt.enqueue(order.pk)
    try:
        with transaction.atomic():
            order = Order.objects.create(email="bob@example.com", total_cents=1200)
            send_receipt.enqueue(order.pk)
            raise RuntimeError("the view failed after enqueueing")
    except RuntimeError:
        pass
    assert jobs_of(schema, send_receipt.module_path) == before + 1
    result = default_task_backend.get_result(committed.id)
    assert result.status == TaskResultStatus.READY
    assert result.task == send_receipt


async def test_the_view_enqueues_with_its_order_or_not_at_all(
    tasks_app: sweepq.App, async_client: AsyncClient
) -> None:
    # --8<-- [start:view-test]
    placed = await async_client.post("/orders", {"email": "ada@example.com", "total_cents": 990})
    assert placed.status_code == 201
    order_id = placed.json()["order"]
    await assert_enqueued(tasks_app, "orders.tasks.send_receipt", {"args": [order_id]})

    refused = await async_client.post("/orders", {"email": "bob@example.com", "total_cents": 0})
    assert refused.status_code == 400  # the order and its task were rolled back together
    await refute_enqueued(tasks_app, "orders.tasks.send_receipt", {"args": [order_id + 1]})
    assert await Order.objects.acount() == 1
    # --8<-- [end:view-test]


async def test_queue_priority_and_run_after_are_the_jobs(tasks_app: sweepq.App) -> None:
    later = timezone.now() + timedelta(hours=1)
    result = await charge.using(priority=-50, run_after=later).aenqueue(7, 300)
    job = await tasks_app.get_job(int(result.id))
    assert job is not None
    assert (job.queue, job.priority, job.run_at) == ("default", -50, later)
    assert job.args == {"args": [7, 300], "kwargs": {}}
    # @job_defaults on the task, JOB_OPTIONS in the settings (overridden by the task's):
    assert (job.max_attempts, job.concurrency_key) == (1, "payments")
    # Not due: a drain that does not make scheduled jobs due leaves it.
    assert await drain(tasks_app, include_scheduled=False) == {}
    assert (await charge.aget_result(result.id)).status == TaskResultStatus.READY


async def test_job_options_give_one_enqueue_sweepqs_options(tasks_app: sweepq.App) -> None:
    # --8<-- [start:job-options]
    with job_options(idempotency_key="receipt:42", deadline=timedelta(hours=1), group="batch-7"):
        first = await send_receipt.aenqueue(42)
        again = await send_receipt.aenqueue(42)  # deduplicated: the same job
    assert again.id == first.id
    # --8<-- [end:job-options]
    job = await tasks_app.get_job(int(first.id))
    assert job is not None
    assert (job.idempotency_key, job.group, job.max_attempts) == ("receipt:42", "batch-7", 3)
    assert job.deadline_at is not None


def test_what_the_framework_or_postgresql_refuses_is_refused_before_any_sql() -> None:
    with pytest.raises(InvalidTask, match="Queue 'nope' is not valid"):
        send_receipt.using(queue_name="nope")
    with pytest.raises(sweepq.InvalidJobOptionError, match="queue is the Django task's to set"):
        job_options(queue="emails")
    with (
        pytest.raises(sweepq.InvalidJobOptionError, match="unique_for needs identity_key"),
        transaction.atomic(),
        job_options(unique_for=60),
    ):
        send_receipt.enqueue(1)
    with pytest.raises(ValueError, match="NUL"), transaction.atomic():
        send_receipt.enqueue("a\x00b")
    with pytest.raises(TypeError, match="Unsupported type"), transaction.atomic():
        send_receipt.enqueue(object())
    # The transaction is still usable after each refusal: nothing reached the database.
    with transaction.atomic():
        assert Order.objects.count() == 0


def test_an_unknown_result_id_does_not_exist() -> None:
    for result_id in ("999999999", "not-a-number", "-3"):
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(result_id)


def test_the_system_checks_pass() -> None:
    from django.core.management import call_command

    call_command("check")


def test_settings_that_cannot_work_are_refused_by_name(settings: Any) -> None:
    backend = settings.TASKS["default"]
    settings.TASKS = {"default": {**backend, "QUEUES": ["default", "no spaces"]}}
    with pytest.raises(ImproperlyConfigured, match=r"TASKS\['default'\]\['QUEUES'\]: queue name"):
        task_backends["default"]  # the backend is built on first use
    settings.TASKS = {"default": {**backend, "OPTIONS": {"SCHEMA": "no-dashes"}}}
    with pytest.raises(ImproperlyConfigured, match=r"\['SCHEMA'\] \(or SWEEPQ_SCHEMA\)"):
        task_backends["default"]
