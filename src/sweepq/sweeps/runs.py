"""A sweep run as users see it: its state, counters, rate and ETA, and the result of a start."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Literal

import msgspec

from .queries import RunRow


class SweepState(enum.StrEnum):
    """Mirrors the `sweep_run_state` enum in PostgreSQL."""

    RUNNING = "running"  # links walk the population; leaves run
    PAUSED = "paused"  # no link reads or fans out; leaves already enqueued still run
    COMPLETED = "completed"  # every page fanned out and every leaf terminal
    FAILED = "failed"  # see SweepRun.failure: max_failures, or a fault of the whole pass
    CANCELLED = "cancelled"

    @property
    def ended(self) -> bool:
        return self in _ENDED


_ENDED = frozenset({SweepState.COMPLETED, SweepState.FAILED, SweepState.CANCELLED})

StartOutcome = Literal["started", "already_running"]


class SweepStarted(msgspec.Struct, frozen=True):
    """What `start_sweep` did: the run it points at, and whether that run is new."""

    run_id: int
    outcome: StartOutcome

    @property
    def started(self) -> bool:
        return self.outcome == "started"


class SweepRun(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one run, cheap to read at any time (`App.sweep_status`).

    Counters are live while the run is active and exact once it has ended (counted from the
    jobs themselves). Live, `outstanding` is counted from the run's active leaves (at most
    `window` of them: the core's count of the run's job group), `failed` and `cancelled` are
    summed from sharded counters that failing leaves update (a leaf that a crash failed is
    missing from them until the end), and `completed` is the rest of `enqueued`.

    Attributes:
        id: the run id.
        sweep: the sweep's name.
        params: the params the run was started with.
        state: running, paused, completed, failed or cancelled.
        draining: the last page has been read; the run ends when its last leaf is terminal.
        cursor: `key(item)` of the last item fanned out (a JSON array), None before the first.
        links: pages committed so far (the link at work is number `links + 1`).
        max_links: the link ceiling of this run.
        enqueued: leaf jobs enqueued (exact at all times: it moves with the cursor).
        completed: leaves that succeeded (live: enqueued - outstanding - failed - cancelled).
        failed: leaves that failed for good (their last attempt raised).
        cancelled: leaves that ended cancelled (by the handler, or by ending the run).
        outstanding: leaves not yet terminal (available or running).
        estimated_total: the sweep's estimate of its population at start, if it has one.
        total: items the run will cover: exact once draining, else the estimate, else None.
        started_at: when the run started.
        finished_at: when it ended, or None.
        updated_at: when its row last changed (a link committed, or its state changed).
        elapsed_seconds: seconds from the start to the end (or to now, by the database clock).
        failure: why a failed run failed, else None.
        rate: items finished per second since the start.
        eta_seconds: seconds left at `rate`, None while unknown, 0 once ended.
    """

    id: int
    sweep: str
    params: dict[str, Any]
    state: SweepState
    draining: bool
    cursor: list[Any] | None
    links: int
    max_links: int
    enqueued: int
    completed: int
    failed: int
    cancelled: int
    outstanding: int
    estimated_total: int | None
    total: int | None
    started_at: datetime
    finished_at: datetime | None
    updated_at: datetime
    elapsed_seconds: float
    failure: str | None
    rate: float
    eta_seconds: float | None

    @property
    def ended(self) -> bool:
        return self.state.ended

    @property
    def done(self) -> int:
        """Leaves that reached a terminal state."""
        return self.completed + self.failed + self.cancelled


def run_from_row(row: RunRow, outstanding_leaves: int = 0) -> SweepRun:
    """Build the snapshot: exact counters of an ended run, else the live ones (with the run's
    leaves outstanding, as the core counts its job group)."""
    state = SweepState(row.state)
    if state.ended:
        completed, failed, cancelled = row.completed, row.failed, row.cancelled
        outstanding = 0
    else:
        failed, cancelled, outstanding = row.live_failed, row.live_cancelled, outstanding_leaves
        completed = max(row.enqueued - outstanding - failed - cancelled, 0)
    done = completed + failed + cancelled
    if state.ended or row.draining:
        total: int | None = row.enqueued
    elif row.estimated_total is not None:
        total = max(row.estimated_total, row.enqueued)
    else:
        total = None
    elapsed = max(row.elapsed, 0.0)
    rate = done / elapsed if elapsed > 0 else 0.0
    if state.ended:
        eta: float | None = 0.0
    elif total is None or rate <= 0:
        eta = None
    else:
        eta = max(total - done, 0) / rate
    return SweepRun(
        id=row.id, sweep=row.sweep, params=row.params, state=state, draining=row.draining,
        cursor=row.cursor, links=row.links, max_links=row.max_links, enqueued=row.enqueued,
        completed=completed, failed=failed, cancelled=cancelled, outstanding=outstanding,
        estimated_total=row.estimated_total, total=total, started_at=row.started_at,
        finished_at=row.finished_at, updated_at=row.updated_at, elapsed_seconds=elapsed,
        failure=row.failure, rate=rate, eta_seconds=eta,
    )  # fmt: skip
