"""How a layer built on the core plugs into an `App` without overriding any of its methods.

A layer (the sweeps are one) brings its own tables and its own kinds of cron schedule. It hands
the core a `Layer`: the package of its migrations (applied after the core's, by `migrate`), the
retention of its tables (run by `prune` after the core's), the work of the maintenance leader's
rounds (`maintain`), the names it keeps for its own jobs (`reserved`), and, optionally, how it
turns a cron schedule's target (`app.cron(..., sweep="nightly")`) into the task and args each
tick enqueues.
How a layer hears about the end of its jobs' executions is per task: `Task.on_outcome`; how it
takes part in `App.retry` (a sweep's item that is retried makes its ended run run again) is its
`retry` hook, which wraps the core's retry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from .jobs import Job
from .queries import Conn

Retry = Callable[[int, "Conn | None"], Awaitable[Job | None]]
"""A retry of one job: (job id, conn or None) -> the job after the call, or None."""


class Layer(Protocol):
    """What a layer gives the core (see `App.add_layer`)."""

    @property
    def component(self) -> str:
        """The layer's name in the migration ledger (e.g. "sweeps")."""

    @property
    def migrations(self) -> str:
        """The package holding the layer's `NNNN_name.sql` migrations."""

    @property
    def reserved(self) -> Sequence[tuple[str, str]]:
        """The names the layer keeps for its own jobs: (option, prefix) pairs, the option
        `group` or `idempotency_scope`. Jobs enqueued by others (`App.enqueue` without
        `on_behalf_of=` the layer, or the SQL function) may not use them; the layer's
        migrations write the same pairs into `reserved_names` for the SQL function."""

    async def prune(self, conn: Conn, older_than: float, batch: int) -> dict[str, int]:
        """Delete the layer's rows older than `older_than` seconds; rows removed per table."""

    async def maintain(self) -> None:
        """What the maintenance leader does for the layer, once per round (keep it cheap)."""

    def schema_changed(self) -> None:
        """The app was pointed at another schema (`App.configure`): rebuild its statements."""

    async def retry(self, job_id: int, conn: Conn | None, *, then: Retry) -> Job | None:
        """`App.retry` of one job: call `then(job_id, conn)` (the core's retry, or the next
        layer's) and do what the layer must around it; a layer with nothing to do returns
        `await then(job_id, conn)`."""

    def cron_target(self, target: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """The task name and args a cron schedule of `target` enqueues, or None when `target`
        is not one of this layer's (e.g. `{"sweep": "nightly", "params": {...}}`)."""
