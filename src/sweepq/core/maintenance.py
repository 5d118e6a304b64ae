"""The maintenance loop, run by one elected worker at a time.

Every worker runs this loop; each tick it tries to become (or stay) the holder of the
`maintenance` role, a row renewed before its TTL runs out. Only the holder works: it rescues
jobs whose lease lapsed, fails available jobs past their deadline, fires the closed groups that
have ended, enqueues due cron ticks, and prunes history on its schedule. If the holder dies, its
term expires and another worker takes over within one TTL; a holder that stops cleanly resigns
so the next takes over at once.

It works with the pieces of the app it uses, taken from the app once: the database handle (its
pool and statements), the registry (cron schedules and layers), the job and group operations
(rescue, deadlines, pruning, firing), and the app's `enqueue` for cron ticks.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

from . import cron
from .errors import ConfigurationError
from .operations import PRUNE_BATCH
from .outage import TRANSIENT_ERRORS, Outage

if TYPE_CHECKING:
    from .queue import Queue

logger = logging.getLogger("sweepq.maintenance")

ROLE = "maintenance"
_BATCH = 1_000
_CRON_REFRESH_SECONDS = 600.0


class Maintenance:
    """Leader election and the leader's periodic work for one worker."""

    def __init__(
        self,
        app: Queue,
        worker_id: str,
        *,
        interval: float = 1.0,
        leader_ttl: float = 10.0,
        prune_every: timedelta | None = timedelta(hours=1),
        prune_older_than: timedelta = timedelta(days=7),
        rescue_grace: float = 30.0,
        outage: Outage | None = None,
    ) -> None:
        if interval <= 0:
            raise ConfigurationError("maintenance interval must be > 0 seconds")
        if leader_ttl < 2 * interval:
            raise ConfigurationError(
                f"leader_ttl={leader_ttl:g}s is under two maintenance intervals "
                f"({interval:g}s): the leader would lose its role between renewals"
            )
        self._db = app.db
        self._registry = app.registry
        self._jobs = app.job_ops
        self._groups = app.group_ops
        self._enqueue: cron.Enqueue = app.enqueue
        self.worker_id = worker_id
        self.interval = interval
        self.leader_ttl = leader_ttl
        self.prune_every = prune_every
        self.prune_older_than = prune_older_than
        self.rescue_grace = rescue_grace
        self.outage = outage or Outage(app.display_dsn)
        self.is_leader = False
        self._next_prune = 0.0
        self._next_cron_refresh = 0.0
        self.ticks = 0
        self._tg: TaskGroup | None = None
        self._pruning = False

    async def run(self) -> None:
        """Elect and work every `interval` seconds, until cancelled (then resign)."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                await self._loop()
        finally:
            self._tg = None
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self.resign()

    async def _loop(self) -> None:
        while True:
            try:
                await self.step()
            except TRANSIENT_ERRORS as exc:
                self.is_leader = False
                self.outage.failed(exc)
                await self._db.pool.expire_connections()
            else:
                self.outage.ok()
            await anyio.sleep(self.interval)

    async def step(self) -> bool:
        """One election and, if elected, one round of work; returns whether this is leader."""
        runtime = self._db.queries.runtime
        was_leader = self.is_leader
        self.is_leader = await runtime.leader_elect(
            self._db.pool, ROLE, self.worker_id, self.leader_ttl
        )
        if self.is_leader and not was_leader:
            logger.info("worker %s now leads maintenance", self.worker_id)
            self._next_cron_refresh = 0.0
        if self.is_leader:
            await self.work()
        return self.is_leader

    async def work(self) -> None:
        db, jobs = self._db, self._jobs
        now = anyio.current_time()
        while await jobs.rescue_lapsed(_BATCH, self.rescue_grace, None) == _BATCH:
            pass
        while await jobs.expire_deadlines(_BATCH, None) == _BATCH:
            pass
        # Every closed group that has ended fires, however its last job ended (core/groups.py).
        await self._groups.fire_closed(_BATCH, None)
        for layer in self._registry.layers:
            await layer.maintain()
        schedules = list(self._registry.crons.values())
        if schedules:
            async with db.connection() as conn:
                if now >= self._next_cron_refresh:
                    clock = await db.queries.runtime.clock_now(conn)
                    await cron.register(conn, db.queries, schedules, now=clock)
                    self._next_cron_refresh = now + _CRON_REFRESH_SECONDS
                for schedule in schedules:
                    await cron.enqueue_due(conn, db.queries.runtime, schedule, self._enqueue)
        if self.prune_every is not None and now >= self._next_prune and not self._pruning:
            self._next_prune = now + self.prune_every.total_seconds()
            if self._tg is None:
                await self._prune()
            else:
                # Beside the round, not in it: a first prune of a large backlog must not delay
                # rescue and cron (or outlast the leader's term).
                self._pruning = True
                self._tg.start_soon(self._prune)
        self.ticks += 1

    async def _prune(self) -> None:
        try:
            removed = await self._jobs.prune(self.prune_older_than, PRUNE_BATCH, None)
        except TRANSIENT_ERRORS as exc:
            logger.warning("prune failed (%s); it runs again at the next prune time", exc)
        else:
            if any(removed.values()):
                logger.info("pruned %s", removed)
        finally:
            self._pruning = False

    async def resign(self) -> None:
        if self.is_leader:
            self.is_leader = False
            try:
                await self._db.queries.runtime.leader_resign(self._db.pool, ROLE, self.worker_id)
            except Exception as exc:  # best effort: the term expires anyway
                logger.warning("could not resign maintenance (%s); it expires by itself", exc)
