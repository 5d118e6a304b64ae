"""`SweepqBackend`: Django's tasks framework (`django.tasks`) on sweepq.

Enqueue writes the job with sweepq's SQL enqueue function on Django's own connection to the
database holding sweepq's schema, in the caller's transaction: a task enqueued inside
`transaction.atomic()` exists only if that transaction commits, and workers hear of it when it
does. Results are read with the core's statement (`job_get_json`) on the same connection; no
asyncpg connection is made on Django's request path. Waiting for a result (`wait_for`) does
LISTEN on a connection of its own.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import anyio
import msgspec
from django.conf import settings as django_settings
from django.core import checks as django_checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils import timezone

from sweepq import App
from sweepq.core.checks import storable_text
from sweepq.core.errors import InvalidIdentifierError, UnknownJobError
from sweepq.core.ident import queue_name
from sweepq.core.jobs import Job
from sweepq.core.tasks import MAX_ARGS_BYTES

from ._tasks import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    normalize_json,
    task_backends,
    task_enqueued,
)
from .options import current_job_options, merged, task_job_options
from .results import NotADjangoTaskError, find_task, task_result
from .settings import BackendSettings, database_dsn, read_settings
from .statements import backend_statements

T = TypeVar("T")


class SweepqBackend(BaseTaskBackend):
    """A Django tasks backend that stores tasks as sweepq jobs in your PostgreSQL.

    Configured in `TASKS`; every key of `OPTIONS` is optional:

    ```python
    TASKS = {
        "default": {
            "BACKEND": "sweepq.contrib.django.SweepqBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {
                "DATABASE": "default",  # the DATABASES entry holding sweepq's schema
                "SCHEMA": "sweepq",  # else SWEEPQ_SCHEMA, else "sweepq"
                "JOB_OPTIONS": {"max_attempts": 3},  # sweepq job options of every task
                "RESULT_MAX_BYTES": 65536,  # the largest return value a job keeps
                "DSN": None,  # the workers' URL (default: built from DATABASES)
            },
        }
    }
    ```

    It supports deferred tasks (`run_after`), priorities (Django's -100..100 are sweepq's
    priorities as they are: higher runs first), async task functions, and reading results from
    any process (`get_result`). A task is identified by its function's module path, which is the
    sweepq task name of its jobs. Workers run with `manage.py sweepq_worker` (or
    `sweepq worker --django`); schema migrations run with `manage.py migrate` once
    `"sweepq.contrib.django"` is in `INSTALLED_APPS`.

    Attributes:
        settings: the checked `OPTIONS`.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.settings: BackendSettings = read_settings(alias, self.options)
        for name in self.queues:
            _queue(name, f"TASKS[{alias!r}]['QUEUES']", error=ImproperlyConfigured)
        self._sql = backend_statements(self.settings.schema)

    @property
    def schema(self) -> str:
        """sweepq's schema in the backend's database."""
        return self.settings.schema

    @property
    def dsn(self) -> str:
        """The URL workers and waits connect with: `OPTIONS["DSN"]`, else the backend's
        `DATABASES` entry as it is now (a test database, during tests)."""
        if self.settings.dsn is not None:
            return self.settings.dsn
        database = self.settings.database
        return database_dsn(database, connections[database].settings_dict)

    def app(self) -> App:
        """A sweepq `App` on the backend's database and schema, not open yet (for its
        operations: `get_job`, `prune`, ...; `worker_app` builds the one workers run)."""
        return App(self.dsn, schema=self.schema, result_max_bytes=self.settings.result_max_bytes)

    # the framework's interface -------------------------------------------------------------

    def validate_task(self, task: Task[Any, Any]) -> None:
        """The framework's checks, and sweepq's rules for queue names."""
        super().validate_task(task)
        _queue(task.queue_name, f"task {task.module_path!r}", error=InvalidTask)

    def enqueue(
        self, task: Task[Any, Any], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> TaskResult[Any, Any]:
        """Enqueue `task` on the backend's database connection, in its current transaction.

        Raises:
            InvalidTask: the task cannot run on this backend.
            sweepq.InvalidJobOptionError: the sweepq job options around it cannot be honoured.
            TypeError, ValueError: its arguments are not JSON values, or are over 1 MiB.
        """
        self.validate_task(task)
        text = _arguments(task, args, kwargs)
        options = _job_options(task, self.settings)
        with connections[self.settings.database].cursor() as cursor:
            cursor.execute(self._sql["django_task_enqueue"], [task.module_path, text, options])
            row = cursor.fetchone()
        assert row is not None  # the function returns one row or raises
        job_id, outcome = row
        # The result is the stored row (its created_at is the transaction's now(), its run_at
        # the run_after as stored), so it equals what get_result reads back.
        job = self._read(str(job_id))
        if outcome == "created":
            result = task_result(job, task, self.alias)
        else:  # deduplicated: the result is the job it points at, in whatever state it is
            result = self._result(job, str(job_id))
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        """The result of a task from its id (its sweepq job id), read on Django's connection.

        Raises:
            TaskResultDoesNotExist: no such job (never, or pruned by retention), or its task is
                not a Django task this process can import.
        """
        return self._result(self._read(result_id), result_id)

    def check(self, **kwargs: Any) -> list[django_checks.CheckMessage]:
        """Django's system checks: the backend's database must be a PostgreSQL one."""
        database = self.settings.database
        if database not in django_settings.DATABASES:
            return [
                django_checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS']['DATABASE'] is {database!r}, which is "
                    f"not in DATABASES (it has: {', '.join(django_settings.DATABASES)})",
                    id="sweepq.E001",
                )
            ]
        try:
            database_dsn(database, connections[database].settings_dict)
        except ImproperlyConfigured as exc:  # not PostgreSQL
            return [django_checks.Error(str(exc), id="sweepq.E002")]
        return []

    # waiting ------------------------------------------------------------------------------

    async def await_result(
        self,
        result_id: str,
        *,
        timeout: float | timedelta | None,  # noqa: ASYNC109  # as App.wait_for's
    ) -> TaskResult[Any, Any]:
        """See `sweepq.contrib.django.await_for`."""
        job_id = _job_id(result_id)
        try:
            job = await self.app().wait_for(job_id, timeout=timeout)
        except UnknownJobError as exc:
            raise TaskResultDoesNotExist(str(exc)) from None
        return self._result(job, result_id)

    def wait_result(
        self, result_id: str, *, timeout: float | timedelta | None
    ) -> TaskResult[Any, Any]:
        """See `sweepq.contrib.django.wait_for`."""
        return run_in_thread(lambda: self.await_result(result_id, timeout=timeout))

    # internals ----------------------------------------------------------------------------

    def _read(self, result_id: str) -> Job:
        job_id = _job_id(result_id)
        with connections[self.settings.database].cursor() as cursor:
            cursor.execute(self._sql["job_get_json"], [job_id])
            row = cursor.fetchone()
        if row is None:
            raise TaskResultDoesNotExist(
                f"no task result {result_id!r} in schema {self.schema!r}: it never existed, "
                "or retention pruned its job"
            )
        return msgspec.json.decode(row[0], type=Job)

    def _result(self, job: Job, result_id: str) -> TaskResult[Any, Any]:
        try:
            task = find_task(job.task)
        except NotADjangoTaskError as exc:
            raise TaskResultDoesNotExist(
                f"task result {result_id!r} is no Django task's result: {exc}"
            ) from None
        except Exception as exc:  # an ImportError, or what its module raised while imported
            raise TaskResultDoesNotExist(
                f"task result {result_id!r} is a job of the Django task {job.task!r}, which "
                f"cannot be imported here ({type(exc).__name__}: {exc})"
            ) from None
        return task_result(job, task, self.alias)


