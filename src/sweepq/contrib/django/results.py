"""sweepq jobs as Django task results (`TaskResult`), as `mapping.py` describes."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.utils.module_loading import import_string

from sweepq.core.jobs import Job, JobState

from ._tasks import InvalidTask, Task, TaskError, TaskResult, TaskResultStatus
from .mapping import STATUS, run_after, task_errors, worker_ids


class NotADjangoTaskError(LookupError):
    """A job's task name imports as something other than a Django task."""


def find_task(name: str) -> Task[Any, Any]:
    """The Django task a job's task name (its module path) names.

    Raises:
        ImportError: it cannot be imported, as the import raised it (no such module, or the
            module does not define the name); any other exception its module raised while
            imported, as it raised it.
        NotADjangoTaskError: it is not a Django task; the message says what it is.
    """
    found = import_string(name)
    if not isinstance(found, Task):
        raise NotADjangoTaskError(
            f"{name!r} is a {type(found).__name__}, not a Django task (a function decorated "
            "with django.tasks.task)"
        )
    return found


def as_enqueued(task: Task[Any, Any], job: Job, backend: str) -> Task[Any, Any]:
    """`task` as its job was enqueued: its queue, priority and run_after, on `backend`."""
    when = run_after(job)
    as_stored = (job.queue, job.priority, when, backend)
    if (task.queue_name, task.priority, task.run_after, task.backend) == as_stored:
        return task
    try:
        return dataclasses.replace(
            task, queue_name=job.queue, priority=job.priority, run_after=when, backend=backend
        )
    except InvalidTask:  # enqueued outside Django, with a queue or priority Django refuses
        return task


def task_result(job: Job, task: Task[Any, Any], backend: str) -> TaskResult[Any, Any]:
    """The Django task result a sweepq job reads as."""
    args = job.args.get("args")
    kwargs = job.args.get("kwargs")
    result: TaskResult[Any, Any] = TaskResult(
        task=as_enqueued(task, job, backend),
        id=str(job.id),
        status=TaskResultStatus(STATUS[job.state]),
        enqueued_at=job.created_at,
        # sweepq keeps when the latest execution started, not the first.
        started_at=job.attempted_at,
        finished_at=job.finished_at,
        last_attempted_at=job.attempted_at,
        args=args if isinstance(args, list) else [],
        kwargs=kwargs if isinstance(kwargs, dict) else {},
        backend=backend,
        errors=[
            TaskError(exception_class_path=path, traceback=text) for path, text in task_errors(job)
        ],
        worker_ids=worker_ids(job),
    )
    if job.state is JobState.COMPLETED:
        # The framework's own backends set the return value this way: it is not an init field.
        object.__setattr__(result, "_return_value", job.result)
    return result
