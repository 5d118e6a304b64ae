"""Where Django's own task backends (`ImmediateBackend`, `DummyBackend`) set the behaviour, the
sweepq backend behaves as they do: the result `enqueue` returns is the stored one, a task whose
return value is not JSON fails with the `TypeError` that says so, a task that cannot be imported
fails with the `ImportError` its import raised (or what its module raised), and one that raises
`SystemExit` or `KeyboardInterrupt` fails as any other, its worker going on.

The tasks here are defined in this module: the worker imports them by module path."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.tasks import Task, TaskResultStatus, default_task_backend, task
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_finished
from django.utils import timezone
from orders.tasks import charge, ping, send_receipt

import sweepq
from sweepq.contrib.django import job_defaults
from sweepq.contrib.django.mapping import task_errors
from sweepq.testing import drain

pytestmark = pytest.mark.django_db(transaction=True)


@task
@job_defaults(max_attempts=1)
def returns_an_object() -> object:
    return object()


@task
@job_defaults(max_attempts=1)
def returns_a_set() -> set[int]:
    return {1, 2}  # sweepq alone would store it as a list


@task
@job_defaults(max_attempts=1)
def exits() -> None:
    raise SystemExit(3)


@task
@job_defaults(max_attempts=1)
def interrupts() -> None:
    raise KeyboardInterrupt


@contextmanager
def finished_statuses() -> Iterator[list[str]]:
    """The status of each `task_finished` sent meanwhile."""
    heard: list[str] = []

    def record(sender: object, task_result: object, **kwargs: object) -> None:
        heard.append(task_result.status)  # type: ignore[attr-defined]

    task_finished.connect(record)
    try:
        yield heard
    finally:
        task_finished.disconnect(record)


def test_enqueued_at_of_the_returned_result_is_the_stored_one() -> None:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")  # the transaction's time: when its jobs are created
            (began,) = cursor.fetchone()
        result = send_receipt.enqueue(1)
    assert result.enqueued_at == began
    assert default_task_backend.get_result(result.id).enqueued_at == began


def test_a_result_read_back_equals_the_returned_one_run_after_included() -> None:
    later = timezone.now() + timedelta(hours=1)
    returned = charge.using(run_after=later).enqueue(7, 300)
    read_back = default_task_backend.get_result(returned.id)
    assert read_back.task.run_after == later
    assert read_back == returned
    undeferred = send_receipt.enqueue(2)
    assert default_task_backend.get_result(undeferred.id) == undeferred
    assert undeferred.task.run_after is None


@pytest.mark.parametrize(
    ("not_json", "kind"), [(returns_an_object, "object"), (returns_a_set, "set")]
)
async def test_a_return_value_that_is_not_json_fails_the_task_with_its_type_error(
    tasks_app: sweepq.App, not_json: Task[[], object], kind: str
) -> None:
    with finished_statuses() as heard:
        result = await not_json.aenqueue()
        assert await drain(tasks_app) == {"failed": 1}
    assert heard == [TaskResultStatus.FAILED]
    failed = await not_json.aget_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    (error,) = failed.errors
    assert error.exception_class is TypeError
    assert f"TypeError: Unsupported type: <class '{kind}'>" in error.traceback


@pytest.mark.parametrize(
    ("path", "raised"),
    [
        ("orders.tasks.renamed", 'ImportError: Module "orders.tasks" does not define a "renamed"'),
        ("orders.gone.send", "ModuleNotFoundError: No module named 'orders.gone'"),
    ],
)
async def test_a_task_that_cannot_be_imported_fails_with_its_import_error(
    tasks_app: sweepq.App, path: str, raised: str
) -> None:
    enqueued = await tasks_app.enqueue(path, {"args": []}, max_attempts=1)
    assert await drain(tasks_app) == {"failed": 1}
    job = await tasks_app.get_job(enqueued.job_id)
    assert job is not None
    # The result cannot be read here (its task cannot be imported): its errors as it records them.
    ((exception_class_path, traceback),) = task_errors(job)
    assert exception_class_path == f"builtins.{raised.partition(':')[0]}"
    assert raised in traceback
    assert f"the Django task {path!r} cannot be imported: deploy the code" in traceback


async def test_a_task_whose_module_raises_while_imported_fails_with_that_error(
    tasks_app: sweepq.App, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "half_deployed.py").write_text("raise RuntimeError('settings.PAYMENTS missing')\n")
    monkeypatch.syspath_prepend(tmp_path)
    enqueued = await tasks_app.enqueue("half_deployed.charge", {"args": []}, max_attempts=1)
    assert await drain(tasks_app) == {"failed": 1}  # and the worker goes on
    job = await tasks_app.get_job(enqueued.job_id)
    assert job is not None
    ((exception_class_path, traceback),) = task_errors(job)
    assert exception_class_path == "builtins.RuntimeError"
    assert "RuntimeError: settings.PAYMENTS missing" in traceback
    with pytest.raises(TaskResultDoesNotExist, match="cannot be imported here"):
        await default_task_backend.aget_result(str(enqueued.job_id))


async def test_a_task_raising_system_exit_or_keyboard_interrupt_fails_and_the_worker_goes_on(
    tasks_app: sweepq.App,
) -> None:
    with finished_statuses() as heard:
        exited = await exits.aenqueue()
        interrupted = await interrupts.aenqueue()
        after = await ping.aenqueue("still here")
        assert await drain(tasks_app) == {"failed": 2, "completed": 1}
    assert sorted(heard) == ["FAILED", "FAILED", "SUCCESSFUL"]
    for result, raised in ((exited, SystemExit), (interrupted, KeyboardInterrupt)):
        failed = await default_task_backend.aget_result(result.id)
        assert failed.status == TaskResultStatus.FAILED
        (error,) = failed.errors
        assert error.exception_class is raised
    assert (await ping.aget_result(after.id)).return_value == "pong: still here"
