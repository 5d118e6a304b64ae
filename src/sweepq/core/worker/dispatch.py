"""The dispatcher: claims up to the free slots in one statement and hands each job to a runner;
it wakes on a NOTIFY for its queues (the listener, here too), on a freed slot or a recorded
outcome, and at least every poll interval. It logs the pauses of its queues: those in place when
it starts, and each pause and resume it hears of (a resume wakes it)."""

from __future__ import annotations

import logging

import anyio
import asyncpg

from ..database import Database
from ..events import JobClaimed, emit
from ..lane import Lane
from ..notify import listen
from ..queues import PAUSED, RESUMED, pauses
from ..registry import Registry
from ..rows import ClaimBatch
from .config import WorkerConfig
from .state import Shared, Slot

# How long a busy worker may wait for more of its slots to free before claiming for a few: about
# one claim's round trip. Without it, two claims in flight by turns split the slots between them
# for good (17 jobs, then 2, then 17...), each batch paying a whole claim.
LINGER_SECONDS = 0.002

logger = logging.getLogger("sweepq.worker")


class Dispatcher:
    """Claims jobs into the worker's free slots, and listens for the queues' notifications."""

    def __init__(
        self, db: Database, registry: Registry, config: WorkerConfig, shared: Shared
    ) -> None:
        self.db = db
        self.registry = registry
        self.config = config
        self.shared = shared
        self.queues = list(config.queues)
        # The claim loop keeps one of the pool's connections: taking one from the pool per
        # statement costs about as much client CPU as the statement.
        self.lane: Lane | None = None
        self.listening = False
        # Whether the next claim may be the light one (job_claim_light): the last claim saw no
        # concurrency key in play. A light claim that finds one claims nothing and says so.
        self.light = False

    async def run(self, pool: asyncpg.Pool[asyncpg.Record], *, until_idle: bool) -> None:
        """Claim until the worker stops (or, `until_idle`, until nothing is left to do)."""
        shared = self.shared
        concurrency = self.config.concurrency
        poll = self.config.poll_seconds
        await shared.retrying(self.log_pauses, pool)
        while not shared.stopping:
            changed = shared.changed
            free = self.free()
            if 0 < free < concurrency // 2 and shared.slots:
                # A few free slots among busy ones: more are likely to free within a claim's
                # time; claim for them together (an idle worker never waits here).
                with anyio.move_on_after(LINGER_SECONDS):
                    while 0 < free < concurrency // 2 and shared.slots:
                        await changed.wait()
                        changed = shared.changed
                        free = self.free()
                free = self.free()
            batch = ClaimBatch([], woke=False)
            if free > 0 and anyio.current_time() <= shared.leases_ok_until:
                # Idle only if this claim saw every recorded outcome (a snoozed job may be due
                # again, a finished keyed job frees its key): nothing pending before or after it.
                flushes = shared.flushes
                settled = shared.settled()
                batch = await shared.retrying(self.claim, pool, free)
                if batch.jobs:
                    self._take(batch)
                if (
                    until_idle
                    and not batch.jobs
                    and not batch.woke
                    and settled
                    and not shared.slots
                    and shared.settled()
                    and flushes == shared.flushes
                ):
                    return
            # Keys this claim woke are claimable now (or a light claim found a key in play: the
            # full claim takes it at once); a full claim may leave more due jobs.
            if batch.woke or (batch.jobs and len(shared.slots) < concurrency):
                continue
            # Wait for a slot to free up, an outcome to be recorded, a NOTIFY, or the poll tick.
            with anyio.move_on_after(poll):
                await changed.wait()

    def _take(self, batch: ClaimBatch) -> None:
        """Give each claimed job a slot and wake the runners."""
        shared = self.shared
        observers = self.registry.observers
        for job in batch.jobs:
            slot = Slot(job)
            shared.slots[slot.token] = slot
            shared.suspects += job.crashes > 0
            shared.ready.append(slot)
            if observers:
                emit(observers, JobClaimed(
                    job_id=job.id, task=job.task, queue=job.queue,
                    attempt=job.attempt, worker_id=shared.worker_id, waited=job.waited,
                ))  # fmt: skip
        ready, shared.ready_event = shared.ready_event, anyio.Event()
        ready.set()

    async def claim(self, pool: asyncpg.Pool[asyncpg.Record], free: int) -> ClaimBatch:
        """One claim of up to `free` jobs, on the claim loop's own connection when it has one."""
        lane = self.lane
        async with pool.acquire() if lane is None else lane.connection() as conn:
            # A job whose worker died while running it runs alone among this worker's suspects:
            # a death while it runs then singles it out (see job_rescue).
            batch = await self.db.queries.job_claim(
                conn,
                self.queues,
                free,
                self.shared.worker_id,
                self.config.lease_seconds,
                self.shared.suspects == 0,
                light=self.light,
            )
        self.light = batch.light
        return batch

    async def log_pauses(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        """Log each of the worker's queues that is paused as it starts."""
        for pause in await pauses(self.db.queries, pool):
            if pause.queue in self.queues:
                why = f" ({pause.reason})" if pause.reason else ""
                logger.warning(
                    "queue %r is paused since %s%s: its jobs wait until `sweepq queues resume %s`",
                    pause.queue, f"{pause.paused_at:%Y-%m-%d %H:%M:%S %Z}", why, pause.queue,
                )  # fmt: skip

    def heard(self, payload: str) -> None:
        """A pause or a resume of one of the worker's queues, from the listener."""
        for prefix, what in ((PAUSED, "paused"), (RESUMED, "resumed")):
            queue = payload.removeprefix(prefix)
            if queue != payload and queue in self.queues:
                logger.info("queue %r %s", queue, what)
                if prefix == RESUMED:
                    self.shared.signal()

    def free(self) -> int:
        """Slots free for a claim. Outcomes waiting to be recorded beyond one batch's worth hold
        slots too: a worker whose writes lag never holds more than twice its slots of work in
        doubt."""
        shared = self.shared
        backlog = max(0, len(shared.unrecorded) - shared.concurrency)
        return shared.concurrency - len(shared.slots) - backlog

    async def listener(self, application_name: str) -> None:
        """Hold a LISTEN connection for the worker's queues (reconnecting by itself); each
        notification wakes the dispatcher."""

        def state(up: bool) -> None:
            self.listening = up

        await listen(
            self.db.dsn,
            self.db.queries.channel,
            self.queues,
            self.shared.signal,
            on_state=state,
            on_control=self.heard,
            retry_seconds=min(self.config.poll_seconds, 1.0),
            application_name=application_name,
            outage=self.shared.outage,
        )
