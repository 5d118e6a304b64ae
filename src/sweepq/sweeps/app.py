"""`App` with sweeps: the core app plus registering sweeps, starting and steering their runs."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, TypeVar

import msgspec

from ..core.app import App as CoreApp
from ..core.context import Context
from ..core.cron import CronSchedule
from ..core.errors import InvalidJobOptionError
from ..core.queries import Conn
from ..core.tasks import Task
from . import control
from .errors import InvalidSweepError, UnknownSweepError
from .leaf import ProgressCounter, make_leaf_task
from .link import make_link_task
from .queries import RunHead, SweepQueries
from .runs import SweepRun, SweepStarted, run_from_row
from .sweep import Sweep

S = TypeVar("S", bound=type[Sweep])

_CACHED_RUNS = 256


class App(CoreApp):
    """A sweepq application with sweeps (this is `sweepq.App`).

    Everything the core `App` does, plus: register `Sweep` classes, start runs of them (one
    active run per sweep and params), read their progress, and pause, resume or cancel them.
    `migrate()` also creates the sweeps tables (runs and their progress).

    Args:
        dsn: a PostgreSQL URL; `None` reads SWEEPQ_DSN, then DATABASE_URL.
        schema: the schema holding sweepq's tables (validated identifier).
        pool_min_size: connections the pool keeps open.
        pool_max_size: most connections the pool opens.

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
        schema: str = "sweepq",
        pool_min_size: int = 1,
        pool_max_size: int = 10,
    ) -> None:
        super().__init__(
            dsn, schema=schema, pool_min_size=pool_min_size, pool_max_size=pool_max_size
        )
        self._migration_sources.append(("sweeps", "sweepq.sweeps.migrations"))
        self.sweep_queries = SweepQueries(schema)
        self.sweeps: dict[str, type[Sweep]] = {}
        self.sweep_progress = ProgressCounter(self)
        self._run_sweeps: OrderedDict[int, Sweep] = OrderedDict()

    # registry -----------------------------------------------------------------------------

    def register_sweep(self, cls: S) -> S:
        """Register a `Sweep` (or `TableSweep`) class; returns it, so it works as a decorator.

        Registers the sweep's internal tasks on its queue, `sweepq.sweep.<name>.link`,
        `.leaf` and `.start` (what a cron tick enqueues): a worker of that queue runs the sweep.

        Raises:
            InvalidSweepError: settings that cannot work, or another class under that name.
        """
        if not isinstance(cls, type) or not issubclass(cls, Sweep):
            raise InvalidSweepError(f"register_sweep takes a Sweep subclass, got {cls!r}")
        cls.check_class()
        existing = self.sweeps.get(cls.name)
        if existing is cls:
            return cls
        if existing is not None:
            raise InvalidSweepError(
                f"a sweep named {cls.name!r} is already registered ({existing.__qualname__}); "
                "give each Sweep class its own name"
            )
        link, leaf, start = make_link_task(self, cls), make_leaf_task(self, cls), self._starter(cls)
        for task in (link, leaf, start):
            if task.name in self.tasks:
                raise InvalidSweepError(f"a task named {task.name!r} is already registered")
        for task in (link, leaf, start):
            self.add_task(task)
        self.sweeps[cls.name] = cls
        return cls

    def get_sweep(self, name: str) -> type[Sweep]:
        """The registered sweep class of this name."""
        found = self.sweeps.get(name) if isinstance(name, str) else None
        if found is None:
            raise UnknownSweepError(str(name), self.sweeps)
        return found

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
            UnknownSweepError, InvalidSweepError.
        """
        return await control.start_run(self, self.get_sweep(name), params, conn)

    async def sweep_status(self, run_id: int, *, conn: Conn | None = None) -> SweepRun | None:
        """The run with its progress (counters, cursor, rate, ETA), or None if there is none.

        One indexed read of the run row and its 16 progress shards: no scan of the jobs.
        """
        rows = await self.sweep_queries.sweep_run_list(conn or self.pool, 1, False, None, run_id)
        return run_from_row(rows[0]) if rows else None

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
        rows = await self.sweep_queries.sweep_run_list(conn or self.pool, limit, active_only, sweep)
        return [run_from_row(r) for r in rows]

    async def pause_sweep(self, run_id: int, *, conn: Conn | None = None) -> SweepRun | None:
        """Stop the walk of a running run; leaves already enqueued still run.

        Returns the run after the call (unchanged unless it was running), or None.
        """
        await control.pause_run(self, run_id, conn)
        return await self.sweep_status(run_id, conn=conn)

    async def resume_sweep(self, run_id: int, *, conn: Conn | None = None) -> SweepRun | None:
        """Continue a paused run from its committed cursor.

        Returns the run after the call (unchanged unless it was paused), or None.
        """
        await control.resume_run(self, run_id, conn)
        return await self.sweep_status(run_id, conn=conn)

    async def cancel_sweep(self, run_id: int, *, conn: Conn | None = None) -> SweepRun | None:
        """End a running or paused run as cancelled and cancel its outstanding leaves.

        A leaf running at that moment finishes its handler, but its outcome is not recorded:
        the run's final counters are exact. Returns the run after the call, or None.
        """
        await control.end_run(self, run_id, "cancelled", conn=conn)
        return await self.sweep_status(run_id, conn=conn)

    # cron ---------------------------------------------------------------------------------

    def cron(
        self,
        name: str,
        expression: str,
        task: Task | str | None = None,
        args: dict[str, Any] | None = None,
        *,
        overlap: str = "skip",
        queue: str | None = None,
        sweep: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> CronSchedule:
        """Enqueue `task` on every tick of a cron `expression` (UTC), or start a sweep.

        With `sweep=`, each tick starts a run of that registered sweep with `params`, unless
        one is active: a tick while the previous run is still going starts nothing. Otherwise
        as the core's `cron`.

        Example:
            >>> app.cron("nightly-reindex", "0 3 * * *", sweep="reindex-documents")
        """
        if sweep is None:
            if task is None:
                raise InvalidJobOptionError("cron needs a task, or sweep=<name> to start a sweep")
            return super().cron(name, expression, task, args, overlap=overlap, queue=queue)
        if task is not None or args is not None:
            raise InvalidJobOptionError(
                "cron takes a task (and args) or sweep= (and params), not both"
            )
        cls = self.get_sweep(sweep)
        params_text, _ = control.encode_params(cls.name, params)
        return super().cron(
            name, expression, control.start_task_name(cls.name),
            {"params": msgspec.json.decode(params_text)}, overlap=overlap, queue=queue,
        )  # fmt: skip

    def _starter(self, cls: type[Sweep]) -> Task:
        """The internal task that starts a run of `cls` (unless one is active)."""

        async def start(ctx: Context, params: dict[str, Any]) -> None:
            await self.start_sweep(cls.name, params)

        start.__qualname__ = start.__name__ = f"sweep_start_{cls.__name__}"
        return Task(
            start,
            name=control.start_task_name(cls.name),
            queue=cls.queue,
            max_attempts=5,
            priority=min(cls.priority + 1, 32767),
        )

    # retention ----------------------------------------------------------------------------

    async def prune(
        self,
        *,
        older_than: timedelta = timedelta(days=7),
        batch_size: int = 5_000,
        conn: Conn | None = None,
    ) -> dict[str, int]:
        """Delete history older than `older_than`, in batches; returns rows removed per table.

        As the core's `prune`, and also sweep runs that ended before the cutoff, with any
        progress rows they kept (`sweep_runs`, `sweep_progress`).
        """
        removed = await super().prune(older_than=older_than, batch_size=batch_size, conn=conn)
        removed["sweep_runs"] = removed["sweep_progress"] = 0
        while True:
            runs, progress = await self.sweep_queries.sweep_run_prune(
                conn or self.pool, older_than.total_seconds(), batch_size
            )
            removed["sweep_runs"] += runs
            removed["sweep_progress"] += progress
            if runs < batch_size:
                break
        return removed

    # instances of sweeps per run (links and leaves) -----------------------------------------

    def sweep_for_head(self, cls: type[Sweep], head: RunHead) -> Sweep:
        """The sweep instance working for a run (one per run per process)."""
        sweep = self._run_sweeps.get(head.id)
        if sweep is None or type(sweep) is not cls:
            sweep = cls(head.params, run_id=head.id, app=self)
            self._run_sweeps[head.id] = sweep
            while len(self._run_sweeps) > _CACHED_RUNS:
                self._run_sweeps.popitem(last=False)
        else:
            self._run_sweeps.move_to_end(head.id)
        return sweep

    async def sweep_for_run(self, cls: type[Sweep], run_id: int) -> Sweep | None:
        """As `sweep_for_head`, reading the run once per process; None if it does not exist."""
        sweep = self._run_sweeps.get(run_id)
        if sweep is not None and type(sweep) is cls:
            return sweep
        head = await self.sweep_queries.sweep_run_head(self.pool, run_id)
        return None if head is None else self.sweep_for_head(cls, head)
