"""The recorder: writes finished outcomes in batches, one statement per batch, on its own
connection, so that claiming and recording overlap; and the firer, beside it, runs the firing
step of the closed groups whose last jobs it recorded (the outcome statement names them;
core/groups.py)."""

from __future__ import annotations

import logging

import anyio
import asyncpg

from ..database import Database
from ..groups import fire_now
from ..lane import Lane
from ..rows import ClaimToken, FinishBatch, Recorded
from .config import WorkerConfig
from .state import Shared

logger = logging.getLogger("sweepq.worker")


class Recorder:
    """Records the outcomes the runners queue (`Shared.pending`) and fires closed groups."""

    def __init__(self, db: Database, config: WorkerConfig, shared: Shared) -> None:
        self.db = db
        self.lease_seconds = config.lease_seconds
        self.shared = shared
        # The outcome writer keeps one of the pool's connections, as the claim loop does.
        self.lane: Lane | None = None

    async def flusher(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        shared = self.shared
        while True:
            changed = shared.changed
            if shared.pending:
                await self.flush_once(pool)
                shared.signal()
            else:
                await changed.wait()

    async def flush_once(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        shared = self.shared
        batch, shared.pending = shared.pending, FinishBatch()
        shared.flushing = True
        try:
            try:
                written = await shared.retrying(self._write, pool, batch)
            except BaseException:
                # Not recorded: keep the outcomes for the next flush (fenced, so never applied
                # twice).
                self._merge_back(batch)
                raise
            self._settle(batch, written.tokens)
            # Before the flush counts as done: a worker run until idle waits for the firing
            # step, then claims the `then` jobs it enqueued.
            if written.sealed:
                shared.to_fire.update(written.sealed)
                shared.signal()
        finally:
            shared.flushing = False
            shared.flushes += 1

    async def flush_all(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        """Record every outcome left, within a lease; those left over are rescued later."""
        with anyio.move_on_after(self.lease_seconds):
            while self.shared.pending:
                await self.flush_once(pool)
        if self.shared.pending:
            logger.warning(
                "could not record %d outcome(s) before exiting; those jobs will be rescued "
                "when their leases lapse",
                len(self.shared.pending),
            )

    async def firer(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        """The firing step for the closed groups whose jobs this worker ended, beside the
        flusher: a group's row held by someone else (an enqueue of the group still in flight
        when it was closed) holds back this loop, never the recording of outcomes. Groups
        named while it runs are fired again after (it may not have seen their last job end)."""
        shared = self.shared
        while True:
            changed = shared.changed
            if not shared.to_fire:
                await changed.wait()
                continue
            sealed, shared.to_fire = sorted(shared.to_fire), set()
            shared.firing = True
            try:
                await self._fire(pool, sealed)
            finally:
                shared.firing = False
                shared.signal()

    async def _fire(self, pool: asyncpg.Pool[asyncpg.Record], sealed: list[str]) -> None:
        """One firing step; a failure is logged, not raised: the outcomes are recorded, and the
        maintenance leader fires what is left within a round."""
        try:
            with anyio.fail_after(self.lease_seconds):
                async with pool.acquire() as conn:
                    await fire_now(self.db.queries, conn, sealed)
        except Exception as exc:
            logger.warning(
                "could not fire closed group(s) %s (%s: %s); the maintenance leader fires them",
                sealed,
                type(exc).__name__,
                exc,
            )

    def _settle(self, batch: FinishBatch, recorded: set[ClaimToken]) -> None:
        """Forget the outcomes written, and warn of those whose claim was lost."""
        shared = self.shared
        tokens = batch.tokens()
        shared.unrecorded.difference_update(tokens)
        resent, shared.resent = shared.resent, set()
        if len(recorded) == len(tokens):
            return
        # An outcome whose earlier write may have committed (its answer was lost) is refused
        # because it is already recorded: only the others say the claim was lost.
        lost = [t[0] for t in tokens if t not in recorded and t not in resent]
        if lost:
            logger.warning(
                "outcome(s) of job(s) %s not recorded: their claims were no longer held by this "
                "worker (cancelled, rescued or claimed again meanwhile)",
                lost,
            )

    async def _write(self, pool: asyncpg.Pool[asyncpg.Record], batch: FinishBatch) -> Recorded:
        """One write of a batch of outcomes, finished even if the worker is being cancelled."""
        try:
            # Cut off mid-way, the statement may still commit without us knowing: let it end
            # (within a lease), so that stopping a worker does not leave outcomes in doubt.
            with anyio.CancelScope(shield=True), anyio.fail_after(self.lease_seconds) as scope:
                lane = self.lane
                async with pool.acquire() if lane is None else lane.connection() as conn:
                    recorded = await self.db.queries.job_finish_many(
                        conn, self.shared.worker_id, batch
                    )
        except BaseException as exc:
            self.shared.resent.update(batch.tokens())
            if isinstance(exc, TimeoutError) and scope.cancelled_caught:
                raise TimeoutError(f"recording outcomes took over {self.lease_seconds:g}s") from exc
            raise
        return recorded

    def _merge_back(self, batch: FinishBatch) -> None:
        shared = self.shared
        for field in FinishBatch.__struct_fields__:
            getattr(batch, field).extend(getattr(shared.pending, field))
        shared.pending = batch
