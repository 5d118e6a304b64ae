"""sweepq's job options for Django tasks: dedup keys, deadlines, concurrency keys, attempts.

Django's `Task` carries the queue, the priority and `run_after`; everything else sweepq can do
to a job is passed here, at three levels, the later overriding the earlier:

- every task of a backend: `TASKS[alias]["OPTIONS"]["JOB_OPTIONS"]`;
- every job of one task: `@job_defaults(...)` under `@task`;
- one enqueue: `with job_options(...): task.enqueue(...)`.

Values are checked where they are given, so a mistake fails at its line, never inside the
caller's transaction.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any, TypeVar

from sweepq.core import options as core_options
from sweepq.core.errors import InvalidJobOptionError

F = TypeVar("F", bound=Callable[..., Any])

# The options Django's own Task sets, and how.
FROM_THE_TASK = {
    "queue": "@task(queue_name=...) or task.using(queue_name=...)",
    "priority": "@task(priority=...) or task.using(priority=...)",
    "run_at": "task.using(run_after=...)",
    "delay": "task.using(run_after=...)",
}
# Options the backend fills itself: the trace context is the enqueuer's span, if any.
_NOT_OFFERED = frozenset({"trace_context"})
# The options of `sweepq.App.enqueue` a Django task takes through this module, in the order the
# docs list them (core/options declares them, checks them and their rules).
ALLOWED = tuple(
    o.name
    for o in core_options.OPTIONS
    if o.name not in FROM_THE_TASK and o.name not in _NOT_OFFERED
)
_ATTRIBUTE = "sweepq_job_options"
_CURRENT: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "sweepq_django_job_options", default=None
)


def check_job_options(options: Mapping[str, object], where: str) -> dict[str, Any]:
    """The options as the SQL enqueue function takes them (durations in seconds).

    Raises:
        InvalidJobOptionError: an unknown option, one the Django task sets, or a bad value;
            the message starts with `where`.
    """
    checked: dict[str, Any] = {}
    for name, value in options.items():
        if name in FROM_THE_TASK:
            raise InvalidJobOptionError(
                f"{where}: {name} is the Django task's to set, with {FROM_THE_TASK[name]}"
            )
        if name not in ALLOWED:
            raise InvalidJobOptionError(
                f"{where}: unknown job option {name!r}; the options are: {', '.join(ALLOWED)}"
            )
        try:
            checked[name] = core_options.check_one(name, value)
        except InvalidJobOptionError as exc:
            raise InvalidJobOptionError(f"{where}: {exc}") from None
    return checked


def merged(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Checked options of several levels, the later overriding the earlier; the rules between
    options are checked on the result.

    Raises:
        InvalidJobOptionError: a rule between options is broken (`core_options.RULES`:
            `unique_for` without `identity_key`, idempotency scope and key too long together).
    """
    options: dict[str, Any] = {}
    for layer in layers:
        options.update(layer)
    core_options.rules.check(options)
    return {name: value for name, value in options.items() if value is not None}


def job_options(
    **options: str | int | float | timedelta | None,
) -> contextlib.AbstractContextManager[None]:
    """sweepq job options for the Django tasks enqueued inside the block (with
    `SweepqBackend`); nested blocks add to (and override) the outer ones.

    Args:
        **options: `max_attempts`, `idempotency_key`, `idempotency_scope`, `identity_key`,
            `unique_for`, `deadline`, `concurrency_key`, `group` and `timeout` (durations as a
            timedelta or seconds), as `sweepq.App.enqueue` takes them. The queue, priority and
            run time are the Django task's.

    Raises:
        InvalidJobOptionError: an unknown option, one the Django task sets, or a bad value
            (raised by the call, before the block runs).

    Example:
        >>> with job_options(idempotency_key=f"receipt:{order.id}", deadline=timedelta(hours=1)):
        ...     send_receipt.enqueue(order.id)
    """
    return _applied(check_job_options(options, "job_options()"))


@contextlib.contextmanager
def _applied(checked: Mapping[str, Any]) -> Iterator[None]:
    token = _CURRENT.set({**current_job_options(), **checked})
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_job_options() -> Mapping[str, Any]:
    """The options of the `job_options` blocks around this call."""
    return _CURRENT.get() or {}


def job_defaults(**options: str | int | float | timedelta | None) -> Callable[[F], F]:
    """Give every job of a Django task these sweepq job options; put it under `@task`.

    Args:
        **options: as `job_options` takes them.

    Raises:
        InvalidJobOptionError: an unknown option, one the Django task sets, or a bad value.
        TypeError: it was put above `@task` (on the Task rather than its function).

    Example:
        >>> @task(queue_name="payments")
        ... @job_defaults(max_attempts=10, concurrency_key="stripe")
        ... def charge(order_id: int) -> dict[str, str]: ...
    """
    checked = check_job_options(options, "@job_defaults()")

    def apply(fn: F) -> F:
        if not callable(fn) or not hasattr(fn, "__dict__"):
            raise TypeError(
                "@job_defaults() goes under @task, on the function itself (got "
                f"{type(fn).__name__}: put it below @task)"
            )
        setattr(fn, _ATTRIBUTE, {**getattr(fn, _ATTRIBUTE, {}), **checked})
        return fn

    return apply


def task_job_options(fn: Callable[..., Any]) -> Mapping[str, Any]:
    """The options `@job_defaults` gave a task's function."""
    found: Mapping[str, Any] = getattr(fn, _ATTRIBUTE, {})
    return found
