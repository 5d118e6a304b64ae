"""The sweeps layer's state on an app, and how it plugs into the core.

`SweepsLayer` holds what the sweeps need besides the core: their statements, the registered
`Sweep` classes, and one `Sweep` instance per run in this process. It is also the core's
`Layer`: the sweeps' migrations, their retention, and cron schedules that start a sweep
(`app.cron(..., sweep="name", params={...})`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import msgspec

from ..core import checks
from ..core.context import Context
from ..core.decision import NotRunnable
from ..core.jobs import Job
from ..core.layers import Retry
from ..core.queries import Conn
from ..core.queue import Queue
from ..core.tasks import Task
from .errors import UnknownSweepError
from .naming import done_task_name, encode_params, link_task_name, start_task_name
from .queries import RunHead, SweepQueries
from .sweep import Sweep

_CACHED_RUNS = 256
ORPHAN_CHECK_SECONDS = 10.0  # how often the leader looks for runs whose link ended unseen
LINK_MAX_ATTEMPTS = 10  # a link's own failures (its sweep's page() raising) before the run fails


class SweepsLayer:
    """The sweeps' state on one app (`sweepq.App` holds one)."""

    component = "sweeps"
    migrations = "sweepq.sweeps.migrations"
    # A run's leaves are its group and idempotency scope `sweep:<run>`; its links' scope is
    # `sweep-link:<run>` (naming.py). Sweeps migration 0005 writes the same into reserved_names.
    reserved = (
        ("group", "sweep:"),
        ("idempotency_scope", "sweep:"),
        ("idempotency_scope", "sweep-link:"),
    )

    def __init__(
        self,
        core: Queue,
        *,
        maintenance: Callable[[SweepsLayer], Awaitable[object]] | None = None,
        retry: Callable[[SweepsLayer, int, Conn | None, Retry], Awaitable[Job | None]]
        | None = None,
    ) -> None:
        self.core = core
        self._maintenance = maintenance
        self._retry = retry
        self.queries = SweepQueries(core.schema)
        self.sweeps: dict[str, type[Sweep]] = {}
        self._instances: OrderedDict[int, Sweep] = OrderedDict()
        self._next_orphan_check = 0.0

    async def maintain(self) -> None:
        """The maintenance leader's round: every `ORPHAN_CHECK_SECONDS`, the sweeps' own checks
        (`ending.fail_orphaned_runs`, handed in by the App)."""
        now = anyio.current_time()
        if self._maintenance is None or now < self._next_orphan_check:
            return
        self._next_orphan_check = now + ORPHAN_CHECK_SECONDS
        await self._maintenance(self)

    def schema_changed(self) -> None:
        """Follow the app to its new schema (`App.configure`), before it opens."""
        self.queries = SweepQueries(self.core.schema)
        self._instances.clear()

    def get(self, name: str) -> type[Sweep]:
        """The registered sweep class of this name."""
        found = self.sweeps.get(name) if isinstance(name, str) else None
        if found is None:
            raise UnknownSweepError(str(name), self.sweeps)
        return found

    def instance(
        self, cls: type[Sweep], params: Mapping[str, Any], run_id: int | None = None
    ) -> Sweep:
        """A new instance of `cls` for a run, wired to this app."""
        return cls(params, run_id=run_id, app=self.core, queries=self.queries)

    def link_task(self, head: RunHead) -> Task:
        """The link task of the run's sweep: the registered one, or, in a process that does not
        know the sweep (the CLI with a DSN alone), one that can only be enqueued, on the queue
        and at the priority the run recorded."""
        return self._task_of(head, link_task_name(head.sweep), _link_elsewhere, LINK_MAX_ATTEMPTS)

    def done_task(self, head: RunHead) -> Task:
        """The task whose job calls the sweep's on_complete, known here or not (as `link_task`;
        elsewhere its attempts are the default leaves')."""
        return self._task_of(head, done_task_name(head.sweep), _done_elsewhere, Sweep.max_attempts)

    def _task_of(
        self, head: RunHead, name: str, stand_in: Callable[..., Awaitable[None]], max_attempts: int
    ) -> Task:
        known = self.core.tasks.get(name)
        if known is not None:
            return known
        stub = Task(
            stand_in,
            name=name,
            queue=head.queue,
            max_attempts=max_attempts,
            priority=head.link_priority,
        )
        self.core.add_task(stub)
        return stub

    # one instance per run per process -------------------------------------------------------

    def for_head(self, cls: type[Sweep], head: RunHead) -> Sweep:
        """The sweep instance working for a run (one per run per process)."""
        sweep = self._instances.get(head.id)
        if sweep is None or type(sweep) is not cls:
            sweep = self.instance(cls, head.params, head.id)
            self._instances[head.id] = sweep
            while len(self._instances) > _CACHED_RUNS:
                self._instances.popitem(last=False)
        else:
            self._instances.move_to_end(head.id)
        return sweep

    def known(self, cls: type[Sweep], run_id: int) -> Sweep | None:
        """The run's instance of `cls` if this process has read the run already."""
        sweep = self._instances.get(run_id)
        return sweep if sweep is not None and type(sweep) is cls else None

    async def for_run(self, cls: type[Sweep], run_id: int) -> Sweep | None:
        """As `for_head`, reading the run once per process; None if it does not exist."""
        sweep = self.known(cls, run_id)
        if sweep is not None:
            return sweep
        head = await self.queries.sweep_run_head(self.core.pool, run_id)
        return None if head is None else self.for_head(cls, head)

    # the core's Layer -------------------------------------------------------------------------

    async def prune(self, conn: Conn, older_than: float, batch: int) -> dict[str, int]:
        """Runs that ended before the cutoff, with any progress rows they kept."""
        removed = {"sweep_runs": 0, "sweep_progress": 0}
        while True:
            runs, progress = await self.queries.sweep_run_prune(conn, older_than, batch)
            removed["sweep_runs"] += runs
            removed["sweep_progress"] += progress
            if runs < batch:
                return removed

    async def retry(self, job_id: int, conn: Conn | None, *, then: Retry) -> Job | None:
        """The retry of a job that may be a run's item (`control.retry_item`, handed in by the
        App): an item of a run that has ended makes the run run again."""
        if self._retry is None:
            return await then(job_id, conn)
        return await self._retry(self, checks.job_id(job_id), conn, then)

    def cron_target(self, target: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """`sweep=<name>` (and `params={...}`): each tick starts a run, unless one is active."""
        if "sweep" not in target or not set(target) <= {"sweep", "params"}:
            return None
        cls = self.get(target["sweep"])
        params_text, _ = encode_params(cls.name, target.get("params"))
        return start_task_name(cls.name), {"params": msgspec.json.decode(params_text)}


async def _link_elsewhere(ctx: Context, run: int, after: Any = None) -> None:
    """What runs a link of a sweep this process did not register: it must not run here."""
    _elsewhere(run)


async def _done_elsewhere(ctx: Context, run: int, end: int, snapshot: Any) -> None:
    """What runs the on_complete job of a sweep this process did not register: not here."""
    _elsewhere(run)


def _elsewhere(run: int) -> None:
    raise NotRunnable(
        f"this worker does not know the sweep of run {run}: register it with "
        "app.register_sweep in the worker's app"
    )
