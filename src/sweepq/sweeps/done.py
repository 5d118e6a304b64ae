"""The job that tells of a run's end: `Sweep.on_complete`, once per end of the run.

A run ends in one transaction holding its row lock (`ending.end_run`). That transaction also
closes the run's job group (the core's `close_group`) with this job as the group's `then`: its
leaves are all terminal by then, so the core enqueues the job right there, with the key
`end:<n>` in the run's scope. The end and its job commit together or not at all, whatever
crashes, kills and concurrent workers do, and a run that runs again (resume, retry-failed)
reopens its group, so that its next end has its own job.

The job carries the run as it ended (a `SweepRun` snapshot): `on_complete` sees the state and
counters of that end, even if the run has run again since. Like any job, it has its attempts
and backoff, and its handler runs at least once: a crash in the middle runs it again.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import anyio
import msgspec

from ..core.context import Context
from ..core.enqueue import JobSpec
from ..core.tasks import Task
from .naming import done_task_name, end_key, leaf_group, link_priority, own_task
from .runs import SweepRun

if TYPE_CHECKING:
    from .layer import SweepsLayer
    from .sweep import Sweep


def has_on_complete(cls: type[Sweep]) -> bool:
    """Whether the sweep defines `on_complete` (the base class's does nothing)."""
    from .sweep import Sweep

    return cls.on_complete is not Sweep.on_complete


def make_done_task(layer: SweepsLayer, cls: type[Sweep]) -> Task:
    """The internal task whose jobs call `cls.on_complete`, one per end of a run."""

    async def done(ctx: Context, run: int, end: int, snapshot: dict[str, Any]) -> None:
        ended = msgspec.convert(snapshot, SweepRun)
        sweep = layer.instance(cls, ended.params, run)
        if inspect.iscoroutinefunction(cls.on_complete):
            await sweep.on_complete(ctx, ended)
        else:  # a plain def: in a thread, as the core runs plain handlers
            call = cast(Callable[[Context, SweepRun], object], sweep.on_complete)
            await anyio.to_thread.run_sync(partial(call, ctx, ended))

    return own_task(
        cls,
        done,
        done_task_name(cls.name),
        max_attempts=cls.max_attempts,
        priority=link_priority(cls),
    )


def done_spec(task: Task, run: SweepRun) -> JobSpec:
    """The job of the run's end number `run.ends`: keyed in the run's scope, so that one end
    can never enqueue two."""
    return JobSpec(
        task,
        {"run": run.id, "end": run.ends, "snapshot": msgspec.to_builtins(run)},
        idempotency_scope=leaf_group(run.id),
        idempotency_key=end_key(run.ends),
    )
