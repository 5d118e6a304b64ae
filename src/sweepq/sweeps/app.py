"""`App` with sweeps: the core app plus registering sweeps, starting and steering their runs."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, TypeVar

from ..core.context import Context
from ..core.errors import InvalidJobOptionError
from ..core.queries import Conn
from ..core.queue import Queue
from ..core.queues import pauses
from ..core.retry import RetryPolicy
from ..core.tasks import Task
from . import control, ending
from .done import make_done_task
from .errors import InvalidSweepError
from .layer import SweepsLayer
from .leaf import make_leaf_task
from .link import make_link_task
from .naming import leaf_group, link_priority, own_task, start_task_name
from .runs import SweepFailure, SweepRun, SweepStarted, run_from_row
from .sweep import Sweep

S = TypeVar("S", bound=type[Sweep])


class App(Queue):
    """A sweepq application with sweeps (this is `sweepq.App`).

    Everything the core's app (`Queue`) does, plus: register `Sweep` classes, start runs of
    them (one active run per sweep and params), read their progress, and pause, resume or
    cancel them.
    `migrate()` also creates the sweeps tables (runs and their progress).

    Nothing connects until the app is entered (`async with app:`) or `open()`ed.

    Args:
        dsn: a PostgreSQL URL; `None` reads SWEEPQ_DSN, then DATABASE_URL (when the app opens).
        schema: the schema holding sweepq's tables (a plain identifier); `None` reads
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
        tasks: the registered tasks by name (a sweep's internal tasks included).
        crons: the registered cron schedules by name.
        result_max_bytes: the largest result a job keeps, in bytes of JSON.
        sweeps_layer: the sweeps' state on this app (`SweepsLayer`), the core's layer; the
            testing kit steps runs through it.

    Raises:
        InvalidIdentifierError: a schema name that is not a plain identifier.
        ConfigurationError: pool sizes that do not satisfy 1 <= min <= max, or a
            `result_max_bytes` out of range.

    Example:
        >>> app = sweepq.App(dsn="postgresql://localhost/app")  # doctest: +SKIP
        >>> app.register_sweep(BackfillAvatars)
        >>> async with app:
        ...     started = await app.start_sweep("backfill-avatars")
        ...     run = await app.sweep_status(started.run_id)
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
        super().__init__(
            dsn, schema=schema, pool_min_size=pool_min_size, pool_max_size=pool_max_size,
            retry=retry, result_max_bytes=result_max_bytes,
        )  # fmt: skip
        # The sweeps plug into the core as its layer (core/layers.py): their migrations,
        # retention, cron targets, maintenance round and part in `retry`.
        self.sweeps_layer = SweepsLayer(
            self, maintenance=ending.fail_orphaned_runs, retry=control.retry_item
        )
        self.add_layer(self.sweeps_layer)

    # registry -----------------------------------------------------------------------------

    def register_sweep(self, cls: S) -> S:
        """Register a `Sweep` (or `TableSweep`) class; returns it, so it works as a decorator.

        Registers the sweep's internal tasks on its queue, `sweepq.sweep.<name>.link`,
        `.leaf`, `.start` (what a cron tick enqueues) and `.done` (what calls `on_complete`):
        a worker of that queue runs the sweep.

        Raises:
            InvalidSweepError: settings that cannot work, or another class under that name.
        """
        if not isinstance(cls, type) or not issubclass(cls, Sweep):
            raise InvalidSweepError(f"register_sweep takes a Sweep subclass, got {cls!r}")
        cls.check_class()
        existing = self.sweeps_layer.sweeps.get(cls.name)
        if existing is cls:
            return cls
        if existing is not None:
            raise InvalidSweepError(
                f"a sweep named {cls.name!r} is already registered ({existing.__qualname__}); "
                "give each Sweep class its own name"
            )
        layer = self.sweeps_layer
        tasks = (
            make_link_task(layer, cls),
            make_leaf_task(layer, cls),
            _starter(layer, cls),
            make_done_task(layer, cls),
        )
        for task in tasks:
            if task.name in self.tasks:
                raise InvalidSweepError(f"a task named {task.name!r} is already registered")
        for task in tasks:
            self.add_task(task)
        layer.sweeps[cls.name] = cls
        return cls

    def get_sweep(self, name: str) -> type[Sweep]:
        """The registered sweep class of this name."""
        return self.sweeps_layer.get(name)

    @property
    def sweeps(self) -> Mapping[str, type[Sweep]]:
        """The registered sweep classes by name."""
        return self.sweeps_layer.sweeps

    # runs ---------------------------------------------------------------------------------

    async def start_sweep(
        self, name: str, params: Mapping[str, Any] | None = None, *, conn: Conn | None = None
    ) -> SweepStarted:
        """Start a run of a sweep unless one with the same params is active.

        The run row and its first link are written in one transaction; a worker of the sweep's
        queue does the rest. A TableSweep's table, columns and key are checked first.

        Args:
            name: the registered sweep's name.
            params: a dict of JSON values, given to the sweep as `self.params`; runs with
                different params are different runs.
            conn: start inside the caller's transaction.

        Returns:
            `SweepStarted(run_id, outcome)`: outcome is `started`, or `already_running` with
            the id of the active run.

        Raises:
            UnknownSweepError: no sweep of that name is registered.
            InvalidSweepError: params that are not JSON values, or (for a `TableSweep`) a
                table, column or key that does not exist or cannot carry a cursor.
        """
        return await control.start_run(self.sweeps_layer, self.get_sweep(name), params, conn)

    async def sweep_status(self, run_id: int, *, conn: Conn | None = None) -> SweepRun | None:
        """The run with its progress (counters, cursor, rate, ETA), or None if there is none.

        One indexed read of the run row, of its leaves that are not completed (through the
        index of its job group) and of its link job: no scan of the jobs.
        """
        runs = await self._runs(conn, 1, False, None, run_id)
        return runs[0] if runs else None

    async def list_sweep_runs(
        self,
        limit: int = 20,
        active_only: bool = False,
        *,
        sweep: str | None = None,
        conn: Conn | None = None,
    ) -> list[SweepRun]:
        """The newest runs first (only running and paused ones with `active_only`).

        Args:
            limit: how many runs at most.
            active_only: only runs that are running or paused.
            sweep: only runs of this sweep.
        """
        if not isinstance(limit, int) or limit < 1:
            raise InvalidJobOptionError(f"limit must be an int >= 1, got {limit!r}")
        return await self._runs(conn, limit, active_only, sweep, None)

    async def _runs(
        self,
        conn: Conn | None,
        limit: int,
        active_only: bool,
        sweep: str | None,
        run_id: int | None,
    ) -> list[SweepRun]:
        """Runs with their live counters: the run rows, and the active runs' leaves outstanding,
        read in one snapshot (a link's commit moves both at once: items done never go down)."""
        async with contextlib.AsyncExitStack() as stack:
            c = await stack.enter_async_context(self.connection(conn))
            if conn is None:
                await stack.enter_async_context(
                    c.transaction(isolation="repeatable_read", readonly=True)
                )
            rows = await self.sweeps_layer.queries.sweep_run_list(
                c, limit, active_only, sweep, run_id
            )
            active = [r for r in rows if r.finished_at is None]
            groups = [leaf_group(r.id) for r in active]
            live = await self.group_progress(groups, conn=c) if groups else {}
            links = [r.link_job for r in active if r.state == "running" and r.link_job]
            waits = await self.job_waits(links, conn=c) if links else {}
            paused = {p.queue for p in await pauses(self.queries, c)} if active else set()
        return [
            run_from_row(
                r,
                live.get(leaf_group(r.id)),
                waits.get(r.link_job) if r.link_job else None,
                queue_paused=r.queue in paused,
            )
            for r in rows
        ]

    async def pause_sweep(self, run_id: int, *, conn: Conn | None = None) -> SweepRun | None:
        """Stop the walk of a running run; leaves already enqueued still run.

        Returns the run after the call (unchanged unless it was running), or None.
        """
        await control.pause_run(self.sweeps_layer, run_id, conn)
        return await self.sweep_status(run_id, conn=conn)

    async def resume_sweep(self, run_id: int, *, conn: Conn | None = None) -> SweepRun | None:
        """Continue a paused, failed or cancelled run from its committed cursor.

        A run that ended (failed or cancelled) runs again: its failed and cancelled items run
        again, each with a fresh attempt budget, its walk goes on from its cursor (unless it had
        reached the end), with its counters and a fresh failure budget. No item that completed
        runs again. Returns the run after the call (unchanged if it was running or completed),
        or None.

        Raises:
            SweepError: another run of the same sweep and params is active.
        """
        await control.resume_run(self.sweeps_layer, run_id, conn)
        return await self.sweep_status(run_id, conn=conn)

    async def cancel_sweep(self, run_id: int, *, conn: Conn | None = None) -> SweepRun | None:
        """End a running or paused run as cancelled and cancel its outstanding leaves.

        A leaf running at that moment finishes its handler, but its outcome is not recorded:
        the run's final counters are exact. Returns the run after the call, or None.
        """
        await ending.end_run(self.sweeps_layer, run_id, "cancelled", conn=conn)
        return await self.sweep_status(run_id, conn=conn)

    async def sweep_failures(self, run_id: int, *, limit: int = 100) -> list[SweepFailure]:
        """The run's undone items, newest first: those that failed for good and those that
        were cancelled (`state` says which), each with its key, its leaf job, its attempts
        and its last error.

        Example:
            >>> for failure in await app.sweep_failures(run_id, limit=10):
            ...     print(failure.key, failure.error.splitlines()[-1])
        """
        return await control.failures(self.sweeps_layer, run_id, limit)

    async def retry_sweep_failures(self, run_id: int, *, conn: Conn | None = None) -> int:
        """Run the run's failed and cancelled items again (after a fix), with no new pass over
        the others.

        Each of those leaves gets a fresh attempt budget. A run that has ended runs again until
        they are done, then ends with its counters recounted: `completed` if its walk had
        reached the end and every item is now completed (a run whose walk stopped goes on
        with `resume_sweep`). Returns how many items were retried.

        Raises:
            SweepError: another run of the same sweep and params is active.
        """
        return await control.retry_failures(self.sweeps_layer, run_id, conn)


def _starter(layer: SweepsLayer, cls: type[Sweep]) -> Task:
    """The internal task that starts a run of `cls` (unless one is active): what a cron
    schedule of the sweep enqueues on each tick."""

    async def start(ctx: Context, params: dict[str, Any]) -> None:
        await control.start_run(layer, cls, params, None)

    return own_task(
        cls, start, start_task_name(cls.name), max_attempts=5, priority=link_priority(cls)
    )
