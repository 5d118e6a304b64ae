"""`Queue`: the core's app, composed of its database handle, its registry and its operations.

`Database` (`database.py`) owns the DSN, the schema, the pool and lane and the migrations;
`Registry` (`registry.py`) the tasks, cron schedules, observers and layers; `JobOperations`
(`operations.py`) and `GroupOperations` (`group_operations.py`) what clients do to jobs, groups
and concurrency keys. A `Queue` holds one of each and gives them one flat surface. This module
is longer than 400 lines for that surface's public docstrings alone: each method's body is one
call into a component.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, Literal, Self, TypeVar, Unpack, overload

import asyncpg
import msgspec

from . import queues as _queues
from . import results
from .cron import CronSchedule
from .database import Database
from .dsn import redact
from .enqueue import JobSpec
from .events import Observer
from .group_operations import GroupOperations
from .ident import ident
from .jobs import Enqueued, GroupClosure, GroupCounts, GroupProgress, Job, JobState, JobWait
from .layers import Layer, Retry
from .migrate import Migration
from .operations import PRUNE_BATCH, JobOperations
from .options import JobOptions
from .queries import Conn, Queries
from .queues import QueueState
from .registry import Registry
from .retry import RetryPolicy
from .rows import ConcurrencyKey, CronRow
from .tasks import DEFAULT_MAX_ATTEMPTS, Handler, Task

L = TypeVar("L")


class Queue:
    """The core's app: where jobs live (a DSN and a schema) and the tasks that run them.

    `sweepq.App` is this with the sweeps layer plugged in; use that one.

    Nothing connects until the app is entered (`async with app:`) or `open()`ed.

    Its arguments, attributes and errors are `sweepq.App`'s (sweeps/app.py documents them).

    Attributes:
        db: the database handle (`core/database.py`): DSN, schema, pool, lane, migrations.
        registry: tasks, cron schedules, observers and layers (`core/registry.py`).
        job_ops: the job operations (`core/operations.py`).
        group_ops: the group and concurrency-key operations (`core/group_operations.py`).
            These four are the app's components, for sweepq's own modules (the worker, the
            maintenance leader, the testing kit); they are internal and may change.

    Example:
        >>> app = sweepq.App(dsn="postgresql://localhost/app")  # doctest: +SKIP
        >>> @app.task(queue="email")
        ... async def send_email(ctx: sweepq.Context, to: str) -> None: ...
        >>> async with app:
        ...     await app.migrate()
        ...     await app.enqueue(send_email, {"to": "a@example.com"})
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str | None = None,
        pool_min_size: int = 1,
        pool_max_size: int = 10,
        retry: RetryPolicy | None = None,
        result_max_bytes: int | None = None,
    ) -> None:
        self.result_max_bytes = results.result_max_bytes(result_max_bytes)
        self.registry = Registry(retry)
        self.db = Database(
            dsn, schema, pool_min_size=pool_min_size, pool_max_size=pool_max_size,
            layers=lambda: self.registry.layers,
        )  # fmt: skip
        self.group_ops = GroupOperations(self.db, self.registry)
        self.job_ops = JobOperations(self.db, self.registry, self.group_ops)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} schema={self.schema!r} tasks={len(self.tasks)}>"

    # the components' state, read where the app was read ------------------------------------

    @property
    def schema(self) -> str:
        """The schema holding sweepq's tables."""
        return self.db.schema

    @property
    def queries(self) -> Queries:
        """The core's statements for this app's schema."""
        return self.db.queries

    @property
    def tasks(self) -> dict[str, Task]:
        """The registered tasks by name."""
        return self.registry.tasks

    @tasks.setter
    def tasks(self, tasks: dict[str, Task]) -> None:
        # The Django worker swaps in a mapping that finds the Django tasks by their path.
        self.registry.tasks = tasks

    @property
    def crons(self) -> dict[str, CronSchedule]:
        """The registered cron schedules by name."""
        return self.registry.crons

    @property
    def observers(self) -> tuple[Observer, ...]:
        """The functions told of every event (`observe`)."""
        return self.registry.observers

    @property
    def retry_policy(self) -> RetryPolicy | None:
        """The `RetryPolicy` of tasks registered without their own (`retry=`)."""
        return self.registry.retry_policy

    @property
    def trace_context_source(self) -> Callable[[], str | None] | None:
        """The caller's trace context (a W3C traceparent) for the jobs it enqueues, which a
        tracing integration sets (sweepq.contrib.otel); None: jobs carry none."""
        return self.registry.trace_context_source

    @trace_context_source.setter
    def trace_context_source(self, source: Callable[[], str | None] | None) -> None:
        self.registry.trace_context_source = source

    # lifecycle ----------------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """The DSN this app connects to (resolved from the environment if not given)."""
        return self.db.dsn

    @property
    def display_dsn(self) -> str:
        """The DSN with its password hidden, for logs and output."""
        return redact(self.db.dsn)

    @property
    def enqueue_function(self) -> str:
        """The name of this schema's SQL enqueue function, qualified and quoted for SQL text.

        Any driver can enqueue through it, inside its own transaction: `SELECT * FROM
        "sweepq".enqueue(task, args, options)` (see "Enqueue from SQL" in the jobs guide).

        Example:
            >>> sweepq.App(schema="billing").enqueue_function
            '"billing".enqueue'
        """
        return f"{ident(self.schema)}.enqueue"

    def configure(self, *, dsn: str | None = None, schema: str | None = None) -> None:
        """Point an app that is not open yet at another database or schema (the CLI's `--dsn`
        does this, and the testing kit's fresh schema per test).

        Raises:
            ConfigurationError: the app is already open.
            InvalidIdentifierError: `schema` is not a valid schema name.
        """
        if self.db.configure(dsn=dsn, schema=schema):
            for layer in self.registry.layers:
                layer.schema_changed()

    async def open(self) -> None:
        """Open the connection pool (idempotent)."""
        await self.db.open()

    async def close(self) -> None:
        """Close the pool, waiting for connections in use to be released."""
        await self.db.close()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def create_pool(
        self,
        min_size: int,
        max_size: int,
        *,
        settings: dict[str, str] | None = None,
        internal: bool = False,
    ) -> asyncpg.Pool[asyncpg.Record]:
        """A new pool on this app's database (workers keep their own, sized to their needs).

        With `internal=True` the pool serves only sweepq's own statements, which leave no
        session state, so a released connection is not reset (saving a round trip).
        """
        return await self.db.create_pool(min_size, max_size, settings=settings, internal=internal)

    @property
    def pool(self) -> asyncpg.Pool[asyncpg.Record]:
        """The open connection pool (for your own statements on sweepq's database).

        Raises:
            ConfigurationError: the app is not open.
        """
        return self.db.pool

    @contextlib.asynccontextmanager
    async def connection(self, conn: Conn | None = None) -> AsyncIterator[Conn]:
        """`conn` if given, else a connection from the pool for the duration of the block."""
        async with self.db.connection(conn) as c:
            yield c

    # schema -------------------------------------------------------------------------------

    def layer(self, kind: type[L]) -> L:
        """The layer of this kind added to the app."""
        return self.registry.layer(kind)

    async def maintain_layers(self) -> None:
        """The maintenance leader's round for each layer (`Layer.maintain`)."""
        for layer in self.registry.layers:
            await layer.maintain()

    def add_layer(self, layer: Layer) -> None:
        """Plug a layer built on the core into this app: its migrations (applied after the
        core's), its retention (run by `prune`) and its kinds of cron schedule."""
        self.registry.add_layer(layer)

    def migrations(self) -> list[Migration]:
        """Every migration this app knows: the core's, then each layer's, in order."""
        return self.db.migrations()

    async def check_migrated(self) -> None:
        """Make sure the schema exists and has every migration this sweepq knows (a worker
        checks this as it starts).

        Raises:
            SchemaNotMigratedError: it does not, naming the migrations pending and the fix.
        """
        await self.db.check_migrated()

    async def migrate(self, *, dry_run: bool = False) -> list[str]:
        """Create or upgrade sweepq's tables; safe to run from many processes at once.

        Args:
            dry_run: only report what would be applied.

        Returns:
            The labels of the migrations applied (or pending, when dry).
        """
        return await self.db.migrate(dry_run=dry_run)

    # tasks --------------------------------------------------------------------------------

    @overload
    def task(self, fn: Handler, /) -> Task: ...
    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        priority: int = 0,
        timeout: float | timedelta | None = None,
        retry: RetryPolicy | None = None,
    ) -> Callable[[Handler], Task]: ...

    def task(
        self,
        fn: Handler | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        priority: int = 0,
        timeout: float | timedelta | None = None,
        retry: RetryPolicy | None = None,
    ) -> Task | Callable[[Handler], Task]:
        """Register a handler, `async def handler(ctx, **args)` or a plain `def` (run in one of
        the worker's threads: for blocking libraries and CPU-bound steps), as a task.

        Args:
            name: the task name stored in jobs (default: `module.qualname` of the handler).
            queue: the queue its jobs go to unless enqueue says otherwise.
            max_attempts: executions charged before the job fails `max_attempts_exceeded`.
            priority: higher runs first among due jobs of a queue.
            timeout: the most one execution may run (seconds or a timedelta); past it an async
                handler is cancelled and the execution fails `timeout`, retried like any
                failure. A job's `timeout` option overrides it.
            retry: the task's `RetryPolicy` (its backoff, and the exceptions it retries or
                discards); default: the App's.
        """

        def register(handler: Handler) -> Task:
            return self.registry.register(
                handler, name=name, queue=queue, max_attempts=max_attempts,
                priority=priority, timeout=timeout, retry=retry,
            )  # fmt: skip

        return register if fn is None else register(fn)

    def observe(self, observer: Observer) -> Observer:
        """Register a function of one event (`sweepq.events`): jobs claimed, started and
        finished, sweep links committed and runs ended. It must be quick: it runs in line with
        the work. Returns it, so that it can be used as a decorator.

        Example:
            >>> @app.observe
            ... def count(event: sweepq.events.Event) -> None:
            ...     if isinstance(event, sweepq.events.JobFinished):
            ...         finished[event.outcome] += 1
        """
        return self.registry.observe(observer)

    def unobserve(self, observer: Observer) -> None:
        """Stop telling `observer` (nothing happens if it was not registered)."""
        self.registry.unobserve(observer)

    def add_task(self, task: Task) -> None:
        """Register an existing `Task` (e.g. one built by a layer on top of the core)."""
        self.registry.add_task(task)

    def get_task(self, task: Task | str) -> Task:
        """The registered task for a task object or name."""
        return self.registry.get_task(task)

    def cron(
        self,
        name: str,
        expression: str,
        task: Task | str | None = None,
        args: dict[str, Any] | None = None,
        *,
        overlap: str = "skip",
        queue: str | None = None,
        tz: str = "UTC",
        **target: Any,
    ) -> CronSchedule:
        """Enqueue `task` on every tick of a cron `expression`, once across all workers.

        Args:
            name: the schedule's name (unique in the app).
            expression: five-field cron, e.g. `"*/5 * * * *"`, or six fields with seconds
                first; evaluated in time zone `tz`; refused here if invalid.
            task: the task (or its registered name) to enqueue on each tick.
            args: its arguments, checked now against the handler.
            overlap: `"skip"` (a tick while the previous job is active enqueues nothing) or
                `"buffer_one"` (one more waits its turn; never more than one waits).
            queue: overrides the task's queue.
            tz: the IANA time zone the expression is read in, e.g. `"Europe/Paris"` (default
                UTC); refused here if unknown. Across a DST change, an expression at fixed
                times runs a time the clocks skip at the first minute after the jump, and one
                they repeat once, at its first instant; an interval (`"*/30 * * * *"`) keeps to
                real time (see the cron guide).
            **target: instead of a task, what a layer schedules, e.g. `sweep="nightly"` (and
                `params={...}`) to start a sweep run on each tick.

        The elected maintenance leader of the workers enqueues the ticks; the schedule is never
        disabled by an overlap.
        """
        return self.registry.cron(
            name, expression, task, args, overlap=overlap, queue=queue, tz=tz, target=target
        )

    async def cron_schedules(self, *, conn: Conn | None = None) -> list[CronRow]:
        """The schedules known to the database, with their next tick and last outcome."""
        return await self.job_ops.cron_schedules(conn)

    async def rate_limit(self, key: str, *, per_second: float, burst: int = 1) -> float:
        """Wait for a grant of `key` (shared by all workers); see `Context.rate_limit`."""
        return await self.job_ops.rate_limit(key, per_second, burst)

    # jobs ---------------------------------------------------------------------------------

    async def enqueue(
        self,
        task: Task | str,
        args: dict[str, Any] | msgspec.Struct | None = None,
        *,
        conn: Conn | None = None,
        on_behalf_of: Layer | None = None,
        **options: Unpack[JobOptions],
    ) -> Enqueued:
        """Enqueue one job; checked fully before anything is written.

        Args:
            task: a `Task` or a registered task name.
            args: the handler's keyword arguments (dict or msgspec Struct), JSON values.
            conn: enqueue on this connection, inside the caller's transaction.
            on_behalf_of: the layer whose own job this is (the sweeps enqueue their links and
                leaves so): it may use the group and idempotency scope names the layer keeps
                (`Layer.reserved`), which every other enqueue is refused.
            **options: the job's options (`sweepq.core.options.JobOptions`): queue, priority,
                delay or run_at, max_attempts, idempotency_key and idempotency_scope,
                identity_key and unique_for, deadline, concurrency_key, group; the jobs guide
                describes each.

        Returns:
            `Enqueued(job_id, outcome)`; outcome is `created`, `existing_active` or
            `existing_terminal` (logged as a WARNING).

        Raises:
            UnknownTaskError: no task of that name is registered.
            InvalidArgumentsError: the args do not fit the handler, or are not JSON values.
            InvalidJobOptionError: an option that cannot be honoured (a negative delay,
                `unique_for` without `identity_key`, ...).
            InvalidIdentifierError: a queue name that is not valid.
        """
        return await self.job_ops.enqueue(task, args, conn, on_behalf_of, options)

    async def enqueue_many(
        self,
        specs: Sequence[JobSpec],
        *,
        conn: Conn | None = None,
        on_duplicate: Literal["report", "raise"] = "report",
        on_behalf_of: Layer | None = None,
    ) -> list[Enqueued]:
        """Enqueue many jobs in one transaction; results in input order.

        Every spec is checked before anything is written: one bad spec writes nothing.
        Dedup works as for `enqueue`, including between specs of the same call. Jobs without
        keys (no idempotency, identity or concurrency key) are sent by COPY once there are 16
        of them, the others by one deduplicating INSERT; ids follow the input order either way.

        With `on_duplicate="raise"`, a job that meets an existing one by its keys (or another of
        the call) is an error instead: `DuplicateJobError`, and nothing of the call is written.
        Jobs whose only key is an idempotency key are then sent by COPY too, which is faster
        when duplicates are not expected (a failure inside your transaction leaves it to roll
        back). `on_behalf_of` is as for `enqueue`.
        """
        return await self.job_ops.enqueue_many(specs, conn, on_duplicate, on_behalf_of)

    async def get_job(self, job_id: int, *, conn: Conn | None = None) -> Job | None:
        """The job with this id, or None if there is none (or it was pruned).

        A completed job's `result` is what its handler returned (read back from JSON).
        """
        return await self.job_ops.get(job_id, conn)

    async def job_waits(
        self, job_ids: Sequence[int], *, conn: Conn | None = None
    ) -> dict[int, JobWait]:
        """Why each job waits, if it does: how long it has been due without a worker claiming it
        (and whether any job of its queue runs now), or how long until it is due and the newest
        entry of its history (a `Snooze` reason, say). Jobs that do not exist are left out.
        """
        return await self.job_ops.waits(job_ids, conn)

    async def wait_for(
        self,
        job_id: int,
        *,
        # The caller's to give: its TimeoutError says where the job was when time ran out,
        # which a cancel scope around the call could not.
        timeout: float | timedelta | None,  # noqa: ASYNC109
    ) -> Job:
        """Wait until a job is terminal (completed, failed or cancelled) and return it.

        The wait is woken by LISTEN/NOTIFY when the job ends, not by polling; a job that has
        already ended is returned at once. The wait holds a connection of its own (not one of
        the pool's), so the app need not be open. Nothing is announced for a job nobody waits
        for: only jobs with a waiter cost a notification.

        Args:
            job_id: the job's id (`Enqueued.job_id`).
            timeout: the most seconds (or a timedelta) to wait; `None` waits for as long as it
                takes, `0` only looks.

        Returns:
            The terminal job, with its `result` when it completed.

        Raises:
            TimeoutError: the job did not end within `timeout`; the message says where it is.
            UnknownJobError: there is no job with this id (or retention removed it).
            DatabaseUnavailableError: the database could not be reached, or the connection was
                lost while waiting (the job itself is unaffected: wait again).
            SchemaNotMigratedError: the schema lacks the migrations this needs.

        Example:
            >>> enqueued = await app.enqueue(resize, {"image_id": 7})
            >>> job = await app.wait_for(enqueued.job_id, timeout=30)
            >>> job.state, job.result
            (<JobState.COMPLETED: 'completed'>, {'width': 640})
        """
        return await self.job_ops.wait_for(job_id, timeout)

    async def cancel(
        self, job_id: int, *, reason: str = "cancelled", conn: Conn | None = None
    ) -> Job | None:
        """Cancel an available or running job (a running one's worker is fenced out).

        Returns the job after the call (unchanged if it was already terminal), or None.
        """
        return await self.job_ops.cancel(job_id, reason, conn)

    async def retry(self, job_id: int, *, conn: Conn | None = None) -> Job | None:
        """Run a terminal job again now, with a fresh attempt budget; an available job runs now.

        Returns the job after the call (unchanged if it is running), or None. The layers take
        part (`Layer.retry`): with the sweeps, an item of a sweep run that has ended makes its
        run run again until the item is done; the run then ends with its counters recounted, so
        that they stay exact.
        """
        retry: Retry = self.job_ops.retry
        for layer in reversed(self.registry.layers):
            retry = functools.partial(layer.retry, then=retry)
        return await retry(job_id, conn)

    # groups -------------------------------------------------------------------------------

    async def group_counts(self, group: str, *, conn: Conn | None = None) -> GroupCounts:
        """The jobs enqueued with `group=group`, per state (their `outstanding` and `total`).

        Reads the group's entries of an index, never the rest of the jobs table. Jobs that
        retention removed are no longer counted.

        Example:
            >>> await app.enqueue_many([sweepq.JobSpec(t, a, group="import-42") for a in rows])
            >>> (await app.group_counts("import-42")).outstanding  # 0 once all are done
        """
        return await self.group_ops.counts(group, conn)

    async def group_outstanding(
        self, groups: Sequence[str], *, conn: Conn | None = None
    ) -> dict[str, int]:
        """How many jobs of each group are not finished yet (available or running).

        Costs the outstanding jobs only, however many of a group's jobs have finished.
        """
        return await self.group_ops.outstanding(groups, conn)

    async def group_progress(
        self, groups: Sequence[str], *, conn: Conn | None = None
    ) -> dict[str, GroupProgress]:
        """Each group's jobs not finished yet: due, waiting (for a retry, a snooze, their run_at)
        and running, and its failed and cancelled jobs. Costs those jobs only: never the
        group's completed ones."""
        return await self.group_ops.progress(groups, conn)

    async def group_jobs(
        self,
        group: str,
        state: JobState | str,
        *,
        limit: int = 100,
        before: int | None = None,
        conn: Conn | None = None,
    ) -> list[Job]:
        """The group's jobs in `state`, newest first; `before=` the last id of a page for the next.

        Example:
            >>> failed = await app.group_jobs("import-42", "failed", limit=20)
            >>> [(job.args, job.errors[-1].error) for job in failed]
        """
        return await self.group_ops.jobs(group, state, limit, before, conn)

    async def cancel_group(
        self,
        group: str,
        *,
        include_running: bool = False,
        reason: str = "cancelled",
        conn: Conn | None = None,
    ) -> int:
        """Cancel the group's available jobs, and its running ones with `include_running`.

        A running job's worker is fenced out: what its handler ends with is not recorded.
        Returns how many jobs were cancelled. A closed group (`close_group`) whose last jobs this
        cancelled fires here: its `then` is enqueued.
        """
        return await self.group_ops.cancel(group, include_running, reason, conn)

    async def close_group(
        self,
        group: str,
        *,
        then: JobSpec | None = None,
        conn: Conn | None = None,
        on_behalf_of: Layer | None = None,
    ) -> GroupClosure:
        """Close a group: it takes no more jobs, and `then` is enqueued once, when every job of
        the group has ended (completed, failed or cancelled: none available or running).

        From the moment the close commits, every enqueue into the group is refused with
        `GroupClosedError` and writes nothing: `enqueue`, `enqueue_many` (both of its paths) and
        the SQL enqueue function alike; an enqueue that got in first counts (the group does not
        fire before its jobs have ended).
        A group that is empty when it is closed fires at once, before this call returns.
        `then` is checked now, as `enqueue_many` checks a spec, and kept in the database, so that
        any worker enqueues it, one without its task too; its `delay` and `deadline` count from
        the moment it is enqueued.

        Closing a group that is closed already changes nothing and raises nothing: it returns
        the earlier closure (`already_closed=True`; its `then`, not this call's), so that a job
        that closes a group, crashes and runs again is harmless. Jobs of the group retried after
        it fired (`retry`, `retry_group_failures`) run again, but `then` is not enqueued again;
        retried before it fired, they delay it. `reopen_group` opens it again.

        Args:
            group: the group's name (the `group` option of its jobs).
            then: the job to enqueue when the group has ended (`sweepq.JobSpec`); None seals the
                group only. It may not be in the group it follows.
            conn: close inside the caller's transaction; the group is closed when it commits.
                Without it, the seal commits first (enqueues from then on are refused at once),
                then the group fires if it has ended, once the enqueues that were in flight have
                committed (inside one transaction, once none is in flight). Inside a REPEATABLE
                READ or SERIALIZABLE transaction it never fires at once: the workers'
                maintenance leader does, within a round.
            on_behalf_of: the layer whose own group this is (as for `enqueue`): a group name a
                layer keeps, and a `then` using one, are refused without it.

        Returns:
            `GroupClosure(group, then_job, fired, already_closed)`.

        Raises:
            InvalidJobOptionError: a group name that is not valid (or kept by a layer), a `then`
                that is not a JobSpec, one in the group itself, or a bad option of `then`.
            UnknownTaskError: `then`'s task is not registered.
            InvalidArgumentsError: `then`'s args do not fit its handler.
            GroupClosedError: `then`'s own group is closed (it could never be enqueued).

        Example:
            >>> then = sweepq.JobSpec(report, {"batch": 42})
            >>> closure = await app.close_group("import-42", then=then)
            >>> closure.fired  # True at once if every job of the group had ended
        """
        return await self.group_ops.close(group, then, conn, on_behalf_of)

    async def reopen_group(
        self, group: str, *, conn: Conn | None = None, on_behalf_of: Layer | None = None
    ) -> bool:
        """Let a closed group take jobs again; its closure is forgotten (a `then` that has not
        fired yet is dropped). Closing it again later enqueues that close's `then` once more,
        when the group has ended again (the sweeps do this when a finished run runs again).

        Returns whether the group was closed. `on_behalf_of` is as for `close_group`.
        """
        return await self.group_ops.reopen(group, conn, on_behalf_of)

    async def fire_closed_groups(self, *, limit: int = 1_000, conn: Conn | None = None) -> int:
        """Enqueue the `then` of every closed group that has ended and has not fired yet;
        returns how many fired.

        The workers' maintenance leader calls this every round, which catches every way a
        group can end (a job failed by a rescue or a deadline, a worker killed after recording
        its last job): call it yourself only where no worker runs. Rows another transaction
        holds are skipped (it fires them, or the next call does); `limit` rows are locked at a
        time.
        """
        return await self.group_ops.fire_closed(limit, conn)

    async def retry_group_failures(
        self, group: str, *, include_cancelled: bool = False, conn: Conn | None = None
    ) -> int:
        """Run the group's failed jobs again (and its cancelled ones with `include_cancelled`),
        each with a fresh attempt budget (as `retry`).

        A job whose `identity_key` another active job holds is left as it is. Returns how many
        jobs were retried; they run in batches of 1,000 per statement.
        """
        return await self.group_ops.retry_failures(group, include_cancelled, conn)

    async def set_concurrency_limit(
        self,
        key: str,
        limit: int | None,
        *,
        weight: int | None = None,
        ordered: bool | None = None,
        conn: Conn | None = None,
    ) -> None:
        """Let at most `limit` jobs with `concurrency_key=key` run at once (None: no limit).

        Jobs waiting on a full key stay `available`; nothing is written while they wait.
        `weight` (1 to 1,000; None leaves it as it is, 1 when new) is the key's turns in a row
        among keys at equal priority: a key of weight 3 takes three claims' shares for one of a
        key of weight 1 (paid tiers, say). `ordered=True` (with `limit=1`) starts the key's jobs
        one at a time strictly in enqueue order: a job that waits to run again (a retry's
        backoff, a snooze) holds the ones behind it back until it ends; None leaves it as it is.
        """
        await self.group_ops.set_limit(key, limit, weight, ordered, conn)

    async def set_rate_limit(
        self,
        key: str,
        count: int | None,
        *,
        per: timedelta | float | None = None,
        conn: Conn | None = None,
    ) -> None:
        """Let at most `count` jobs with `concurrency_key=key` start per window of `per` (a
        timedelta or seconds), across every worker; `count=None` removes the rate.

        The windows are fixed and aligned on multiples of `per` since the Unix epoch (with
        `per=timedelta(minutes=1)`, each minute on the minute): at most `count` starts in each,
        so up to twice `count` may start within one `per` that spans two windows. Admitted in
        the claim, as the limit: a job over the rate stays `available`, holds no slot and
        nothing is written while it waits. A key may have both a limit and a rate. For a call
        inside a handler (an API's quota per request), use `ctx.rate_limit`, which waits in
        the handler and holds its slot.
        """
        await self.group_ops.set_rate(key, count, per, conn)

    async def concurrency_keys(self, *, conn: Conn | None = None) -> list[ConcurrencyKey]:
        """Every concurrency key with its limit, running and waiting counts, and its rate."""
        return await self.group_ops.limits(conn)

    async def pause_queue(
        self, queue: str, *, reason: str | None = None, conn: Conn | None = None
    ) -> bool:
        """Stop every worker from starting jobs of `queue` until `resume_queue`; True if it was
        not paused already (a second pause keeps the first one's time and reason).

        The claim reads the pause: once this commits (with `conn`, when its transaction does),
        no worker starts a job of the queue. Its jobs stay `available` and nothing is written
        while they wait; running jobs finish, and their retries wait too. A deadline still
        fails a job that waits past it. `reason` (at most 512 characters) is shown by
        `sweepq queues list`, `sweepq top` and the dashboard.
        """
        return await _queues.pause(self.db, queue, reason, conn)

    async def resume_queue(self, queue: str, *, conn: Conn | None = None) -> bool:
        """Let workers start jobs of a paused `queue` again (they are woken at once); True if
        it was paused."""
        return await _queues.resume(self.db, queue, conn)

    async def queues(self, *, conn: Conn | None = None) -> list[QueueState]:
        """Every queue with live jobs or a pause: its due, scheduled and running jobs, how long
        the oldest due one has waited, and its pause if it is paused; by name."""
        return await _queues.states(self.db, conn)

    async def prune(
        self,
        *,
        older_than: timedelta = timedelta(days=7),
        batch_size: int = PRUNE_BATCH,
        conn: Conn | None = None,
    ) -> dict[str, int]:
        """Delete history older than `older_than`, in batches; returns rows removed per table.

        Terminal jobs are removed by `finished_at`; concurrency keys that carry no limit and
        no jobs are removed too. Live jobs keep only a bounded history (their last ten errors).
        """
        return await self.job_ops.prune(older_than, batch_size, conn)

    async def rescue_lapsed(
        self, *, limit: int = 1_000, grace_seconds: float = 30.0, conn: Conn | None = None
    ) -> int:
        """Return running jobs whose lease lapsed to `available` (or fail them); the count.

        Leases that lapsed while the server was down are not evidence that their workers died:
        nothing is rescued in the first `grace_seconds` after the server started, so that live
        workers reconnect and renew them first. A lease whose worker has no connection open any
        more counts a crash against its job, and a job whose worker died twice fails
        `worker_died` (the workers guide, "Jobs that kill their worker"). Each rescue is logged
        (logger `sweepq.worker`, WARNING) with the jobs it took back from which worker.
        """
        return await self.job_ops.rescue_lapsed(limit, grace_seconds, conn)

    async def expire_deadlines(self, *, limit: int = 1_000, conn: Conn | None = None) -> int:
        """Fail available jobs whose deadline passed; the count."""
        return await self.job_ops.expire_deadlines(limit, conn)
