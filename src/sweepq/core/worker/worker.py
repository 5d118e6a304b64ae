"""The worker: claims jobs into concurrency slots, runs their handlers, records outcomes.

`Worker` composes the loops of one task group, each in its own module of this package:
- the dispatcher (`dispatch.py`) claims up to the free slots in one statement and starts each
  job; it wakes on a NOTIFY for its queues (its listener holds a LISTEN connection, reconnecting
  by itself), on a freed slot or recorded outcome, and at least every poll interval;
- the runners (`execution.py`), one per slot, run each job through `core/execution.py`'s
  `execute()` and queue its outcome;
- the recorder (`recorder.py`) records finished outcomes in batches, one statement per batch,
  on its own connection, so claiming and recording overlap; its firer runs the firing step of
  the closed groups whose last jobs it recorded (core/groups.py), beside it;
- the heartbeat (`leases.py`) renews the leases of running jobs and of finished jobs whose
  outcome is not recorded yet, cancels handlers whose lease was lost, and stops claiming while
  leases cannot be renewed;
- maintenance elects one leader among all workers for rescue, deadlines, cron and retention.
They share the bookkeeping of `state.py`; the settings are one `WorkerConfig` (`config.py`).

Stopping with `stop()`: claiming stops, running jobs get `grace_seconds` to finish, then are
cancelled and handed back (`available`, the attempt not charged); a second `stop()` skips the
grace period. Cancelling `run()` from outside is an immediate stop: running jobs are handed back
at once. A job is never left `running` without a live lease: outcomes
are flushed before the worker exits, and a worker that dies is rescued after its lease lapses.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from typing import Self

import anyio
import asyncpg

from ..app import App
from ..decision import ExecutionOutcome, Interrupted
from ..errors import ConfigurationError
from ..lane import Lane
from ..logs import log_rescued
from ..maintenance import Maintenance
from ..outage import Outage, quiet_pool_reconnects
from .config import WorkerConfig
from .dispatch import Dispatcher
from .execution import Runners
from .leases import heartbeat
from .recorder import Recorder
from .state import Shared


class Worker:
    """Runs jobs of some queues with at most `concurrency` at once.

    Args:
        app: the app whose tasks and database to use (it must be open).
        queues: the queues to claim from.
        concurrency: the number of slots (jobs running at once in this process).
        threads: the most `def` handlers running at once, each in a thread (default: one per
            slot); a `def` job holds its slot while it waits for a thread.
        lease_seconds: how long a claim holds a job without a heartbeat before it is rescued.
        heartbeat_seconds: how often leases are renewed (default: a third of the lease).
        poll_seconds: the longest an idle worker goes without looking for due jobs (wake-ups
            by NOTIFY are immediate; polling covers lost notifications and scheduled jobs).
        grace_seconds: how long running jobs may finish after `stop()` before they are
            cancelled and handed back.
        maintenance_seconds: how often the maintenance leader works (rescue, deadlines, cron).
        leader_ttl_seconds: how long a leader's term lasts without renewal; a dead leader is
            replaced within this time.
        prune_every: how often the leader prunes history (None: never; use `sweepq prune`).
        prune_older_than: the age of the history it removes.
        listen: wake up on NOTIFY (False: poll only).

    Raises:
        ConfigurationError: settings that cannot work (e.g. a lease under two heartbeats).

    Example:
        >>> async with app, sweepq.Worker(app, queues=["default"], concurrency=20) as worker:
        ...     await worker.run_until_idle()  # doctest: +SKIP
    """

    def __init__(
        self,
        app: App,
        *,
        queues: Sequence[str] = ("default",),
        concurrency: int = 10,
        threads: int | None = None,
        lease_seconds: float = 30.0,
        heartbeat_seconds: float | None = None,
        poll_seconds: float = 1.0,
        grace_seconds: float = 30.0,
        maintenance_seconds: float = 1.0,
        leader_ttl_seconds: float = 10.0,
        prune_every: timedelta | None = timedelta(hours=1),
        prune_older_than: timedelta = timedelta(days=7),
        listen: bool = True,
    ) -> None:
        config = WorkerConfig(
            queues=queues, concurrency=concurrency, threads=threads, lease_seconds=lease_seconds,
            heartbeat_seconds=heartbeat_seconds, poll_seconds=poll_seconds,
            grace_seconds=grace_seconds, maintenance_seconds=maintenance_seconds,
            leader_ttl_seconds=leader_ttl_seconds, prune_every=prune_every,
            prune_older_than=prune_older_than, listen=listen,
        )  # fmt: skip
        self._setup(app, config)

    @classmethod
    def from_config(cls, app: App, config: WorkerConfig) -> Self:
        """The worker of `app` with the settings of `config`, checked when it was made."""
        worker = cls.__new__(cls)
        worker._setup(app, config)
        return worker

    def _setup(self, app: App, config: WorkerConfig) -> None:
        self.app = app
        self.config = config
        self.queues = list(config.queues)
        self.concurrency = config.concurrency
        # Resolved by the config when it was made (one thread per slot, a third of the lease).
        assert config.threads is not None
        assert config.heartbeat_seconds is not None
        self.threads = config.threads
        self.lease_seconds = config.lease_seconds
        self.heartbeat_seconds = config.heartbeat_seconds
        self.poll_seconds = config.poll_seconds
        self.grace_seconds = config.grace_seconds
        self.listen = config.listen
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.outage = Outage(app.display_dsn)
        self.maintenance = Maintenance(
            app,
            self.id,
            interval=config.maintenance_seconds,
            leader_ttl=config.leader_ttl_seconds,
            prune_every=config.prune_every,
            prune_older_than=config.prune_older_than,
            rescue_grace=config.lease_seconds,
            outage=self.outage,
        )
        self._shared = Shared(self.id, config.concurrency, self.outage)
        self._dispatcher = Dispatcher(app.db, app.registry, config, self._shared)
        self._runners = Runners(app, self.threads, self._shared)
        self._recorder = Recorder(app.db, config, self._shared)
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None

    def __repr__(self) -> str:
        return f"<Worker {self.id} queues={self.queues} concurrency={self.concurrency}>"

    # lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        quiet_pool_reconnects()
        # A schema that lacks migrations fails here, with the fix, not at the first claim.
        await self.app.check_migrated()
        # Own connections: claiming, recording and heartbeats never wait behind handlers that
        # use the app's pool.
        # The worker's statements are written to plan well without their parameters' values
        # (see job_claim); a generic plan skips re-planning on every claim, halving its cost.
        # Every one of them is meant to be an index lookup; a generic plan made while the jobs
        # table was nearly empty would otherwise keep sequential scans as the table grows.
        # The fourth is the firing step's, for closed groups, opened only when one is fired.
        self._pool = await self.app.create_pool(
            2,
            4,
            settings={
                "plan_cache_mode": "force_generic_plan",
                "enable_seqscan": "off",
                "application_name": self.application_name,
            },
            internal=True,
        )
        # The claim loop and the outcome writer each keep one of the pool's connections.
        self._dispatcher.lane, self._recorder.lane = Lane(self._pool), Lane(self._pool)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # Whatever ended the block, outcomes held are written and the connections closed.
        pool, self._pool = self._pool, None
        if pool is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await self._recorder.flush_all(pool)
                finally:
                    for lane in (self._dispatcher.lane, self._recorder.lane):
                        if lane is not None:
                            await lane.close()
                    self._dispatcher.lane = self._recorder.lane = None
                    await pool.close()

    @property
    def pool(self) -> asyncpg.Pool[asyncpg.Record]:
        """The worker's own connections (claims, outcomes, heartbeats), while it is entered."""
        if self._pool is None:
            raise ConfigurationError("use the worker as `async with Worker(...) as worker:`")
        return self._pool

    @property
    def application_name(self) -> str:
        """How this worker's connections appear in pg_stat_activity."""
        return f"sweepq worker {self.id}"[:63]

    @property
    def running(self) -> int:
        """Jobs running now."""
        return len(self._shared.slots)

    @property
    def processed(self) -> int:
        """Executions this worker has ended, whatever their outcome."""
        return self._shared.processed

    @property
    def outcomes(self) -> Counter[ExecutionOutcome]:
        """Executions by how they ended (`outcome_of`): completed, retry, snooze, cancel, ..."""
        return self._shared.outcomes

    @property
    def listening(self) -> bool:
        """Whether its LISTEN connection is up (NOTIFY wakes it at once)."""
        return self._dispatcher.listening

    def stop(self) -> None:
        """Stop claiming and finish within the grace period; called again, stop at once."""
        shared = self._shared
        if shared.stopping:
            shared.stop_now = True
            for slot in list(shared.slots.values()):
                slot.cancel()
        shared.stopping = True
        shared.signal()

    # public loops ---------------------------------------------------------------------------

    async def run_until_idle(self) -> int:
        """Work until no job is due and none is running; returns the jobs processed.

        Jobs scheduled in the future are not waited for. Lapsed leases are rescued and expired
        deadlines enforced once at the start.
        """
        return await self._run(until_idle=True)

    async def run(self) -> None:
        """Work until `stop()`, then drain within the grace period.

        Cancelling `run()` instead hands running jobs back at once.
        """
        await self._run(until_idle=False)

    async def _run(self, *, until_idle: bool) -> int:
        start = self._shared.processed
        pool = self.pool
        try:
            await self._run_loops(pool, until_idle=until_idle)
            return self._shared.processed - start
        finally:
            # A stop() that came before run() started is honoured (run() returns at once);
            # the next run starts afresh.
            self._shared.stopping = self._shared.stop_now = False

    async def _run_loops(self, pool: asyncpg.Pool[asyncpg.Record], *, until_idle: bool) -> None:
        shared, recorder = self._shared, self._recorder
        async with anyio.create_task_group() as tg:
            tg.start_soon(recorder.flusher, pool)
            tg.start_soon(recorder.firer, pool)
            tg.start_soon(heartbeat, self.app.db, self.config, shared, pool)
            # One long-lived runner per slot: starting a task per job would cost several times
            # more than the rest of a no-op job's trip through the worker.
            for _ in range(self.concurrency):
                tg.start_soon(self._runners.runner)
            if not until_idle:
                tg.start_soon(self.maintenance.run)
                if self.listen:
                    tg.start_soon(self._dispatcher.listener, self.application_name)
            try:
                if until_idle:
                    queries = self.app.queries
                    log_rescued(
                        await shared.retrying(queries.job_rescue, pool, 1_000, self.lease_seconds)
                    )
                    await shared.retrying(queries.job_expire_deadlines, pool, 1_000)
                await self._dispatcher.run(pool, until_idle=until_idle)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._drain(pool)
                tg.cancel_scope.cancel()

    async def _drain(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        """Let running jobs finish within the grace period, hand back the rest, record all."""
        shared = self._shared
        # Claimed but not started: hand back at once, uncharged.
        while shared.ready:
            slot = shared.ready.popleft()
            del shared.slots[slot.token]
            shared.suspects -= slot.job.crashes > 0
            self._runners.end(slot, Interrupted("the worker stopped before the job started"))
        shared.signal()
        if shared.slots and not shared.stop_now:
            with anyio.move_on_after(self.grace_seconds):
                while shared.slots and not shared.stop_now:
                    await shared.changed.wait()
        for slot in list(shared.slots.values()):
            slot.cancel()
        while shared.slots:
            await shared.changed.wait()
        await self._recorder.flush_all(pool)
        # The groups its last outcomes ended fire before it exits (or, past a lease, at the
        # maintenance leader's next round).
        with anyio.move_on_after(self.lease_seconds):
            while shared.fire_pending():
                await shared.changed.wait()
