"""The heartbeat: renews the leases of running jobs and of finished jobs whose outcome is not
recorded yet, cancels handlers whose lease was lost, and stops claiming while leases cannot be
renewed."""

from __future__ import annotations

import logging

import anyio
import asyncpg

from ..database import Database
from ..outage import TRANSIENT_ERRORS
from .config import WorkerConfig
from .state import Shared

logger = logging.getLogger("sweepq.worker")

# A failed renewal is retried on the next beat, whatever the server said.
HEARTBEAT_ERRORS: tuple[type[BaseException], ...] = (*TRANSIENT_ERRORS, asyncpg.PostgresError)


async def heartbeat(
    db: Database, config: WorkerConfig, shared: Shared, pool: asyncpg.Pool[asyncpg.Record]
) -> None:
    """Renew the worker's leases every `heartbeat_seconds`, for as long as the worker runs."""
    renew = db.queries.job_heartbeat
    lease = config.lease_seconds
    beat = config.heartbeat_seconds
    assert beat is not None  # resolved by the config
    last_ok = anyio.current_time()
    while True:
        await anyio.sleep(beat)
        # Finished jobs whose outcome waits to be recorded keep their leases too: an outage of
        # the database must not hand finished work to another worker.
        tokens = [*shared.slots, *shared.unrecorded]
        try:
            held = await renew(pool, shared.worker_id, lease, tokens)
        except HEARTBEAT_ERRORS as exc:
            if anyio.current_time() - last_ok > lease:
                # Our leases may have lapsed: claim nothing more until we can renew.
                shared.leases_ok_until = last_ok
            shared.outage.failed(exc)
            await pool.expire_connections()
            continue
        shared.outage.ok()
        last_ok = anyio.current_time()
        shared.leases_ok_until = float("inf")
        lost = [shared.slots[t] for t in tokens if t not in held and t in shared.slots]
        for slot in lost:
            # Rescued or cancelled elsewhere: stop the handler; nothing will be recorded.
            slot.lost = True
            slot.cancel()
        if lost:
            logger.warning(
                "worker %s lost the lease of job(s) %s; their handlers were cancelled",
                shared.worker_id,
                [s.job.id for s in lost],
            )
        shared.signal()
