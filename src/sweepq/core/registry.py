"""`Registry`: what an app knows without a database: its tasks, cron schedules, observers and
layers, the default retry policy and the source of the trace context its jobs carry."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from .cron import CronSchedule, make_schedule
from .errors import ConfigurationError, DuplicateTaskError, InvalidJobOptionError, UnknownTaskError
from .events import Observer
from .layers import Layer
from .retry import RetryPolicy
from .tasks import Handler, Task

L = TypeVar("L")


class Registry:
    """Tasks, cron schedules, observers and layers of one app.

    Attributes:
        tasks: the registered tasks by name.
        crons: the registered cron schedules by name.
        observers: the functions told of every event (`events.py`).
        retry_policy: the `RetryPolicy` of tasks registered without their own.
        trace_context_source: the caller's trace context (a W3C traceparent) for the jobs it
            enqueues, which a tracing integration sets (sweepq.contrib.otel); None: none.
        layers: the layers plugged in, in order.
    """

    def __init__(self, retry: RetryPolicy | None) -> None:
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigurationError(f"retry must be a sweepq.RetryPolicy, got {retry!r}")
        self.retry_policy = retry
        self.tasks: dict[str, Task] = {}
        self.crons: dict[str, CronSchedule] = {}
        self.observers: tuple[Observer, ...] = ()
        self.trace_context_source: Callable[[], str | None] | None = None
        self.layers: list[Layer] = []

    # tasks --------------------------------------------------------------------------------

    def register(
        self,
        handler: Handler,
        *,
        name: str | None,
        queue: str,
        max_attempts: int,
        priority: int,
        timeout: float | timedelta | None,
        retry: RetryPolicy | None,
    ) -> Task:
        """Register a handler as a task (`App.task`)."""
        task = Task(
            handler, name=name or f"{handler.__module__}.{handler.__qualname__}", queue=queue,
            max_attempts=max_attempts, priority=priority, timeout=timeout, retry=retry,
        )  # fmt: skip
        self.add_task(task)
        return task

    def add_task(self, task: Task) -> None:
        existing = self.tasks.get(task.name)
        if existing is not None and existing.fn is not task.fn:
            raise DuplicateTaskError(task.name)
        self.tasks[task.name] = task

    def get_task(self, task: Task | str) -> Task:
        name = task.name if isinstance(task, Task) else task
        found = self.tasks.get(name) if isinstance(name, str) else None
        if found is None:
            raise UnknownTaskError(str(name), self.tasks)
        return found

    # observers ----------------------------------------------------------------------------

    def observe(self, observer: Observer) -> Observer:
        if not callable(observer):
            raise ConfigurationError(
                f"an observer must be a function of one event, not {observer!r}"
            )
        self.observers = (*self.observers, observer)
        return observer

    def unobserve(self, observer: Observer) -> None:
        self.observers = tuple(o for o in self.observers if o != observer)

    # cron ---------------------------------------------------------------------------------

    def cron(
        self,
        name: str,
        expression: str,
        task: Task | str | None,
        args: dict[str, Any] | None,
        *,
        overlap: str,
        queue: str | None,
        tz: str,
        target: Mapping[str, Any],
    ) -> CronSchedule:
        """Register a cron schedule of a task, or of a layer's `target` (`App.cron`)."""
        if target:
            if task is not None or args is not None:
                raise InvalidJobOptionError(
                    f"cron {name!r} takes a task (and args) or {', '.join(target)}, not both"
                )
            task, args = self._cron_target(name, target)
        elif task is None:
            raise InvalidJobOptionError(f"cron {name!r} needs a task to enqueue on each tick")
        schedule = make_schedule(
            name, expression, self.get_task(task), args, overlap=overlap, queue=queue, tz=tz
        )
        if name in self.crons and self.crons[name] != schedule:
            raise InvalidJobOptionError(f"a cron schedule named {name!r} is already registered")
        self.crons[name] = schedule
        return schedule

    def _cron_target(self, name: str, target: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        for layer in self.layers:
            found = layer.cron_target(target)
            if found is not None:
                return found
        raise InvalidJobOptionError(
            f"cron {name!r}: no task, and nothing that can schedule {', '.join(target)}"
        )

    # layers -------------------------------------------------------------------------------

    def add_layer(self, layer: Layer) -> None:
        if any(known.component == layer.component for known in self.layers):
            raise ConfigurationError(f"a layer {layer.component!r} is already added")
        self.layers.append(layer)

    def layer(self, kind: type[L]) -> L:
        for layer in self.layers:
            if isinstance(layer, kind):
                return layer
        raise ConfigurationError(f"no {kind.__name__} is added to this app")

    def reserved_from(self, layer: Layer | None) -> Sequence[tuple[str, str]]:
        """The names kept by the layers, but `layer`'s own, which its jobs may use."""
        return [r for other in self.layers if other is not layer for r in other.reserved]
