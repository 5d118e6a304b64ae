"""The worker: claims jobs into concurrency slots, runs their handlers, records outcomes.

Three loops share one task group: the dispatcher claims up to the free slots in one statement
and starts each job; the flusher writes finished outcomes in batches (one statement per batch,
on its own connection, so claiming and recording overlap); the heartbeat renews the leases of
running jobs. Rescue of lapsed leases and deadline enforcement run on the maintenance tick.
"""

from __future__ import annotations

import logging
import os
import socket
import traceback
import uuid
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import ParamSpec, Self, TypeVar

import anyio
import asyncpg
import msgspec
from anyio.abc import TaskGroup

from .app import App
from .context import Context
from .errors import ConfigurationError
from .ident import queue_name
from .outcomes import Cancel, RetryAfter, Snooze, backoff_seconds
from .queries import Claimed, Outcomes

logger = logging.getLogger("sweepq.worker")

_TRANSIENT = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.DeadlockDetectedError,
)
_MAX_ERROR_CHARS = 4_000
P = ParamSpec("P")
T = TypeVar("T")


class Worker:
    """Runs jobs of some queues with at most `concurrency` at once.

    Args:
        app: the app whose tasks and database to use.
        queues: the queues to claim from.
        concurrency: the number of slots (jobs running at once in this process).
        lease_seconds: how long a claim holds a job without a heartbeat before it may be rescued.
        heartbeat_seconds: how often leases are renewed (default: a third of the lease).
        poll_seconds: how long an idle worker waits before looking for due jobs again.

    Raises:
        ConfigurationError: settings that cannot work (e.g. a lease under two heartbeats).

    Example:
        >>> async with sweepq.Worker(app, queues=["default"], concurrency=20) as worker:
        ...     await worker.run_until_idle()  # doctest: +SKIP
    """

    def __init__(
        self,
        app: App,
        *,
        queues: Sequence[str] = ("default",),
        concurrency: int = 10,
        lease_seconds: float = 30.0,
        heartbeat_seconds: float | None = None,
        poll_seconds: float = 1.0,
    ) -> None:
        if isinstance(queues, str):
            raise ConfigurationError("queues must be a list of queue names, not a string")
        if not queues:
            raise ConfigurationError("a worker needs at least one queue")
        self.queues = [queue_name(q) for q in dict.fromkeys(queues)]
        if not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigurationError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if heartbeat_seconds is None:
            heartbeat_seconds = lease_seconds / 3
        if not (lease_seconds > 0 and heartbeat_seconds > 0 and poll_seconds > 0):
            raise ConfigurationError(
                "lease_seconds, heartbeat_seconds and poll_seconds must be > 0"
            )
        if lease_seconds < 2 * heartbeat_seconds:
            raise ConfigurationError(
                f"lease_seconds={lease_seconds:g} is shorter than two heartbeats "
                f"(heartbeat_seconds={heartbeat_seconds:g}): one late heartbeat would lose "
                "every lease; use a lease of at least 2x (default 3x) the heartbeat"
            )
        self.app = app
        self.concurrency = concurrency
        self.lease_seconds = float(lease_seconds)
        self.heartbeat_seconds = float(heartbeat_seconds)
        self.poll_seconds = float(poll_seconds)
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._running: dict[int, Claimed] = {}
        self._outcomes = Outcomes()
        self._flushing = False
        self._flushes = 0
        self._changed = anyio.Event()
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None
        self._tg: TaskGroup | None = None
        self._entered = False
        self.processed = 0

    def __repr__(self) -> str:
        return f"<Worker {self.id} queues={self.queues} concurrency={self.concurrency}>"

    # lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        # Own connections: claiming, recording and heartbeats never wait behind handlers that
        # use the app's pool.
        self._pool = await self.app.create_pool(2, 3)
        self._entered = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._entered = False
        pool, self._pool = self._pool, None
        if pool is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await self._flush_all(pool)
                finally:
                    await pool.close()

    @property
    def pool(self) -> asyncpg.Pool[asyncpg.Record]:
        if self._pool is None:
            raise ConfigurationError("use the worker as `async with Worker(...) as worker:`")
        return self._pool

    # public loops ---------------------------------------------------------------------------

    async def run_until_idle(self) -> int:
        """Work until no job is due and none is running; returns the jobs processed.

        Jobs scheduled in the future are not waited for.
        """
        return await self._run(until_idle=True)

    async def run(self) -> None:
        """Work until cancelled."""
        await self._run(until_idle=False)

    async def _run(self, *, until_idle: bool) -> int:
        start = self.processed
        pool = self.pool
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._flusher, pool)
            tg.start_soon(self._heartbeat, pool)
            try:
                await self._maintain(pool)
                await self._dispatch(pool, until_idle=until_idle)
            finally:
                self._tg = None
                tg.cancel_scope.cancel()
        return self.processed - start

    # dispatcher -----------------------------------------------------------------------------

    async def _dispatch(self, pool: asyncpg.Pool[asyncpg.Record], *, until_idle: bool) -> None:
        queries = self.app.queries
        tg = self._tg
        assert tg is not None
        next_maintenance = anyio.current_time() + self.poll_seconds
        while True:
            changed = self._changed
            free = self.concurrency - len(self._running)
            claimed: list[Claimed] = []
            if free > 0:
                # Idle only if this claim saw every recorded outcome (a snoozed job may be due
                # again, a finished keyed job frees its key): nothing pending before or after it.
                flushes = self._flushes
                settled = not self._outcomes and not self._flushing
                claimed = await self._retrying(
                    queries.job_claim, pool, self.queues, free, self.id, self.lease_seconds
                )
                for job in claimed:
                    self._running[job.id] = job
                    tg.start_soon(self._execute, job)
                if (
                    until_idle
                    and not claimed
                    and settled
                    and not self._running
                    and not self._outcomes
                    and not self._flushing
                    and flushes == self._flushes
                ):
                    return
            if anyio.current_time() >= next_maintenance:
                await self._maintain(pool)
                next_maintenance = anyio.current_time() + self.poll_seconds
            if claimed and len(self._running) < self.concurrency:
                continue
            # Wait for a slot to free up or an outcome to be recorded, or for the poll tick.
            with anyio.move_on_after(self.poll_seconds):
                await changed.wait()

    def _signal(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    async def _maintain(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        queries = self.app.queries
        await self._retrying(queries.job_rescue, pool, 1_000)
        await self._retrying(queries.job_expire_deadlines, pool, 1_000)

    async def _retrying(
        self, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        delay = 0.05
        while True:
            try:
                return await fn(*args, **kwargs)
            except _TRANSIENT as exc:
                logger.warning("database call failed (%s); retrying in %.2fs", exc, delay)
                await anyio.sleep(delay)
                delay = min(delay * 2, 5.0)

    # execution ------------------------------------------------------------------------------

    async def _execute(self, job: Claimed) -> None:
        out = self._outcomes
        try:
            task = self.app.tasks.get(job.task)
            if task is None:
                out.add(
                    job.id,
                    job.attempt,
                    "failed",
                    failure_reason="error",
                    error_kind="error",
                    error=f"no handler for task {job.task!r} is registered in this worker",
                )
                return
            try:
                kwargs = task.decode_args(job.args)
            except msgspec.ValidationError as exc:
                out.add(
                    job.id,
                    job.attempt,
                    "failed",
                    failure_reason="error",
                    error_kind="error",
                    error=f"stored args do not fit the handler: {exc}",
                )
                return
            ctx = Context(
                self.app,
                job_id=job.id,
                task=job.task,
                queue=job.queue,
                attempt=job.attempt,
                max_attempts=job.max_attempts,
                snoozes=job.snoozes,
                worker_id=self.id,
            )
            await task.fn(ctx, **kwargs)
            out.add(job.id, job.attempt, "completed")
        except Snooze as s:
            out.add(job.id, job.attempt, "available", delay=s.seconds, refund=True, snoozed=True)
        except RetryAfter as r:
            if not r.consume_budget:
                out.add(
                    job.id, job.attempt, "available", delay=r.seconds, refund=True, snoozed=True
                )
            elif job.attempt >= job.max_attempts:
                out.add(
                    job.id,
                    job.attempt,
                    "failed",
                    failure_reason="max_attempts_exceeded",
                    error_kind="retry_after",
                    error=str(r),
                )
            else:
                out.add(
                    job.id,
                    job.attempt,
                    "available",
                    delay=r.seconds,
                    error_kind="retry_after",
                    error=str(r),
                )
        except Cancel as c:
            out.add(job.id, job.attempt, "cancelled", error_kind="cancelled", error=str(c))
        except anyio.get_cancelled_exc_class():
            # Shutdown: hand the job back; the interrupted execution is not charged.
            out.add(
                job.id,
                job.attempt,
                "available",
                refund=True,
                error_kind="interrupted",
                error="the worker shut down while the job ran",
            )
            raise
        except Exception as exc:
            error = _describe(exc)
            if job.attempt >= job.max_attempts:
                out.add(
                    job.id,
                    job.attempt,
                    "failed",
                    failure_reason="max_attempts_exceeded",
                    error_kind="exception",
                    error=error,
                )
            else:
                out.add(
                    job.id,
                    job.attempt,
                    "available",
                    delay=backoff_seconds(job.attempt),
                    error_kind="exception",
                    error=error,
                )
        finally:
            del self._running[job.id]
            self.processed += 1
            self._signal()

    # recording ------------------------------------------------------------------------------

    async def _flusher(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        while True:
            changed = self._changed
            if self._outcomes:
                await self._flush_once(pool)
                self._signal()
            else:
                await changed.wait()

    async def _flush_once(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        batch, self._outcomes = self._outcomes, Outcomes()
        self._flushing = True
        try:
            await self._retrying(self.app.queries.job_finish_many, pool, self.id, batch)
        except BaseException:
            # Not recorded: keep the outcomes for the next flush (fenced, so never applied twice).
            self._merge_back(batch)
            raise
        finally:
            self._flushing = False
            self._flushes += 1

    def _merge_back(self, batch: Outcomes) -> None:
        for field in Outcomes.__struct_fields__:
            getattr(batch, field).extend(getattr(self._outcomes, field))
        self._outcomes = batch

    async def _flush_all(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        with anyio.move_on_after(self.lease_seconds):
            while self._outcomes:
                await self._flush_once(pool)

    # leases ---------------------------------------------------------------------------------

    async def _heartbeat(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        queries = self.app.queries
        while True:
            await anyio.sleep(self.heartbeat_seconds)
            running = list(self._running.values())
            if not running:
                continue
            try:
                owned = await queries.job_heartbeat(
                    pool, self.id, self.lease_seconds,
                    [j.id for j in running], [j.attempt for j in running],
                )  # fmt: skip
            except _TRANSIENT as exc:
                logger.warning("heartbeat failed (%s); leases may lapse", exc)
                continue
            lost = [j.id for j in running if j.id not in owned and j.id in self._running]
            if lost:
                logger.warning(
                    "worker %s no longer holds the lease of jobs %s (rescued or cancelled); "
                    "their outcomes will not be recorded",
                    self.id,
                    lost,
                )


def _describe(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    if len(text) > _MAX_ERROR_CHARS:
        text = text[: _MAX_ERROR_CHARS // 4] + "\n...\n" + text[-(_MAX_ERROR_CHARS * 3 // 4) :]
    return text