def wait_for(
    result: TaskResult[Any, Any], *, timeout: float | timedelta | None
) -> TaskResult[Any, Any]:
    """Wait until a task result is finished (successful or failed) and return it, read again.

    Woken by LISTEN/NOTIFY when its job ends (`sweepq.App.wait_for`), not by polling; the
    wait holds a connection of its own. For sync code (a management command, a script, a
    test); in async code, `await await_for(...)`.

    Args:
        result: what `task.enqueue()` (or `get_result`) returned.
        timeout: the most seconds (or a timedelta) to wait; None waits as long as it takes.

    Raises:
        TimeoutError: it did not finish in time; the message says where it is.
        TaskResultDoesNotExist: its job no longer exists.
        DatabaseUnavailableError: the database could not be reached, or went away meanwhile.

    Example:
        >>> result = send_receipt.enqueue(order.id)
        >>> wait_for(result, timeout=30).return_value
        {'sent_to': 'ada@example.com'}
    """
    return _backend(result).wait_result(result.id, timeout=timeout)


async def await_for(
    result: TaskResult[Any, Any],
    *,
    timeout: float | timedelta | None,  # noqa: ASYNC109  # as App.wait_for's
) -> TaskResult[Any, Any]:
    """`wait_for` for async code (an async view, an async test): the same, awaited.

    Example:
        >>> result = await send_receipt.aenqueue(order.id)
        >>> (await await_for(result, timeout=30)).status
        <TaskResultStatus.SUCCESSFUL: 'SUCCESSFUL'>
    """
    return await _backend(result).await_result(result.id, timeout=timeout)


