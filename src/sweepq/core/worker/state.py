"""What the worker's loops share: the claimed jobs by claim token, the outcomes waiting to be
recorded, and the event that wakes whichever loop waits for a change.

Every claim carries a token (the job's id and claim count) that heartbeats and outcomes present,
and this bookkeeping is keyed by it: two executions of one job (a job cancelled, retried and
claimed again while its first execution still runs) never mix.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

import anyio
import asyncpg

from ..context import Context
from ..decision import ExecutionOutcome
from ..outage import TRANSIENT_ERRORS, Outage
from ..rows import Claimed, ClaimToken, FinishBatch

# Calls that failed because the database is away are retried this often at most, so that work
# resumes within a fraction of a second of its return.
RETRY_MAX_SECONDS = 0.5
P = ParamSpec("P")
T = TypeVar("T")


class Slot:
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


class Shared:
    """The state the dispatcher, the runners, the recorder and the heartbeat share."""

    def __init__(self, worker_id: str, concurrency: int, outage: Outage) -> None:
        self.worker_id = worker_id
        self.concurrency = concurrency
        self.outage = outage
        self.slots: dict[ClaimToken, Slot] = {}  # claimed, handler not finished
        self.suspects = 0  # of them, jobs whose worker died running them before
        self.unrecorded: set[ClaimToken] = set()  # handler finished, outcome not recorded
        self.resent: set[ClaimToken] = set()  # outcomes whose last write's fate is unknown
        self.ready: deque[Slot] = deque()  # claimed, waiting for a runner
        self.ready_event = anyio.Event()
        self.pending = FinishBatch()  # decided, to be recorded by the next flush
        self.flushing = False
        self.flushes = 0
        # Closed groups whose jobs this worker ended, for the firing step, and whether it runs.
        self.to_fire: set[str] = set()
        self.firing = False
        self.changed = anyio.Event()
        self.stopping = False
        self.stop_now = False
        self.leases_ok_until = float("inf")
        self.processed = 0
        # Executions by how they ended (`outcome_of`): completed, retry, snooze, cancel, ...
        self.outcomes: Counter[ExecutionOutcome] = Counter()

    def signal(self) -> None:
        """Wake every loop waiting for a change."""
        changed, self.changed = self.changed, anyio.Event()
        changed.set()

    def busy(self) -> bool:
        """Every slot runs a job (`Context.worker_busy`)."""
        return len(self.slots) >= self.concurrency

    def fire_pending(self) -> bool:
        return bool(self.to_fire) or self.firing

    def settled(self) -> bool:
        """No outcome waits to be recorded and no firing step is due or running."""
        return not self.pending and not self.flushing and not self.fire_pending()

    async def retrying(self, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
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
                delay = min(delay * 2, RETRY_MAX_SECONDS)
            else:
                self.outage.ok()
                return result
