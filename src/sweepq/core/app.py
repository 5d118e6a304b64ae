"""`App`: the pool, the task registry, and the queue operations clients call."""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import (
    Any,
    ClassVar,
    Concatenate,
    Literal,
    ParamSpec,
    Self,
    TypeVar,
    Unpack,
    overload,
)

import anyio
import asyncpg
import msgspec

from . import checks, groups, results, waiters
from . import enqueue as _enqueue
from . import options as _options
from .cron import CronSchedule, make_schedule
from .dsn import redact, resolve_dsn
from .enqueue import JobSpec as JobSpec  # re-exported: sweepq.JobSpec
from .errors import (
    ConfigurationError,
    DatabaseUnavailableError,
    InvalidJobOptionError,
    SchemaNotMigratedError,
    UnknownTaskError,
)
from .events import Observer
from .ident import ident, schema_name
from .jobs import Enqueued, GroupClosure, GroupCounts, GroupProgress, Job, JobState, JobWait
from .lane import Lane
from .layers import Layer
from .logs import log_rescued
from .migrate import Migration, discover, migrate
from .options import JobOptions
from .outage import unavailable_as_error
from .queries import ConcurrencyKey, Conn, CronRow, Queries
from .ratelimit import spacing_seconds
from .retention import prune
from .retry import RetryPolicy
from .tasks import DEFAULT_MAX_ATTEMPTS, Handler, Task

P = ParamSpec("P")
T = TypeVar("T")
L = TypeVar("L")
_GROUP_BATCH = 1_000
DEFAULT_SCHEMA = "sweepq"
# What sweepq's own statements raise on a schema that lacks a table, column or function.
_UNMIGRATED = (
    asyncpg.UndefinedTableError,
    asyncpg.InvalidSchemaNameError,
    asyncpg.UndefinedColumnError,
    asyncpg.UndefinedFunctionError,
)

# Set while a pool connection serves sweepq's own statements (which leave no session state), so
# that releasing it skips the reset query; any other use of the pool gets the full reset.
_OWN_USE: contextvars.ContextVar[bool] = contextvars.ContextVar("sweepq_own_use", default=False)