def _backend(result: TaskResult[Any, Any]) -> SweepqBackend:
    backend = task_backends[result.backend]
    if not isinstance(backend, SweepqBackend):
        raise TypeError(
            f"task result {result.id!r} is of backend {result.backend!r}, a "
            f"{type(backend).__name__}, not a sweepq.contrib.django.SweepqBackend"
        )
    return backend


def _queue(name: object, where: str, error: type[Exception]) -> str:
    try:
        return queue_name(name)
    except InvalidIdentifierError as exc:
        raise error(f"{where}: {exc}") from None


def _job_id(result_id: str) -> int:
    try:
        job_id = int(result_id)
    except (TypeError, ValueError):
        raise TaskResultDoesNotExist(
            f"no task result {result_id!r}: sweepq's result ids are job ids (whole numbers)"
        ) from None
    if not 0 < job_id < 2**63:
        raise TaskResultDoesNotExist(f"no task result {result_id!r}: not a job id")
    return job_id


def _arguments(task: Task[Any, Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """The job's args as JSON text: an object of the call's args and kwargs, as the
    framework normalizes them (tuples as lists, ...), refused here if PostgreSQL could not store
    them (an error in the SQL would abort the caller's transaction)."""
    where = f"the arguments of task {task.module_path!r}"
    value = {"args": normalize_json(list(args)), "kwargs": normalize_json(dict(kwargs))}
    _refuse_unstorable(value, where)
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError as exc:
        raise ValueError(f"{where} must be JSON values: {exc}") from None
    size = len(text.encode())
    if size > MAX_ARGS_BYTES:
        raise ValueError(
            f"{where} are {size:,} bytes of JSON, over the {MAX_ARGS_BYTES:,}-byte limit; store "
            "large payloads elsewhere and pass a reference"
        )
    return text


def _refuse_unstorable(value: Any, where: str) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and not storable_text(item):
            raise ValueError(
                f"{where} hold a string with NUL ('\\x00') or a lone surrogate, which "
                f"PostgreSQL cannot store: {item[:40]!r}"
            )
        if isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _job_options(task: Task[Any, Any], settings: BackendSettings) -> str:
    """The SQL function's options: the task's queue, priority and run_after, then sweepq's."""
    options = merged(settings.job_options, task_job_options(task.func), current_job_options())
    options["queue"] = task.queue_name
    options["priority"] = task.priority
    if task.run_after is not None:
        options["run_at"] = _aware(task.run_after).isoformat()
    return json.dumps(options)


def _aware(when: datetime) -> datetime:
    # Aware whenever USE_TZ is on (the framework checks); otherwise Django's own convention for
    # naive times: the current time zone.
    return when if timezone.is_aware(when) else timezone.make_aware(when)


def run_in_thread(call: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to its end on an event loop of its own, in a thread of its own: a sync
    caller may or may not have a loop running in its thread, and must not share it."""

    async def main() -> T:
        return await call()

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sweepq-wait") as pool:
        return pool.submit(anyio.run, main).result()
