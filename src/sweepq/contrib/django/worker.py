"""Running Django tasks in sweepq's worker (`manage.py sweepq_worker`, `sweepq worker --django`).

`worker_app(alias)` is a `sweepq.App` on the backend's database and schema whose tasks are the
Django tasks, each registered under its module path (the task name of its jobs). The `tasks`
modules of the installed apps are imported when it is built; a job of any other Django task is
resolved when the worker first meets it, by importing its module path. A job whose task cannot be
imported (code not deployed to this worker yet, a renamed function, a module that raises while
imported) fails that execution with what the import raised (an `ImportError`), as the framework's
own backends record it, with a note on what to do; it is retried as any failure, so that a
rolling deploy does not lose it.

Every Django task runs as a plain `def` handler, in one of the worker's threads (`--threads`):
Django's ORM is synchronous, and an async task function runs there on an event loop of its own
(the framework's `Task.call`). Around each execution the thread's Django database connections are
handled as Django handles them around a request: `close_old_connections()` before and after, so
that a connection broken or past `CONN_MAX_AGE` is not reused. The framework's `task_started`
and `task_finished` signals are sent for each execution (`task_finished` with SUCCESSFUL when
the function returned, FAILED when it raised, whether or not sweepq then retries it), also when
it raised `SystemExit` or `KeyboardInterrupt`: sweepq's execution fails such a task as any other,
and the worker goes on. As in the framework's own backends, a return value that is not JSON
(`normalize_json` refuses it) fails the execution with that `TypeError`.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterable
from typing import Any, TypeVar, overload

from django.apps import apps
from django.db import close_old_connections
from django.utils import timezone
from django.utils.module_loading import autodiscover_modules

from sweepq import App
from sweepq.core.context import Context
from sweepq.core.errors import ConfigurationError
from sweepq.core.tasks import DEFAULT_MAX_ATTEMPTS
from sweepq.core.tasks import Task as SweepqTask

from ._tasks import (
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_finished,
    task_started,
)
from .backend import SweepqBackend
from .options import merged, task_job_options
from .results import NotADjangoTaskError, find_task

T = TypeVar("T")


def worker_app(alias: str = "default") -> App:
    """The sweepq App whose workers run the Django tasks of `TASKS[alias]` (a `SweepqBackend`);
    Django must be set up (`django.setup()`, as `manage.py` does).

    Args:
        alias: the backend's key in `TASKS`.

    Raises:
        ConfigurationError: `TASKS[alias]` is not a SweepqBackend.

    Example:
        >>> app = worker_app()
        >>> async with app, sweepq.Worker(app, queues=["default"], threads=4) as worker:
        ...     await worker.run()
    """
    backend = task_backends[alias]
    if not isinstance(backend, SweepqBackend):
        raise ConfigurationError(
            f"TASKS[{alias!r}] uses {type(backend).__module__}.{type(backend).__name__}, not "
            "sweepq.contrib.django.SweepqBackend: sweepq's workers run the tasks of a sweepq "
            "backend only"
        )
    app = App(
        backend.dsn, schema=backend.schema, result_max_bytes=backend.settings.result_max_bytes
    )
    tasks = DjangoTasks(backend, app.tasks.values())
    for found in discover(alias):
        tasks[found.module_path] = as_sweepq_task(found, backend)
    app.tasks = tasks
    return app


def discover(alias: str) -> list[Task[Any, Any]]:
    """The Django tasks of backend `alias` found in the `tasks` modules of the installed apps
    (imported here; an error in one of them is raised as it is)."""
    autodiscover_modules("tasks")
    found: dict[str, Task[Any, Any]] = {}
    for config in apps.get_app_configs():
        module = sys.modules.get(f"{config.name}.tasks")
        for value in vars(module).values() if module is not None else ():
            if isinstance(value, Task) and value.backend == alias:
                found.setdefault(value.module_path, value)
    return list(found.values())


class DjangoTasks(dict[str, SweepqTask]):
    """The worker app's tasks: the Django tasks registered so far, and any other one resolved by
    its module path when a job of it is first looked up (the worker looks tasks up with `get`).
    A name that does not resolve gets a task that fails each execution saying why; it is not
    kept, so that a later lookup tries again."""

    def __init__(self, backend: SweepqBackend, tasks: Iterable[SweepqTask] = ()) -> None:
        super().__init__((t.name, t) for t in tasks)
        self.backend = backend

    @overload
    def get(self, key: str, default: None = None, /) -> SweepqTask | None: ...
    @overload
    def get(self, key: str, default: SweepqTask, /) -> SweepqTask: ...
    @overload
    def get(self, key: str, default: T, /) -> SweepqTask | T: ...
    def get(self, key: str, default: Any = None, /) -> Any:
        found = super().get(key)
        if found is None and isinstance(key, str):
            found = self._resolve(key)
        return default if found is None else found

    def __missing__(self, key: str) -> SweepqTask:
        found = self._resolve(key)
        if found is None:
            raise KeyError(key)
        return found

    def _resolve(self, name: str) -> SweepqTask | None:
        if "." not in name:
            return None  # not a module path: no Django task
        try:
            task = find_task(name)
        except NotADjangoTaskError as exc:
            return _unrunnable(name, exc)
        except Exception as exc:  # an ImportError, or what its module raised while imported
            exc.add_note(
                f"the Django task {name!r} cannot be imported: deploy the code that defines it "
                "to this worker (the job is retried meanwhile, as any failure), or cancel the job"
            )
            return _unrunnable(name, exc)
        adapted = as_sweepq_task(task, self.backend)
        self[name] = adapted
        return adapted


def as_sweepq_task(task: Task[Any, Any], backend: SweepqBackend) -> SweepqTask:
    """A sweepq task that runs a Django task: named by its module path, taking the job's args
    (`{"args": [...], "kwargs": {...}}`), returning what the function returns (the result)."""

    def run(
        ctx: Context, args: list[Any] | None = None, kwargs: dict[str, Any] | None = None
    ) -> Any:
        return _execute(task, ctx, args or [], kwargs or {})

    run.__name__ = run.__qualname__ = task.name
    options = merged(backend.settings.job_options, task_job_options(task.func))
    return SweepqTask(
        run,
        name=task.module_path,
        queue=task.queue_name,
        priority=task.priority,
        max_attempts=options.get("max_attempts", DEFAULT_MAX_ATTEMPTS),
        timeout=options.get("timeout"),
    )


def _execute(task: Task[Any, Any], ctx: Context, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """One execution, in a worker thread: Django's connections handled as around a request."""
    close_old_connections()
    try:
        started = timezone.now()
        result: TaskResult[Any, Any] = TaskResult(
            task=task, id=str(ctx.job_id), status=TaskResultStatus.RUNNING, enqueued_at=None,
            started_at=started, finished_at=None, last_attempted_at=started, args=args,
            kwargs=kwargs, backend=task.backend, errors=[],
            worker_ids=[""] * (ctx.attempt - 1) + [ctx.worker_id],
        )  # fmt: skip
        task_started.send(sender=SweepqBackend, task_result=result)
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
            # The framework's backends store the return value as normalize_json makes it, and
            # fail the task when it cannot (a TypeError: the value is not JSON).
            value = normalize_json(value)
        except BaseException as exc:  # SystemExit too: sweepq fails it as any exception
            _finish(result, TaskResultStatus.FAILED, error=exc)
            raise
        _finish(result, TaskResultStatus.SUCCESSFUL, value=value)
        return value
    finally:
        close_old_connections()


def _finish(
    result: TaskResult[Any, Any],
    status: TaskResultStatus,
    *,
    value: Any = None,
    error: BaseException | None = None,
) -> None:
    """Send `task_finished` (inside the `except` for a failure: receivers see `exc_info`)."""
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    if error is not None:
        kind = type(error)
        result.errors.append(
            TaskError(
                exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
                traceback="".join(traceback.format_exception(error)),
            )
        )
    else:
        object.__setattr__(result, "_return_value", value)
    task_finished.send(sender=SweepqBackend, task_result=result)


def _unrunnable(name: str, error: Exception) -> SweepqTask:
    """A task whose every execution raises `error` (why its Django task cannot run); it is
    built for one lookup, so that an error is raised once."""

    async def cannot_run(
        ctx: Context, args: list[Any] | None = None, kwargs: dict[str, Any] | None = None
    ) -> None:
        raise error

    return SweepqTask(cannot_run, name=name, queue="default", max_attempts=DEFAULT_MAX_ATTEMPTS)
