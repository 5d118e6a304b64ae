"""Live counts of a run's failed and cancelled leaves, sharded so they never meet on a hot row.

Those counts are gathered per process and written to that process's shard of the run, one of
`PROGRESS_SHARDS` rows, so that failing leaves neither write a row each nor queue on one hot row.
Live counts miss what a crash lost; the run's counters are recounted from its jobs when it ends.
"""

from __future__ import annotations

import logging
import random

from ..core.app import App as CoreApp
from .queries import Counts, SweepQueries

logger = logging.getLogger("sweepq.sweeps")

PROGRESS_SHARDS = 16


class ProgressCounter:
    """Leaf failures and cancellations of this process, written in batches to its shard.

    The leaf that finds no write in flight writes everything pending (and whatever arrives
    meanwhile) in one statement; the others only add to memory. Nothing is left pending when
    the writes succeed: the writer loops until the buffer is empty.
    """

    def __init__(self, core: CoreApp, queries: SweepQueries) -> None:
        self.core = core
        self.queries = queries
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
                    await self.queries.sweep_progress_add(self.core.pool, self.shard, batch)
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
