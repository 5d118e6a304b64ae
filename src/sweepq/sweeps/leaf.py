"""The leaf: one job per item, its own retries, and nothing written beyond its own job.

A run's leaves are the core's job group `sweep:<run>`: live progress counts the group's
outstanding, failed and cancelled jobs through its index (never its completed ones), and the
rest of the leaves enqueued are the completed ones. A leaf that succeeds, fails or is cancelled
writes nothing but its own job's outcome, and a leaf retried by any means (`jobs retry`
included) moves its run's counts by itself.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..core.context import Context
from ..core.decision import Cancel
from ..core.outage import unavailable_as_error
from ..core.tasks import Task
from .naming import leaf_task_name, own_task

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

    return own_task(
        cls, leaf, leaf_task_name(cls.name), max_attempts=cls.max_attempts, priority=cls.priority
    )