async def _reset_unless_internal(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    if not _OWN_USE.get():
        await conn.execute(conn.get_reset_query())


async def _no_reset(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    return None


async def _close(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    """Close a connection of our own, or drop it if it is broken or slow to close."""
    try:
        with anyio.fail_after(5):
            await conn.close()
    except Exception:
        conn.terminate()


class App:
    """A sweepq application: where jobs live (a DSN and a schema) and the tasks that run them.

    Nothing connects until the app is entered (`async with app:`) or `open()`ed.

    Args:
        dsn: a PostgreSQL URL; `None` reads SWEEPQ_DSN, then DATABASE_URL.
        schema: the schema holding sweepq's tables (validated identifier); `None` reads
            SWEEPQ_SCHEMA, else `sweepq`.
        pool_min_size: connections the pool keeps open.
        pool_max_size: most connections the pool opens; with two or more, one of them is kept
            for sweepq's own short statements (enqueue, get_job, ...) while the app is open.
        retry: the `RetryPolicy` of tasks that do not set their own.
        result_max_bytes: the largest result (a handler's return value, as JSON) a job keeps;
            a larger one fails the execution (`InvalidResultError`). `None` reads
            SWEEPQ_RESULT_MAX_BYTES, else 65,536 (64 KiB); at most 16 MiB.

    Attributes:
        schema: the schema holding sweepq's tables.
        tasks: the registered tasks by name.
        crons: the registered cron schedules by name.
        result_max_bytes: the largest result a job keeps, in bytes of JSON.

    Raises:
        InvalidIdentifierError: a schema name that is not a plain identifier.
        ConfigurationError: pool sizes that do not satisfy 1 <= min <= max, or a
            `result_max_bytes` out of range.

    Example:
        >>> app = sweepq.App(dsn="postgresql://localhost/app")  # doctest: +SKIP
        >>> @app.task(queue="email")
        ... async def send_email(ctx: sweepq.Context, to: str) -> None: ...
        >>> async with app:
        ...     await app.migrate()
        ...     await app.enqueue(send_email, {"to": "a@example.com"})
    """

    # The layers every app of this class gets (a subclass names its own; see core/layers.py).
    layer_kinds: ClassVar[tuple[Callable[[App], Layer], ...]] = ()

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
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigurationError(f"retry must be a sweepq.RetryPolicy, got {retry!r}")
        # The retry policy of tasks registered without their own.
        self.retry_policy = retry
        if schema is None:
            schema = os.environ.get("SWEEPQ_SCHEMA", "").strip() or DEFAULT_SCHEMA
            schema_name(schema, what="schema name (from SWEEPQ_SCHEMA)")
        schema_name(schema)
        if not 1 <= pool_min_size <= pool_max_size:
            raise ConfigurationError("need 1 <= pool_min_size <= pool_max_size")
        self._dsn = dsn
        self.schema = schema
        self.queries = Queries(schema)
        self.tasks: dict[str, Task] = {}
        self._pool_sizes = (pool_min_size, pool_max_size)
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None
        self._lane: Lane | None = None
        self._where = ""  # the redacted DSN, named by errors (set when the pool opens)
        self._layers: list[Layer] = []
        self.crons: dict[str, CronSchedule] = {}
        # Told of jobs claimed, started and finished, and of sweep links and runs (events.py).
        self.observers: tuple[Observer, ...] = ()
        # The caller's trace context (a W3C traceparent) for the jobs it enqueues, which a
        # tracing integration sets (sweepq.contrib.otel); None: jobs carry none.
        self.trace_context_source: Callable[[], str | None] | None = None
        for make in self.layer_kinds:
            self.add_layer(make(self))

    def __repr__(self) -> str:
        return f"<App schema={self.schema!r} tasks={len(self.tasks)}>"

    # lifecycle ----------------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """The DSN this app connects to (resolved from the environment if not given)."""
        return resolve_dsn(self._dsn)

    @property
    def display_dsn(self) -> str:
        """The DSN with its password hidden, for logs and output."""
        return redact(self.dsn)

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
        if self._pool is not None:
            raise ConfigurationError("configure() an app before opening it")
        if dsn is not None:
            self._dsn = dsn
        if schema is not None and schema != self.schema:
            schema_name(schema)
            self.schema = schema
            self.queries = Queries(schema)
            for layer in self._layers:
                layer.schema_changed()

    async def open(self) -> None:
        """Open the connection pool (idempotent)."""
        if self._pool is None:
            self._where = self.display_dsn
            self._pool = await self.create_pool(*self._pool_sizes)
            # A pool of one connection has none to spare for the lane.
            self._lane = Lane(self._pool) if self._pool_sizes[1] >= 2 else None

    async def close(self) -> None:
        """Close the pool, waiting for connections in use to be released."""
        lane, self._lane = self._lane, None
        if lane is not None:
            await lane.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

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
        async with unavailable_as_error(self.display_dsn):
            return await asyncpg.create_pool(
                self.dsn,
                min_size=min_size,
                max_size=max_size,
                # JIT compiles plans for the claim's small index scans at a large, pointless cost.
                server_settings={"application_name": "sweepq", "jit": "off", **(settings or {})},
                reset=_no_reset if internal else _reset_unless_internal,
            )

    @property
    def pool(self) -> asyncpg.Pool[asyncpg.Record]:
        """The open connection pool (for your own statements on sweepq's database).

        Raises:
            ConfigurationError: the app is not open.
        """
        if self._pool is None:
            raise ConfigurationError(
                "the app is not open: use `async with app:` (or `await app.open()`) first"
            )
        return self._pool

    @contextlib.asynccontextmanager
    async def connection(self, conn: Conn | None = None) -> AsyncIterator[Conn]:
        """`conn` if given, else a connection from the pool for the duration of the block."""
        if conn is not None:
            yield conn
            return
        async with self.pool.acquire() as acquired:
            yield acquired

    @contextlib.asynccontextmanager
    async def _own_connection(self, conn: Conn | None = None) -> AsyncIterator[Conn]:
        """Like `connection`, for sweepq's own statements: released without a session reset.

        Connection failures of a connection acquired here raise `DatabaseUnavailableError`.
        """
        if conn is not None:
            try:
                yield conn
            except _UNMIGRATED:
                await self._raise_if_unmigrated()
                raise
            return
        token = _OWN_USE.set(True)
        try:
            lane = self._lane
            acquire = self.pool.acquire() if lane is None else lane.connection()
            async with unavailable_as_error(self._where), acquire as acquired:
                yield acquired
        except _UNMIGRATED as exc:
            # Released by now: the check below takes a connection of its own.
            await self._raise_if_unmigrated()
            raise exc from None
        finally:
            _OWN_USE.reset(token)

    async def _query(
        self,
        conn: Conn | None,
        statement: Callable[Concatenate[Conn, P], Awaitable[T]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Run one statement wrapper on `conn`, or on a connection of the pool."""
        async with self._own_connection(conn) as c:
            return await statement(c, *args, **kwargs)

    # schema -------------------------------------------------------------------------------

    def layer(self, kind: type[L]) -> L:
        """The layer of this kind added to the app."""
        for layer in self._layers:
            if isinstance(layer, kind):
                return layer
        raise ConfigurationError(f"no {kind.__name__} is added to this app")

    async def maintain_layers(self) -> None:
        """The maintenance leader's round for each layer (`Layer.maintain`)."""
        for layer in self._layers:
            await layer.maintain()

    def add_layer(self, layer: Layer) -> None:
        """Plug a layer built on the core into this app: its migrations (applied after the
        core's), its retention (run by `prune`) and its kinds of cron schedule."""
        if any(known.component == layer.component for known in self._layers):
            raise ConfigurationError(f"a layer {layer.component!r} is already added")
        self._layers.append(layer)

    def _reserved_from(self, layer: Layer | None) -> list[tuple[str, str]]:
        """The names kept by the layers, but `layer`'s own, which its jobs may use."""
        return [r for other in self._layers if other is not layer for r in other.reserved]

    def migrations(self) -> list[Migration]:
        """Every migration this app knows: the core's, then each layer's, in order."""
        found = discover("core", "sweepq.core.migrations", self.schema)
        for layer in self._layers:
            found.extend(discover(layer.component, layer.migrations, self.schema))
        return found

    async def check_migrated(self) -> None:
        """Make sure the schema exists and has every migration this sweepq knows (a worker
        checks this as it starts).

        Raises:
            SchemaNotMigratedError: it does not, naming the migrations pending and the fix.
        """
        pending = await self.migrate(dry_run=True)
        if pending:
            raise SchemaNotMigratedError(self.schema, self._where or self.display_dsn, pending)

    async def _raise_if_unmigrated(self) -> None:
        """After a statement met a missing table, column or function: say so clearly if the
        schema lacks migrations (else the caller re-raises what the statement raised)."""
        with contextlib.suppress(asyncpg.PostgresError, OSError, DatabaseUnavailableError):
            await self.check_migrated()

    async def migrate(self, *, dry_run: bool = False) -> list[str]:
        """Create or upgrade sweepq's tables; safe to run from many processes at once.

        Args:
            dry_run: only report what would be applied.

        Returns:
            The labels of the migrations applied (or pending, when dry).
        """
        async with self.connection() as conn:
            done = await migrate(conn, self.schema, self.migrations(), dry_run=dry_run)
        return [m.label for m in done]

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
            task_name = name or f"{handler.__module__}.{handler.__qualname__}"
            task = Task(
                handler, name=task_name, queue=queue, max_attempts=max_attempts,
                priority=priority, timeout=timeout, retry=retry,
            )  # fmt: skip
            self.add_task(task)
            return task

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
        if not callable(observer):
            raise ConfigurationError(
                f"an observer must be a function of one event, not {observer!r}"
            )
        self.observers = (*self.observers, observer)
        return observer

    def unobserve(self, observer: Observer) -> None:
        """Stop telling `observer` (nothing happens if it was not registered)."""
        self.observers = tuple(o for o in self.observers if o != observer)

    def add_task(self, task: Task) -> None:
        """Register an existing `Task` (e.g. one built by a layer on top of the core)."""
        from .errors import DuplicateTaskError

        existing = self.tasks.get(task.name)
        if existing is not None and existing.fn is not task.fn:
            raise DuplicateTaskError(task.name)
        self.tasks[task.name] = task

    def get_task(self, task: Task | str) -> Task:
        """The registered task for a task object or name."""
        name = task.name if isinstance(task, Task) else task
        found = self.tasks.get(name) if isinstance(name, str) else None
        if found is None:
            raise UnknownTaskError(str(name), self.tasks)
        return found

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
        if target:
            if task is not None or args is not None:
                raise InvalidJobOptionError(
                    f"cron {name!r} takes a task (and args) or {', '.join(target)}, not both"
                )
            task, args = self._cron_target(name, target)
        elif task is None:
            raise InvalidJobOptionError(f"cron {name!r} needs a task to enqueue on each tick")
        schedule = make_schedule(
            name, expression, self.get_task(task), args, overlap=overlap, queue=queue, tz=tz
        )
        if name in self.crons and self.crons[name] != schedule:
            raise InvalidJobOptionError(f"a cron schedule named {name!r} is already registered")
        self.crons[name] = schedule
        return schedule

    def _cron_target(self, name: str, target: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        for layer in self._layers:
            found = layer.cron_target(target)
            if found is not None:
                return found
        raise InvalidJobOptionError(
            f"cron {name!r}: no task, and nothing that can schedule {', '.join(target)}"
        )

    async def cron_schedules(self, *, conn: Conn | None = None) -> list[CronRow]:
        """The schedules known to the database, with their next tick and last outcome."""
        return await self._query(conn, self.queries.runtime.cron_list)

    async def rate_limit(self, key: str, *, per_second: float, burst: int = 1) -> float:
        """Wait for a grant of `key` (shared by all workers); see `Context.rate_limit`."""
        spacing = spacing_seconds(key, per_second=per_second, burst=burst)
        wait = await self._query(None, self.queries.runtime.rate_limit_reserve, key, spacing, burst)
        if wait > 0:
            await anyio.sleep(wait)
        return wait

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
        if options:
            _options.check_names(options)
        source = self.trace_context_source
        row, window = _enqueue.build_row(
            self.get_task(task),
            args,
            options,
            source() if source is not None else None,
            self._reserved_from(on_behalf_of),
        )
        rows = _enqueue.Rows([row], [window])
        if window is None and rows.plain():
            async with self._own_connection(conn) as c:
                return await _enqueue.insert_one(self.queries, c, row)
        return (await self._insert(rows, conn))[0]

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
        specs = _enqueue.job_specs(specs)
        if on_duplicate not in ("report", "raise"):
            raise InvalidJobOptionError(
                f"on_duplicate must be 'report' or 'raise', got {on_duplicate!r}"
            )
        if not specs:
            return []
        rows = _enqueue.build_rows(
            specs, self.get_task, self.trace_context_source, self._reserved_from(on_behalf_of)
        )
        return await self._insert(rows, conn, strict=on_duplicate == "raise")

    async def _insert(
        self, rows: _enqueue.Rows, conn: Conn | None, *, strict: bool = False
    ) -> list[Enqueued]:
        """Insert checked rows; in a transaction when they take several statements."""
        several = (
            strict
            or len(rows.plain()) >= _enqueue.COPY_MIN_ROWS
            or any(w is not None for w in rows.windows)
        )
        async with self._own_connection(conn) as c:
            if several and not c.is_in_transaction():
                async with c.transaction():
                    return await _enqueue.insert(self.queries, c, rows, strict=strict)
            return await _enqueue.insert(self.queries, c, rows, strict=strict)

    async def get_job(self, job_id: int, *, conn: Conn | None = None) -> Job | None:
        """The job with this id, or None if there is none (or it was pruned).

        A completed job's `result` is what its handler returned (read back from JSON).
        """
        return await self._query(conn, self.queries.job_get, checks.job_id(job_id))

    async def job_waits(
        self, job_ids: Sequence[int], *, conn: Conn | None = None
    ) -> dict[int, JobWait]:
        """Why each job waits, if it does: how long it has been due without a worker claiming it
        (and whether any job of its queue runs now), or how long until it is due and the newest
        entry of its history (a `Snooze` reason, say). Jobs that do not exist are left out.
        """
        ids = [checks.job_id(i) for i in job_ids]
        return await self._query(conn, self.queries.job_waits, ids)

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
        job_id = checks.job_id(job_id)
        seconds = checks.optional_seconds(timeout, "timeout", allow_zero=True)
        try:
            return await self._wait_for(job_id, seconds)
        except waiters.TimedOut as exc:
            raise TimeoutError(str(exc)) from None

    async def _wait_for(self, job_id: int, seconds: float | None) -> Job:
        where = self._where or self.display_dsn
        async with unavailable_as_error(where):
            conn = await asyncpg.connect(
                self.dsn,
                server_settings={
                    "application_name": "sweepq wait_for",
                    # The race argument of core/waiters.py reads committed rows, statement by
                    # statement, whatever the server's default.
                    "default_transaction_isolation": "read committed",
                },
            )
            try:
                return await waiters.wait(conn, self.queries, job_id, seconds, where=where)
            except _UNMIGRATED:
                pending = await migrate(conn, self.schema, self.migrations(), dry_run=True)
                if pending:
                    labels = [m.label for m in pending]
                    raise SchemaNotMigratedError(self.schema, where, labels) from None
                raise
            finally:
                with anyio.CancelScope(shield=True):
                    await _close(conn)

    async def cancel(
        self, job_id: int, *, reason: str = "cancelled", conn: Conn | None = None
    ) -> Job | None:
        """Cancel an available or running job (a running one's worker is fenced out).

        Returns the job after the call (unchanged if it was already terminal), or None.
        """
        job_id, reason = checks.job_id(job_id), checks.reason(reason)
        async with self._own_connection(conn) as c:
            _, sealed = await self.queries.job_cancel(c, job_id, None, running=True, reason=reason)
            await groups.fire_now(self.queries, c, sealed)
        return await self.get_job(job_id, conn=conn)

    async def retry(self, job_id: int, *, conn: Conn | None = None) -> Job | None:
        """Run a terminal job again now, with a fresh attempt budget; an available job runs now.

        Returns the job after the call (unchanged if it is running), or None.
        """
        job_id = checks.job_id(job_id)
        try:
            await self._query(conn, self.queries.job_retry, job_id)
        except asyncpg.UniqueViolationError:
            raise InvalidJobOptionError(
                f"job {job_id} cannot be retried: another active job holds its identity_key"
            ) from None
        return await self.get_job(job_id, conn=conn)

    # groups -------------------------------------------------------------------------------

    async def group_counts(self, group: str, *, conn: Conn | None = None) -> GroupCounts:
        """The jobs enqueued with `group=group`, per state (their `outstanding` and `total`).

        Reads the group's entries of an index, never the rest of the jobs table. Jobs that
        retention removed are no longer counted.

        Example:
            >>> await app.enqueue_many([sweepq.JobSpec(t, a, group="import-42") for a in rows])
            >>> (await app.group_counts("import-42")).outstanding  # 0 once all are done
        """
        group = checks.text(group, "group")
        return await self._query(conn, self.queries.job_group_counts, group)

    async def group_outstanding(
        self, groups: Sequence[str], *, conn: Conn | None = None
    ) -> dict[str, int]:
        """How many jobs of each group are not finished yet (available or running).

        Costs the outstanding jobs only, however many of a group's jobs have finished.
        """
        names = [checks.text(g, "group") for g in groups]
        return await self._query(conn, self.queries.job_group_outstanding, names)

    async def group_progress(
        self, groups: Sequence[str], *, conn: Conn | None = None
    ) -> dict[str, GroupProgress]:
        """Each group's jobs not finished yet: due, waiting (for a retry, a snooze, their run_at)
        and running, and its failed and cancelled jobs. Costs those jobs only: never the
        group's completed ones."""
        names = [checks.text(g, "group") for g in groups]
        return await self._query(conn, self.queries.job_group_progress, names)

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
        group = checks.text(group, "group")
        state = checks.job_state(state)
        limit = checks.int_in(limit, "limit", range(1, 100_001))
        before = None if before is None else checks.job_id(before)
        return await self._query(conn, self.queries.job_group_list, group, state, limit, before)

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
        group, reason = checks.text(group, "group"), checks.reason(reason)
        async with self._own_connection(conn) as c:
            cancelled, sealed = await self.queries.job_cancel(
                c, None, group, running=include_running, reason=reason
            )
            await groups.fire_now(self.queries, c, sealed)
        return cancelled

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
        group = checks.text(group, "group")
        reserved = self._reserved_from(on_behalf_of)
        _options.check_reserved("group", group, reserved)
        spec = then_group = None
        if then is not None:
            if not isinstance(then, JobSpec):
                raise InvalidJobOptionError(
                    f"then must be a sweepq.JobSpec(task, args, ...), got {type(then).__name__}"
                )
            rows = _enqueue.build_rows([then], self.get_task, self.trace_context_source, reserved)
            if rows.get("group", 0) == group:
                raise InvalidJobOptionError(
                    f"then is in group {checks.show(group)}, the group it follows: a closed group "
                    "takes no job, so it could never be enqueued; leave its group out, or use "
                    "another"
                )
            spec, then_group = _enqueue.encode_spec(rows, 0), rows.get("group", 0)
        async with self._own_connection(conn) as c:
            return await groups.close(self.queries, c, group, spec, then_group)

    async def reopen_group(
        self, group: str, *, conn: Conn | None = None, on_behalf_of: Layer | None = None
    ) -> bool:
        """Let a closed group take jobs again; its closure is forgotten (a `then` that has not
        fired yet is dropped). Closing it again later enqueues that close's `then` once more,
        when the group has ended again (the sweeps do this when a finished run runs again).

        Returns whether the group was closed. `on_behalf_of` is as for `close_group`.
        """
        group = checks.text(group, "group")
        _options.check_reserved("group", group, self._reserved_from(on_behalf_of))
        return await self._query(conn, self.queries.job_group_reopen, group)

    async def fire_closed_groups(self, *, limit: int = 1_000, conn: Conn | None = None) -> int:
        """Enqueue the `then` of every closed group that has ended and has not fired yet;
        returns how many fired.

        The workers' maintenance leader calls this every round, which catches every way a
        group can end (a job failed by a rescue or a deadline, a worker killed after recording
        its last job): call it yourself only where no worker runs. Rows another transaction
        holds are skipped (it fires them, or the next call does); `limit` rows are locked at a
        time.
        """
        limit = checks.int_in(limit, "limit", range(1, 100_001))
        async with self._own_connection(conn) as c:
            return await groups.fire_waiting(self.queries, c, limit)

    async def retry_group_failures(
        self, group: str, *, include_cancelled: bool = False, conn: Conn | None = None
    ) -> int:
        """Run the group's failed jobs again (and its cancelled ones with `include_cancelled`),
        each with a fresh attempt budget (as `retry`).

        A job whose `identity_key` another active job holds is left as it is. Returns how many
        jobs were retried; they run in batches of 1,000 per statement.
        """
        group = checks.text(group, "group")
        states = ["failed", "cancelled"] if include_cancelled else ["failed"]
        retried = 0
        async with self._own_connection(conn) as c:
            while n := await self.queries.job_group_retry_failed(c, group, _GROUP_BATCH, states):
                retried += n
                if n < _GROUP_BATCH:
                    break
        return retried

    async def set_concurrency_limit(
        self, key: str, limit: int | None, *, conn: Conn | None = None
    ) -> None:
        """Let at most `limit` jobs with `concurrency_key=key` run at once (None: no limit).

        Jobs waiting on a full key stay `available`; nothing is written while they wait.
        """
        key, limit = checks.concurrency_limit(key, limit)
        await self._query(conn, self.queries.concurrency_key_set_limit, key, limit)

    async def concurrency_keys(self, *, conn: Conn | None = None) -> list[ConcurrencyKey]:
        """Every concurrency key with its limit, running and waiting counts."""
        return await self._query(conn, self.queries.concurrency_key_list)

    async def prune(
        self,
        *,
        older_than: timedelta = timedelta(days=7),
        batch_size: int = 5_000,
        conn: Conn | None = None,
    ) -> dict[str, int]:
        """Delete history older than `older_than`, in batches; returns rows removed per table.

        Terminal jobs are removed by `finished_at`; concurrency keys that carry no limit and
        no jobs are removed too. Live jobs keep only a bounded history (their last ten errors).
        """
        age, batch_size = checks.retention(older_than, batch_size)
        async with self._own_connection(conn) as c:
            removed = await prune(self.queries, c, age, batch_size)
            for layer in self._layers:
                removed |= await layer.prune(c, age, batch_size)
        return removed

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
        rescued = await self._query(conn, self.queries.job_rescue, limit, grace_seconds)
        log_rescued(rescued)
        if any(r.state == "failed" for r in rescued):
            await self.fire_closed_groups(conn=conn)  # a closed group may have ended
        return len(rescued)

    async def expire_deadlines(self, *, limit: int = 1_000, conn: Conn | None = None) -> int:
        """Fail available jobs whose deadline passed; the count."""
        expired = await self._query(conn, self.queries.job_expire_deadlines, limit)
        if expired:
            await self.fire_closed_groups(conn=conn)  # a closed group may have ended
        return expired
