"""The leaf: one job per item, its own retries, and its failure counted on a progress shard.

A leaf that succeeds writes nothing beyond its own job: live progress derives completions from
the leaves enqueued and those still outstanding. A leaf counts itself only when it fails for good
(its last attempt raises) or the handler raises `Cancel`. Those counts are gathered per process
(`ProgressCounter`) and written to that process's shard of the run, one of `PROGRESS_SHARDS`
rows, so that failing leaves neither write a row each nor queue on one hot row. Live counts miss
what a crash lost; the run's counters are recounted from the jobs when it ends.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING, Any

from ..core.context import Context
from ..core.outage import is_connection_loss, unavailable_as_error
from ..core.outcomes import Cancel, RetryAfter, Snooze
from ..core.tasks import Task
from .control import leaf_task_name
from .queries import Counts

if TYPE_CHECKING:
    from .app import App
    from .sweep import Sweep

logger = logging.getLogger("sweepq.sweeps")

PROGRESS_SHARDS = 16


def make_leaf_task(app: App, cls: type[Sweep]) -> Task:
    """The internal task whose jobs are the leaves (items) of `cls`'s runs."""

    async def leaf(ctx: Context, run: int, item: Any) -> None:
        async with unavailable_as_error(app.display_dsn):
            sweep = await app.sweep_for_run(cls, run)
        if sweep is None:
            raise Cancel(f"sweep run {run} no longer exists")
        counts: Counts | None = None
        try:
            await sweep.handle(ctx, item)
        except Snooze:
            raise
        except RetryAfter as exc:
            if exc.consume_budget and ctx.attempt >= ctx.max_attempts:
                counts = Counts(failed=1)
            raise
        except Cancel:
            counts = Counts(cancelled=1)
            raise
        except Exception as exc:
            # The worker hands back, uncharged, an execution the database's loss interrupted.
            if ctx.attempt >= ctx.max_attempts and not is_connection_loss(exc):
                counts = Counts(failed=1)
            raise
        finally:
            if counts is not None:
                await app.sweep_progress.add(run, counts)

    leaf.__qualname__ = leaf.__name__ = f"sweep_leaf_{cls.__name__}"
    return Task(
        leaf,
        name=leaf_task_name(cls.name),
        queue=cls.queue,
        max_attempts=cls.max_attempts,
        priority=cls.priority,
    )


class ProgressCounter:
    """Leaf failures and cancellations of this process, written in batches to its shard.

    The leaf that finds no write in flight writes everything pending (and whatever arrives
    meanwhile) in one statement; the others only add to memory. Nothing is left pending when
    the writes succeed: the writer loops until the buffer is empty.
    """

    def __init__(self, app: App) -> None:
        self.app = app
        # One shard per process: processes rarely share a row, and a process never queues on
        # its own row because it has at most one write in flight.
        self.shard = random.randrange(PROGRESS_SHARDS)
        self._pending: dict[int, Counts] = {}
        self._writing = False

    async def add(self, run_id: int, counts: Counts) -> None:
        self._pending[run_id] = self._pending.get(run_id, Counts()) + counts
        if self._writing:
            return
        self._writing = True
        try:
            while self._pending:
                batch, self._pending = self._pending, {}
                try:
                    await self.app.sweep_queries.sweep_progress_add(
                        self.app.pool, self.shard, batch
                    )
                except BaseException as exc:
                    for run, value in batch.items():
                        self._pending[run] = self._pending.get(run, Counts()) + value
                    if not isinstance(exc, Exception):
                        raise
                    # Live counts are advisory: the next leaf will try again.
                    logger.warning("could not write sweep progress: %s", exc)
                    return
        finally:
            self._writing = False
