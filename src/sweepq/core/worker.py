"""The worker: claims jobs into concurrency slots, runs their handlers, records outcomes.

Loops of one task group:
- the dispatcher claims up to the free slots in one statement and starts each job; it wakes on a
  NOTIFY for its queues, on a freed slot or recorded outcome, and at least every poll interval;
- the flusher records finished outcomes in batches, one statement per batch, on its own
  connection, so claiming and recording overlap;
- the firer runs the firing step of the closed groups whose last jobs it recorded (the outcome
  statement names them; core/groups.py), beside the flusher;
- the heartbeat renews the leases of running jobs and of finished jobs whose outcome is not
  recorded yet, cancels handlers whose lease was lost, and stops claiming while leases cannot be
  renewed;
- the listener holds a LISTEN connection (reconnecting by itself);
- maintenance elects one leader among all workers for rescue, deadlines, cron and retention.

Stopping with `stop()`: claiming stops, running jobs get `grace_seconds` to finish, then are
cancelled and handed back (`available`, the attempt not charged); a second `stop()` skips the
grace period. Cancelling `run()` from outside is an immediate stop: running jobs are handed back
at once. A job is never left `running` without a live lease: outcomes
are flushed before the worker exits, and a worker that dies is rescued after its lease lapses.

Every claim carries a token (the job's id and claim count) that heartbeats and outcomes present,
and the worker's own bookkeeping is keyed by it: two executions of one job (a job cancelled,
retried and claimed again while its first execution still runs) never mix.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, ParamSpec, Self, TypeVar

import anyio
import asyncpg
import msgspec
from anyio.abc import TaskGroup

from .app import App
from .checks import MAX_JSON_DEPTH
from .context import Context
from .decision import (
    Decision,
    Interrupted,
    NotRunnable,
    Outcome,
    UnknownTask,
    decide,
    error_line,
    outcome_of,
)
from .errors import ConfigurationError
from .events import JobClaimed, JobFinished, JobStarted, emit
from .execution import execute, own_cancellation, policy_of
from .groups import fire_now
from .ident import queue_name
from .lane import Lane
from .logs import log_execution, log_rescued
from .maintenance import Maintenance
from .notify import listen
from .outage import TRANSIENT_ERRORS, Outage, quiet_pool_reconnects
from .queries import ClaimBatch, Claimed, ClaimToken, Outcomes, Recorded
from .tasks import Task

logger = logging.getLogger("sweepq.worker")

_HOOK_SECONDS = 5.0  # the most an outcome hook may take
# Calls that failed because the database is away are retried this often at most, so that work
# resumes within a fraction of a second of its return.
_RETRY_MAX_SECONDS = 0.5
# How long a busy worker may wait for more of its slots to free before claiming for a few: about
# one claim's round trip. Without it, two claims in flight by turns split the slots between them
# for good (17 jobs, then 2, then 17...), each batch paying a whole claim.
_LINGER_SECONDS = 0.002
# A failed renewal is retried on the next beat, whatever the server said.
_HEARTBEAT_ERRORS: tuple[type[BaseException], ...] = (*TRANSIENT_ERRORS, asyncpg.PostgresError)
P = ParamSpec("P")
T = TypeVar("T")

# The bounds of the worker's time settings, in seconds: below the least, a loop would spin or a
# lease would lapse between two statements; above the most, a setting is a mistake (a lease of a
# week keeps a dead worker's jobs for a week) or past what the database's intervals can hold.
_LEAST_SECONDS = {
    "lease_seconds": 0.5,
    "heartbeat_seconds": 0.1,
    "poll_seconds": 0.01,
    "grace_seconds": 0.0,
    "maintenance_seconds": 0.01,
    "leader_ttl_seconds": 0.02,
}
_MOST_SECONDS = 86_400.0
_MOST_SPAN = timedelta(days=36_525)
_PRUNE_EVERY_LEAST = timedelta(seconds=1)


def _check_seconds(label: str, value: object) -> float:
    """A time setting: a finite number of seconds within its bounds."""
    lowest = _LEAST_SECONDS[label]
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and lowest <= value <= _MOST_SECONDS  # NaN fails both comparisons
    ):
        return float(value)
    raise ConfigurationError(
        f"{label} must be a finite number of seconds >= {lowest:g} and at most "
        f"{_MOST_SECONDS:,.0f} (a day), got {value!r}"
    )


def _check_period(label: str, value: object, lowest: timedelta) -> None:
    if not isinstance(value, timedelta) or not lowest <= value <= _MOST_SPAN:
        shown = f"{value.total_seconds():g} s" if isinstance(value, timedelta) else repr(value)
        raise ConfigurationError(
            f"{label} must be a timedelta of {lowest.total_seconds():g} s to "
            f"{_MOST_SPAN.days:,} days, got {shown}"
        )


class _Slot:
    """A claimed job and the scope that can cancel its handler."""

    __slots__ = ("claimed_at", "ctx", "ended", "job", "lost", "scope", "token")

    def __init__(self, job: Claimed) -> None:
        self.job = job
        self.token = job.token
        self.claimed_at = anyio.current_time()
        self.scope = anyio.CancelScope()
        self.ctx: Context | None = None
        self.lost = False
        self.ended = False  # its outcome is queued

    def cancel(self) -> None:
        """Cancel the handler: an async one at its next await; a thread is told (ctx.stopping)."""
        self.scope.cancel()
        if self.ctx is not None:
            self.ctx.stop()


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
        if isinstance(queues, str):
            raise ConfigurationError("queues must be a list of queue names, not a string")
        if not queues:
            raise ConfigurationError("a worker needs at least one queue")
        self.queues = list(dict.fromkeys(queue_name(q) for q in queues))
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ConfigurationError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if threads is None:
            threads = concurrency
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ConfigurationError(f"threads must be an int >= 1, got {threads!r}")
        lease_seconds = _check_seconds("lease_seconds", lease_seconds)
        if heartbeat_seconds is None:
            heartbeat_seconds = lease_seconds / 3
        heartbeat_seconds = _check_seconds("heartbeat_seconds", heartbeat_seconds)
        poll_seconds = _check_seconds("poll_seconds", poll_seconds)
        grace_seconds = _check_seconds("grace_seconds", grace_seconds)
        maintenance_seconds = _check_seconds("maintenance_seconds", maintenance_seconds)
        leader_ttl_seconds = _check_seconds("leader_ttl_seconds", leader_ttl_seconds)
        if prune_every is not None:
            _check_period("prune_every", prune_every, _PRUNE_EVERY_LEAST)
        _check_period("prune_older_than", prune_older_than, timedelta(0))
        if lease_seconds < 2 * heartbeat_seconds:
            raise ConfigurationError(
                f"lease_seconds={lease_seconds:g} is shorter than two heartbeats "
                f"(heartbeat_seconds={heartbeat_seconds:g}): one late heartbeat would lose "
                "every lease; use a lease of at least 2x (default 3x) the heartbeat"
            )
        self.app = app
        self.concurrency = concurrency
        self.threads = min(threads, concurrency)
        self._threads = anyio.CapacityLimiter(self.threads)
        self.lease_seconds = float(lease_seconds)
        self.heartbeat_seconds = float(heartbeat_seconds)
        self.poll_seconds = float(poll_seconds)
        self.grace_seconds = float(grace_seconds)
        self.listen = listen
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.outage = Outage(app.display_dsn)
        self.maintenance = Maintenance(
            app,
            self.id,
            interval=maintenance_seconds,
            leader_ttl=leader_ttl_seconds,
            prune_every=prune_every,
            prune_older_than=prune_older_than,
            rescue_grace=self.lease_seconds,
            outage=self.outage,
        )
        self._slots: dict[ClaimToken, _Slot] = {}  # claimed, handler not finished
        self._suspects = 0  # of them, jobs whose worker died running them before
        self._unrecorded: set[ClaimToken] = set()  # handler finished, outcome not recorded
        self._resent: set[ClaimToken] = set()  # outcomes whose last write's fate is unknown
        self._ready: deque[_Slot] = deque()  # claimed, waiting for a runner
        self._ready_event = anyio.Event()
        self._outcomes = Outcomes()
        self._flushing = False
        self._flushes = 0
        # Closed groups whose jobs this worker ended, for the firing step, and whether it runs.
        self._to_fire: set[str] = set()
        self._firing = False
        self._changed = anyio.Event()
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None
        # The claim loop and the outcome writer each keep one of the pool's connections: taking
        # one from the pool per statement costs about as much client CPU as the statement.
        self._claiming: Lane | None = None
        self._recording: Lane | None = None
        self._tg: TaskGroup | None = None
        self._stopping = False
        self._stop_now = False
        self._leases_ok_until = float("inf")
        self.listening = False
        self.processed = 0
        # Executions by how they ended (`outcome_of`): completed, retry, snooze, cancel, ...
        self.outcomes: Counter[Outcome] = Counter()

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
        self._claiming, self._recording = Lane(self._pool), Lane(self._pool)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await self._flush_all(pool)
                finally:
                    for lane in (self._claiming, self._recording):
                        if lane is not None:
                            await lane.close()
                    self._claiming = self._recording = None
                    await pool.close()

    @property
    def pool(self) -> asyncpg.Pool[asyncpg.Record]:
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
        return len(self._slots)

    def _busy(self) -> bool:
        """Every slot runs a job (`Context.worker_busy`)."""
        return len(self._slots) >= self.concurrency

    def stop(self) -> None:
        """Stop claiming and finish within the grace period; called again, stop at once."""
        if self._stopping:
            self._stop_now = True
            for slot in list(self._slots.values()):
                slot.cancel()
        self._stopping = True
        self._signal()

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
        start = self.processed
        pool = self.pool
        try:
            return await self._run_loops(pool, until_idle=until_idle, start=start)
        finally:
            # A stop() that came before run() started is honoured (run() returns at once);
            # the next run starts afresh.
            self._stopping = self._stop_now = False

    async def _run_loops(
        self, pool: asyncpg.Pool[asyncpg.Record], *, until_idle: bool, start: int
    ) -> int:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._flusher, pool)
            tg.start_soon(self._firer, pool)
            tg.start_soon(self._heartbeat, pool)
            # One long-lived runner per slot: starting a task per job would cost several times
            # more than the rest of a no-op job's trip through the worker.
            for _ in range(self.concurrency):
                tg.start_soon(self._runner)
            if not until_idle:
                tg.start_soon(self.maintenance.run)
                if self.listen:
                    tg.start_soon(self._listener)
            try:
                if until_idle:
                    log_rescued(
                        await self._retrying(
                            self.app.queries.job_rescue, pool, 1_000, self.lease_seconds
                        )
                    )
                    await self._retrying(self.app.queries.job_expire_deadlines, pool, 1_000)
                await self._dispatch(pool, until_idle=until_idle)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._drain(pool)
                self._tg = None
                tg.cancel_scope.cancel()
        return self.processed - start

    async def _drain(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        """Let running jobs finish within the grace period, hand back the rest, record all."""
        # Claimed but not started: hand back at once, uncharged.
        while self._ready:
            slot = self._ready.popleft()
            del self._slots[slot.token]
            self._suspects -= slot.job.crashes > 0
            self._end(slot, Interrupted("the worker stopped before the job started"))
        self._signal()
        if self._slots and not self._stop_now:
            with anyio.move_on_after(self.grace_seconds):
                while self._slots and not self._stop_now:
                    await self._changed.wait()
        for slot in list(self._slots.values()):
            slot.cancel()
        while self._slots:
            await self._changed.wait()
        await self._flush_all(pool)
        # The groups its last outcomes ended fire before it exits (or, past a lease, at the
        # maintenance leader's next round).
        with anyio.move_on_after(self.lease_seconds):
            while self._to_fire or self._firing:
                await self._changed.wait()

    async def _listener(self) -> None:
        def state(up: bool) -> None:
            self.listening = up

        await listen(
            self.app.dsn,
            self.app.queries.channel,
            self.queues,
            self._signal,
            on_state=state,
            retry_seconds=min(self.poll_seconds, 1.0),
            application_name=self.application_name,
            outage=self.outage,
        )

    # dispatcher -----------------------------------------------------------------------------

    async def _dispatch(self, pool: asyncpg.Pool[asyncpg.Record], *, until_idle: bool) -> None:
        while not self._stopping:
            changed = self._changed
            free = self._free()
            if 0 < free < self.concurrency // 2 and self._slots:
                # A few free slots among busy ones: more are likely to free within a claim's
                # time; claim for them together (an idle worker never waits here).
                with anyio.move_on_after(_LINGER_SECONDS):
                    while 0 < free < self.concurrency // 2 and self._slots:
                        await changed.wait()
                        changed = self._changed
                        free = self._free()
                free = self._free()
            batch = ClaimBatch([], woke=False)
            if free > 0 and anyio.current_time() <= self._leases_ok_until:
                # Idle only if this claim saw every recorded outcome (a snoozed job may be due
                # again, a finished keyed job frees its key): nothing pending before or after it.
                flushes = self._flushes
                settled = not self._outcomes and not self._flushing and not self._fire_pending()
                batch = await self._retrying(self._claim, pool, free)
                if batch.jobs:
                    observers = self.app.observers
                    for job in batch.jobs:
                        slot = _Slot(job)
                        self._slots[slot.token] = slot
                        self._suspects += job.crashes > 0
                        self._ready.append(slot)
                        if observers:
                            emit(observers, JobClaimed(
                                job_id=job.id, task=job.task, queue=job.queue,
                                attempt=job.attempt, worker_id=self.id, waited=job.waited,
                            ))  # fmt: skip
                    ready, self._ready_event = self._ready_event, anyio.Event()
                    ready.set()
                if (
                    until_idle
                    and not batch.jobs
                    and not batch.woke
                    and settled
                    and not self._slots
                    and not self._outcomes
                    and not self._flushing
                    and not self._fire_pending()
                    and flushes == self._flushes
                ):
                    return
            # Keys this claim woke are claimable now; a full claim may leave more due jobs.
            if batch.woke or (batch.jobs and len(self._slots) < self.concurrency):
                continue
            # Wait for a slot to free up, an outcome to be recorded, a NOTIFY, or the poll tick.
            with anyio.move_on_after(self.poll_seconds):
                await changed.wait()

    async def _claim(self, pool: asyncpg.Pool[asyncpg.Record], free: int) -> ClaimBatch:
        """One claim of up to `free` jobs, on the claim loop's own connection when it has one."""
        lane = self._claiming
        async with pool.acquire() if lane is None else lane.connection() as conn:
            # A job whose worker died while running it runs alone among this worker's suspects:
            # a death while it runs then singles it out (see job_rescue).
            return await self.app.queries.job_claim(
                conn, self.queues, free, self.id, self.lease_seconds, self._suspects == 0
            )

    def _free(self) -> int:
        """Slots free for a claim. Outcomes waiting to be recorded beyond one batch's worth hold
        slots too: a worker whose writes lag never holds more than twice its slots of work in
        doubt."""
        backlog = max(0, len(self._unrecorded) - self.concurrency)
        return self.concurrency - len(self._slots) - backlog

    def _signal(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    async def _retrying(
        self, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Call `fn` until it succeeds, retrying promptly while the database is away."""
        delay = 0.05
        while True:
            try:
                result = await fn(*args, **kwargs)
            except TRANSIENT_ERRORS as exc:
                self.outage.failed(exc)
                if args and isinstance(args[0], asyncpg.Pool):
                    await args[0].expire_connections()
                await anyio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX_SECONDS)
            else:
                self.outage.ok()
                return result

    # execution ------------------------------------------------------------------------------

    async def _runner(self) -> None:
        """Run claimed jobs one after another, for as long as the worker runs."""
        ready = self._ready
        while True:
            if ready:
                await self._execute(ready.popleft())
            else:
                await self._ready_event.wait()

    async def _execute(self, slot: _Slot) -> None:
        try:
            with slot.scope:
                await self._call(slot)
            if slot.scope.cancelled_caught and not slot.lost and not slot.ended:
                self._end(slot, Interrupted("the worker stopped while the job ran"))
        except anyio.get_cancelled_exc_class():
            if not slot.lost and not slot.ended:
                self._end(slot, Interrupted("the worker stopped while the job ran"))
            raise
        except Exception as exc:
            # A fault around the handler (what the handler raises is decided in `_call`): the
            # execution ends as if the handler had raised it, and this slot goes on.
            logger.exception(
                "job %s (%s): the worker failed around its handler",
                slot.job.id,
                slot.job.task,
                extra={"job_id": slot.job.id, "task": slot.job.task},
            )
            if not slot.lost and not slot.ended:
                self._end(slot, exc)
        finally:
            del self._slots[slot.token]
            self._suspects -= slot.job.crashes > 0
            self.processed += 1
            self._signal()

    def _end(self, slot: _Slot, raised: BaseException | None) -> None:
        """Decide how the execution ended and queue the outcome."""
        self._queue(slot, self._decide(slot, raised), raised)

    def _decide(
        self,
        slot: _Slot,
        raised: BaseException | None,
        task: Task | None = None,
        result: str | None = None,
    ) -> Decision:
        job = slot.job
        deadline_in = None
        if job.deadline_in is not None:
            deadline_in = job.deadline_in - (anyio.current_time() - slot.claimed_at)
        policy = (task.retry if task is not None else None) or self.app.retry_policy
        return decide(
            raised, attempt=job.attempt, max_attempts=job.max_attempts, deadline_in=deadline_in,
            policy=policy, result=result,
        )  # fmt: skip

    def _queue(self, slot: _Slot, decision: Decision, raised: BaseException | None) -> None:
        """Queue an outcome to record; the job's lease is renewed until it is recorded."""
        # Into `self._outcomes` as it is now: the flusher swaps the batch while handlers run.
        self._outcomes.add(slot.token, decision)
        self._unrecorded.add(slot.token)
        slot.ended = True
        outcome = outcome_of(decision)
        self.outcomes[outcome] += 1
        job = slot.job
        duration = anyio.current_time() - slot.claimed_at
        log_execution(
            job_id=job.id, task=job.task, queue=job.queue, attempt=job.attempt,
            max_attempts=job.max_attempts, decision=decision, outcome=outcome, duration=duration,
            raised=raised,
        )  # fmt: skip
        if self.app.observers:
            emit(self.app.observers, JobFinished(
                job_id=job.id, task=job.task, queue=job.queue, attempt=job.attempt,
                worker_id=self.id, outcome=outcome, duration=duration,
                failure_reason=decision.failure_reason,
                error=error_line(decision.error) or None,
            ))  # fmt: skip

    async def _call(self, slot: _Slot) -> None:
        job = slot.job
        task = self.app.tasks.get(job.task)
        if task is None:
            self._end(slot, UnknownTask(job.task, job.handbacks))
            return
        kwargs: dict[str, Any] = {}
        raised: BaseException | None = None
        try:
            kwargs = task.decode_args(job.args)
        except Exception as exc:  # not fitting the handler, not JSON, nested too deep to decode
            raised = NotRunnable(_unfit_args(task, exc), reason="invalid_args")
        ctx = Context(
            self.app,
            job_id=job.id,
            task=job.task,
            queue=job.queue,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            snoozes=job.snoozes,
            worker_id=self.id,
            group=job.group,
            args=kwargs,
            busy=self._busy,
        )
        slot.ctx = ctx
        if self.app.observers:
            emit(self.app.observers, JobStarted(
                job_id=job.id, task=job.task, queue=job.queue, attempt=job.attempt,
                worker_id=self.id, trace_context=job.trace_context,
            ))  # fmt: skip
        if raised is None:
            deadline = None if job.deadline_in is None else slot.claimed_at + job.deadline_in
            execution = await execute(
                task, ctx, kwargs, time_limit=job.timeout, deadline=deadline,
                policy=policy_of(task, self.app.retry_policy),
                result_max_bytes=self.app.result_max_bytes, threads=self._threads,
                stopped=lambda: slot.scope.cancel_called,
            )  # fmt: skip
            if slot.lost:
                return  # its lease was lost meanwhile: the job is not ours now
            decision, raised = execution.decision, execution.raised
        else:
            decision = self._decide(slot, raised, task)
        if task.on_outcome is not None and (
            task.outcome_states is None or decision.state in task.outcome_states
        ):
            # Before the outcome is recorded: whoever reads the hook's effects (a sweep's live
            # counts) once the job is terminal finds them there.
            await _tell(task, ctx, decision)
        self._queue(slot, decision, raised)

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
            try:
                written = await self._retrying(self._write_outcomes, pool, batch)
            except BaseException:
                # Not recorded: keep the outcomes for the next flush (fenced, so never applied
                # twice).
                self._merge_back(batch)
                raise
            self._settle(batch, written.tokens)
            # Before the flush counts as done: a worker run until idle waits for the firing
            # step, then claims the `then` jobs it enqueued.
            if written.sealed:
                self._to_fire.update(written.sealed)
                self._signal()
        finally:
            self._flushing = False
            self._flushes += 1

    def _fire_pending(self) -> bool:
        return bool(self._to_fire) or self._firing

    async def _firer(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        """The firing step for the closed groups whose jobs this worker ended, beside the
        flusher: a group's row held by someone else (an enqueue of the group still in flight
        when it was closed) holds back this loop, never the recording of outcomes. Groups
        named while it runs are fired again after (it may not have seen their last job end)."""
        while True:
            changed = self._changed
            if not self._to_fire:
                await changed.wait()
                continue
            sealed, self._to_fire = sorted(self._to_fire), set()
            self._firing = True
            try:
                await self._fire(pool, sealed)
            finally:
                self._firing = False
                self._signal()

    async def _fire(self, pool: asyncpg.Pool[asyncpg.Record], sealed: list[str]) -> None:
        """One firing step; a failure is logged, not raised: the outcomes are recorded, and the
        maintenance leader fires what is left within a round."""
        try:
            with anyio.fail_after(self.lease_seconds):
                async with pool.acquire() as conn:
                    await fire_now(self.app.queries, conn, sealed)
        except Exception as exc:
            logger.warning(
                "could not fire closed group(s) %s (%s: %s); the maintenance leader fires them",
                sealed,
                type(exc).__name__,
                exc,
            )

    def _settle(self, batch: Outcomes, recorded: set[ClaimToken]) -> None:
        """Forget the outcomes written, and warn of those whose claim was lost."""
        tokens = batch.tokens()
        self._unrecorded.difference_update(tokens)
        resent, self._resent = self._resent, set()
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

    async def _write_outcomes(
        self, pool: asyncpg.Pool[asyncpg.Record], batch: Outcomes
    ) -> Recorded:
        """One write of a batch of outcomes, finished even if the worker is being cancelled."""
        try:
            # Cut off mid-way, the statement may still commit without us knowing: let it end
            # (within a lease), so that stopping a worker does not leave outcomes in doubt.
            with anyio.CancelScope(shield=True), anyio.fail_after(self.lease_seconds) as scope:
                lane = self._recording
                async with pool.acquire() if lane is None else lane.connection() as conn:
                    recorded = await self.app.queries.job_finish_many(conn, self.id, batch)
        except BaseException as exc:
            self._resent.update(batch.tokens())
            if isinstance(exc, TimeoutError) and scope.cancelled_caught:
                raise TimeoutError(f"recording outcomes took over {self.lease_seconds:g}s") from exc
            raise
        return recorded

    def _merge_back(self, batch: Outcomes) -> None:
        for field in Outcomes.__struct_fields__:
            getattr(batch, field).extend(getattr(self._outcomes, field))
        self._outcomes = batch

    async def _flush_all(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        with anyio.move_on_after(self.lease_seconds):
            while self._outcomes:
                await self._flush_once(pool)
        if self._outcomes:
            logger.warning(
                "could not record %d outcome(s) before exiting; those jobs will be rescued "
                "when their leases lapse",
                len(self._outcomes),
            )

    # leases ---------------------------------------------------------------------------------

    async def _heartbeat(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        heartbeat = self.app.queries.job_heartbeat
        last_ok = anyio.current_time()
        while True:
            await anyio.sleep(self.heartbeat_seconds)
            # Finished jobs whose outcome waits to be recorded keep their leases too: an outage
            # of the database must not hand finished work to another worker.
            tokens = [*self._slots, *self._unrecorded]
            try:
                held = await heartbeat(pool, self.id, self.lease_seconds, tokens)
            except _HEARTBEAT_ERRORS as exc:
                if anyio.current_time() - last_ok > self.lease_seconds:
                    # Our leases may have lapsed: claim nothing more until we can renew.
                    self._leases_ok_until = last_ok
                self.outage.failed(exc)
                await pool.expire_connections()
                continue
            self.outage.ok()
            last_ok = anyio.current_time()
            self._leases_ok_until = float("inf")
            lost = [self._slots[t] for t in tokens if t not in held and t in self._slots]
            for slot in lost:
                # Rescued or cancelled elsewhere: stop the handler; nothing will be recorded.
                slot.lost = True
                slot.cancel()
            if lost:
                logger.warning(
                    "worker %s lost the lease of job(s) %s; their handlers were cancelled",
                    self.id,
                    [s.job.id for s in lost],
                )
            self._signal()


async def _tell(task: Task, ctx: Context, decision: Decision) -> None:
    """Tell a task's outcome hook; its failure is logged, never the execution's. The handler
    has ended: stopping the worker does not cut the hook short (it gets a few seconds)."""
    assert task.on_outcome is not None
    try:
        with anyio.CancelScope(shield=True), anyio.fail_after(_HOOK_SECONDS):
            await task.on_outcome(ctx, decision)
    except BaseException as exc:
        if own_cancellation(exc):
            raise
        logger.exception("the outcome hook of task %r failed for job %s", task.name, ctx.job_id)


def _unfit_args(task: Task, exc: Exception) -> str:
    """Why stored args cannot be handed to the handler, and what to do."""
    if isinstance(exc, msgspec.ValidationError):
        accepted = ", ".join(task.args_type.__struct_fields__) or "none"
        why = f"do not fit the handler of task {task.name!r}: {exc} (it accepts: {accepted})"
    elif isinstance(exc, RecursionError):
        why = (
            f"of task {task.name!r} are JSON nested too deep to decode (sweepq refuses more "
            f"than {MAX_JSON_DEPTH} levels at enqueue)"
        )
    else:
        why = f"of task {task.name!r} cannot be decoded ({type(exc).__name__}: {exc})"
    return f"the stored args {why}; the enqueuer must pass args the handler accepts"
