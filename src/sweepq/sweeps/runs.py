"""A sweep run as users see it: its state, counters, rate and ETA, and the result of a start."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Literal

import msgspec

from ..core.jobs import GroupProgress
from .queries import RunRow


class SweepState(enum.StrEnum):
    """A sweep run's state; mirrors the `sweep_run_state` enum in PostgreSQL.

    Attributes:
        RUNNING: links walk the population; leaves run.
        PAUSED: no link reads or fans out; leaves already enqueued still run.
        COMPLETED: every page fanned out and every leaf terminal, with no more than
            `max_failures` leaves failed.
        FAILED: more than `max_failures` leaves failed, or a fault of the whole pass (see
            `SweepRun.failure`).
        CANCELLED: ended by `App.cancel_sweep`.
    """

    RUNNING = "running"  # links walk the population; leaves run
    PAUSED = "paused"  # no link reads or fans out; leaves already enqueued still run
    COMPLETED = "completed"  # every page fanned out and every leaf terminal
    FAILED = "failed"  # see SweepRun.failure: max_failures, or a fault of the whole pass
    CANCELLED = "cancelled"

    @property
    def ended(self) -> bool:
        """Whether the run has ended: completed, failed or cancelled."""
        return self in _ENDED


_ENDED = frozenset({SweepState.COMPLETED, SweepState.FAILED, SweepState.CANCELLED})

StartOutcome = Literal["started", "already_running"]


class SweepStarted(msgspec.Struct, frozen=True):
    """What `start_sweep` did: the run it points at, and whether that run is new.

    Attributes:
        run_id: the run started, or the active run of the same sweep and params.
        outcome: `started`, or `already_running` when a run of the same sweep and params was
            active (nothing was written).
    """

    run_id: int
    outcome: StartOutcome

    @property
    def started(self) -> bool:
        """Whether a new run was started (`outcome == "started"`)."""
        return self.outcome == "started"


class SweepFailure(msgspec.Struct, frozen=True, kw_only=True):
    """One item of a run that failed for good (`App.sweep_failures`).

    Attributes:
        key: the item's identity, by which its leaf was deduplicated (`Sweep.identity`: the
            cursor key by default, a TableSweep's unique key columns).
        item: the item as the leaf received it.
        job_id: the leaf job (`app.get_job(job_id)` has its whole errors history).
        attempts: the executions charged to it.
        failure_reason: max_attempts_exceeded, deadline_exceeded, or error.
        error: the last error recorded (for an exception, its traceback).
        failed_at: when it failed.
    """

    key: list[Any] | str
    item: Any
    job_id: int
    attempts: int
    failure_reason: str | None
    error: str | None
    failed_at: datetime | None


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
        waiting: outstanding leaves waiting for a retry, a snooze or their run_at.
        estimated_total: the population at the start: counted, or the sweep's estimate.
        total: items the run covers: exact once the last page is read or when the population
            was counted, else the estimate (at least what is enqueued), else None.
        total_is_estimate: `total` is an estimate (show it as one).
        percent: done over total, 0-100; it never goes backwards, and is 100 only once the
            run has completed.
        started_at: when the run started.
        finished_at: when it ended, or None.
        updated_at: when its row last changed (a link committed, or its state changed).
        elapsed_seconds: seconds from the start to the end (or to now, by the database clock).
        failure: why a failed run failed, else None.
        rate: items finished per second over the last minute or two (None until it is known:
            at least 5 s and 10 items).
        eta_seconds: seconds left at `rate` (never before the last item waiting for a retry is
            due), None while unknown, 0 once ended.
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
    waiting: int
    estimated_total: int | None
    total: int | None
    total_is_estimate: bool
    percent: float | None
    started_at: datetime
    finished_at: datetime | None
    updated_at: datetime
    elapsed_seconds: float
    failure: str | None
    rate: float | None
    eta_seconds: float | None

    @property
    def ended(self) -> bool:
        """Whether the run has ended (its counters are then exact)."""
        return self.state.ended

    @property
    def done(self) -> int:
        """Leaves that reached a terminal state."""
        return self.completed + self.failed + self.cancelled


# The rate (and with it the ETA) means something once it is taken over this long a window and
# at least this many items.
RATE_MIN_SECONDS = 5.0
RATE_MIN_ITEMS = 10


def run_from_row(row: RunRow, live: GroupProgress | None = None) -> SweepRun:
    """Build the snapshot: exact counters of an ended run, else the live ones (`live`: the run's
    leaves not finished yet, as the core counts its job group)."""
    state = SweepState(row.state)
    live = live or GroupProgress()
    if state.ended:
        completed, failed, cancelled = row.completed, row.failed, row.cancelled
        outstanding = waiting = 0
    else:
        failed, cancelled = row.live_failed, row.live_cancelled
        outstanding, waiting = live.outstanding, live.waiting
        completed = max(row.enqueued - outstanding - failed - cancelled, 0)
    done = completed + failed + cancelled
    total, estimated = _total(row, state)
    rate = _rate(row, done, state)
    if state.ended:
        eta: float | None = 0.0
    elif total is None or rate is None or rate <= 0:
        eta = None
    else:
        # Items waiting for a retry end no sooner than they are due, whatever the rate.
        eta = max(max(total - done, 0) / rate, live.waiting_seconds or 0.0)
    return SweepRun(
        id=row.id, sweep=row.sweep, params=row.params, state=state, draining=row.draining,
        cursor=row.cursor, links=row.links, max_links=row.max_links, enqueued=row.enqueued,
        completed=completed, failed=failed, cancelled=cancelled, outstanding=outstanding,
        waiting=waiting, estimated_total=row.estimated_total, total=total,
        total_is_estimate=estimated, percent=_percent(row, state, done, total),
        started_at=row.started_at, finished_at=row.finished_at, updated_at=row.updated_at,
        elapsed_seconds=max(row.elapsed, 0.0), failure=row.failure, rate=rate, eta_seconds=eta,
    )  # fmt: skip


def _total(row: RunRow, state: SweepState) -> tuple[int | None, bool]:
    """Items the run covers, and whether that is an estimate: exact once the last page is read
    (or the population was counted), else the estimate until more items than it are enqueued."""
    if state.ended or row.draining:
        return row.enqueued, False
    if row.estimated_total is None:
        return None, True
    if row.enqueued > row.estimated_total:
        return row.enqueued, True  # at least this many: the walk goes on
    return row.estimated_total, not row.total_counted


def _percent(row: RunRow, state: SweepState, done: int, total: int | None) -> float | None:
    """Done over total, never below the floor that commits growing the total leave; until the
    run drains it counts no more done than the last link counted (see migration 0003 of the
    sweeps), so it moves as links commit."""
    if state is SweepState.COMPLETED:
        return 100.0
    if total is None or total <= 0:
        return None
    if row.done_cap is not None and not (state.ended or row.draining):
        done = min(done, row.done_cap)
    # 100 % is for a run that has completed, not one still waiting, failed or cancelled.
    fraction = min(max(min(done / total, 1.0), row.done_floor), 0.999)
    return round(fraction * 100, 1)


def _rate(row: RunRow, done: int, state: SweepState) -> float | None:
    """Items done per second over the recent window the links sampled (None: not yet known);
    of an ended run, over the last window it had, however short."""
    if row.rate_from_done is None or row.rate_seconds is None:
        return None
    items = done - row.rate_from_done
    if state.ended:
        return items / row.rate_seconds if row.rate_seconds > 0 and items > 0 else None
    if row.rate_seconds < RATE_MIN_SECONDS or items < RATE_MIN_ITEMS:
        return None
    return items / row.rate_seconds
