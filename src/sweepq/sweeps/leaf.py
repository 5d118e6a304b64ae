"""The leaf: one job per item, its own retries, and its failure counted on a progress shard.

A leaf that succeeds writes nothing beyond its own job: live progress derives completions from
the leaves enqueued and those still outstanding. A leaf counts itself only when the core decides
that it failed for good or was cancelled by its handler (its task's outcome hook). Those counts
are gathered per process (`ProgressCounter`) and written to that process's shard of the run, one
of `PROGRESS_SHARDS` rows, so that failing leaves neither write a row each nor queue on one hot
row. Live counts miss what a crash lost; the run's counters are recounted from the jobs when it
ends.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..core.context import Context
from ..core.decision import Decision
from ..core.outage import unavailable_as_error
from ..core.outcomes import Cancel
from ..core.tasks import Task
from .naming import leaf_task_name, run_of_group
from .queries import Counts

if TYPE_CHECKING:
    from .layer import SweepsLayer
    from .sweep import Sweep

logger = logging.getLogger("sweepq.sweeps")


def make_leaf_task(layer: SweepsLayer, cls: type[Sweep]) -> Task:
    """The internal task whose jobs are the leaves (items) of `cls`'s runs."""

    async def leaf(ctx: Context, run: int, item: Any) -> None:
        sweep = layer.known(cls, run)
        if sweep is None:
            async with unavailable_as_error(layer.core.display_dsn):
                sweep = await layer.for_run(cls, run)
        if sweep is None:
            raise Cancel(f"sweep run {run} no longer exists")
        await sweep.handle(ctx, item)

    async def count(ctx: Context, decision: Decision) -> None:
        # The core decided how the leaf ended; a leaf that failed for good, or was cancelled by
        # its handler, counts on its process's shard of the run.
        run = run_of_group(ctx.group)
        if run is not None and decision.state in ("failed", "cancelled"):
            failed = decision.state == "failed"
            await layer.progress.add(run, Counts(failed=int(failed), cancelled=int(not failed)))

    leaf.__qualname__ = leaf.__name__ = f"sweep_leaf_{cls.__name__}"
    return Task(
        leaf,
        name=leaf_task_name(cls.name),
        queue=cls.queue,
        max_attempts=cls.max_attempts,
        priority=cls.priority,
        on_outcome=count,
        outcome_states=("failed", "cancelled"),
    )
