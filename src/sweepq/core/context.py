"""The context a handler receives as its first argument."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import anyio.from_thread

from .jobs import JobId

P = ParamSpec("P")
T = TypeVar("T")

if TYPE_CHECKING:
    from .app import App


class Context:
    """Facts about the running execution, and the app to enqueue follow-up work with.

    Attributes:
        app: the `App` the worker runs for (enqueue from a handler with `ctx.app.enqueue`).
        job_id: the job's id.
        task: the task name.
        queue: the queue it was claimed from.
        attempt: this execution's attempt number (1 on the first charged execution).
        max_attempts: the job's attempt budget.
        snoozes: how many times the job snoozed before this execution.
        worker_id: the worker that holds the lease.
        group: the job's group (`enqueue(..., group=...)`), or None.
        args: the job's arguments, as the handler receives them.
        worker_busy: whether every slot of the worker running this job is running a job (a
            job that only waits may give its slot back then); False outside a worker.

    A plain `def` handler runs in a thread: its attributes read as usual, `stopping` tells it
    when to give up, and `run_async` calls the app's async methods (enqueue, rate_limit).
    """

    __slots__ = (
        "_busy",
        "_stop",
        "app",
        "args",
        "attempt",
        "group",
        "job_id",
        "max_attempts",
        "queue",
        "snoozes",
        "task",
        "worker_id",
    )

    def __init__(
        self,
        app: App,
        *,
        job_id: JobId,
        task: str,
        queue: str,
        attempt: int,
        max_attempts: int,
        snoozes: int,
        worker_id: str,
        group: str | None = None,
        args: dict[str, Any] | None = None,
        busy: Callable[[], bool] | None = None,
    ) -> None:
        self.app = app
        self.job_id = job_id
        self.task = task
        self.queue = queue
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.snoozes = snoozes
        self.worker_id = worker_id
        self.group = group
        self.args: dict[str, Any] = args or {}
        # A plain flag: set on the event loop, read by a `def` handler's thread (a bool is
        # read and written whole).
        self._stop = False
        self._busy = busy

    @property
    def stopping(self) -> bool:
        """Whether the execution should end now: its lease was lost, or the worker is stopping
        past its grace period. An `async def` handler is cancelled at its next `await`. A `def`
        handler, which a thread cannot interrupt, should check this between steps and raise
        when it is set (any exception): its job is then handed back without charging an
        attempt, as a cancelled coroutine's is. Returning means the work is done.
        """
        return self._stop

    @property
    def worker_busy(self) -> bool:
        """Whether every slot of the worker running this job is running a job."""
        return self._busy is not None and self._busy()

    def stop(self) -> None:
        """Ask the execution to end (the worker calls this when it cancels the handler)."""
        self._stop = True

    def run_async(
        self, fn: Callable[P, Coroutine[Any, Any, T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """From a `def` handler's thread: run an async function (say `ctx.app.enqueue`) on the
        worker's event loop and return its result.

        Example:
            >>> @app.task
            ... def resize(ctx: sweepq.Context, image_id: int) -> None:
            ...     thumbnail = make_thumbnail(image_id)  # blocking work
            ...     ctx.run_async(ctx.app.enqueue, "publish", {"id": thumbnail})
        """
        return anyio.from_thread.run(functools.partial(fn, *args, **kwargs))

    async def rate_limit(self, key: str, *, per_second: float, burst: int = 1) -> float:
        """Wait, holding this job's slot, for a grant of `key` at `per_second` across all workers.

        One row update per grant and none per wait; the job is not released or re-queued, so the
        wait never counts as an attempt or a snooze. Returns the seconds waited.

        Example:
            >>> await ctx.rate_limit("stripe", per_second=25)  # doctest: +SKIP
        """
        return await self.app.rate_limit(key, per_second=per_second, burst=burst)

    def __repr__(self) -> str:
        return f"<Context job={self.job_id} task={self.task} attempt={self.attempt}>"
