"""A sweep run as users see it: its state, counters, rate and ETA, and the result of a start."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Literal

import msgspec

from ..core.jobs import GroupProgress, JobWait
from .queries import RunRow


class SweepState(enum.StrEnum):
    """A sweep run's state; mirrors the `sweep_run_state` enum in PostgreSQL.

    Attributes:
        RUNNING: links walk the population; leaves run.
        PAUSED: no link reads or fans out; leaves already enqueued still run.
        COMPLETED: the walk reached the end and every item completed.
        FAILED: items are undone: the walk reached the end with items failed or cancelled,
            or it stopped (its failure budget, a fault of the walk); `SweepRun.failure` says
            which, and the command that goes on.
        CANCELLED: ended by `App.cancel_sweep`.
    """

    RUNNING = "running"  # links walk the population; leaves run
    PAUSED = "paused"  # no link reads or fans out; leaves already enqueued still run
    COMPLETED = "completed"  # the walk reached the end and every item completed
    FAILED = "failed"  # items are undone; see SweepRun.failure
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
    """One item of a run that is undone: it failed for good, or was cancelled
    (`App.sweep_failures`).

    Attributes:
        key: the item's identity, by which its leaf was deduplicated (`Sweep.identity`: the
            cursor key by default, a TableSweep's unique key columns).
        item: the item as the leaf received it.
        job_id: the leaf job (`app.get_job(job_id)` has its whole errors history).
        state: `failed` or `cancelled` (by its handler, or because its run stopped).
        attempts: the executions charged to it.
        failure_reason: of a failed item: max_attempts_exceeded, deadline_exceeded, error, ...
        error: the last error recorded (for an exception, its traceback; for a cancelled
            item, why).
        failed_at: when it ended.
    """

    key: list[Any] | str
    item: Any
    job_id: int
    state: str
    attempts: int
    failure_reason: str | None
    error: str | None
    failed_at: datetime | None


class SweepRun(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one run, cheap to read at any time (`App.sweep_status`).

    Counters are exact at all times. Live, `outstanding`, `failed` and `cancelled` are counted
    from the run's leaves in those states (the core's count of the run's job group, through
    its index: never its completed leaves), and `completed` is the rest of `enqueued`; once
    the run has ended, they are stored on its row.

    Attributes:
        id: the run id.
        sweep: the sweep's name.
        params: the params the run was started with.
        state: running, paused, completed, failed or cancelled.
        draining: the last page has been read; the run ends when its last leaf is terminal.
        walked: the walk reached the end of the population (it stays so once the run ends).
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
        percent: items completed over total, 0-100, in every state (failed and cancelled
            items are not progress); it never goes backwards (so, once the walk has found more
            items than estimated, it moves as links commit), and is 100 only once the run has
            completed.
        started_at: when the run started.
        finished_at: when it ended, or None.
        updated_at: when its row last changed (a link committed, or its state changed).
        elapsed_seconds: seconds from the start to the end (or to now, by the database clock).
        failure: why a failed run failed (what is undone, and the command that goes on),
            else None.
        ends: how many times the run has ended (a run can run again: resume, retry-failed).
        queue: the queue of the run's links and leaves.
        throttled: why the walk waits on one of the sweep's throttle checks (e.g. `replica
            lag 7.2 s > 5 s`), None when it does not.
        throttled_seconds: how long until the walk looks again, while throttled.
        worker_wait_seconds: how long the run's link has been due with no worker taking it
            (None while a worker has it, or it is not due).
        queue_served: whether any job of the run's queue runs now (a worker serves it).
        queue_paused: whether the run's queue is paused (`App.pause_queue`), while the run is
            active: its links and leaves wait until it is resumed.
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
    walked: bool
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
    ends: int
    rate: float | None
    eta_seconds: float | None
    queue: str = "default"
    throttled: str | None = None
    throttled_seconds: float | None = None
    worker_wait_seconds: float | None = None
    queue_served: bool = True
    queue_paused: bool = False

    @property
    def ended(self) -> bool:
        """Whether the run has ended (its counters are then exact)."""
        return self.state.ended

    @property
    def done(self) -> int:
        """Leaves that reached a terminal state."""
        return self.completed + self.failed + self.cancelled

    @property
    def hint(self) -> str | None:
        """Why an active run makes no progress, when that is what it waits for: its paused
        queue, a throttle check, or a worker (its link due for longer than
        `WORKER_WAIT_HINT_SECONDS`)."""
        if self.ended or self.state is SweepState.PAUSED:
            return None
        if self.queue_paused:
            return (
                f"queue {self.queue!r} is paused: the run waits until "
                f"`sweepq queues resume {self.queue}`"
            )
        if self.throttled is not None:
            again = self.throttled_seconds
            return f"throttled: {self.throttled}" + (
                "" if again is None else f" (looks again in {again:.0f}s)"
            )
        waited = self.worker_wait_seconds
        if waited is None or waited < WORKER_WAIT_HINT_SECONDS:
            return None
        if self.queue_served:
            return (
                f"every worker of queue {self.queue!r} is busy: the run's link has waited "
                f"{waited:.0f}s for one"
            )
        return (
            f"no worker is serving queue {self.queue!r}: the run's link has waited {waited:.0f}s "
            f"(start one: sweepq worker --app APP --queue {self.queue})"
        )


# An active run whose link has been due this long with no worker taking it says so.
WORKER_WAIT_HINT_SECONDS = 5.0
# What a link's history entry starts with when it waits on a throttle check (link.py).
THROTTLED = "throttled: "

# The rate (and with it the ETA) means something once it is taken over this long a window and
# at least this many items.
RATE_MIN_SECONDS = 5.0
RATE_MIN_ITEMS = 10


def run_from_row(
    row: RunRow,
    live: GroupProgress | None = None,
    link: JobWait | None = None,
    *,
    queue_paused: bool = False,
) -> SweepRun:
    """Build the snapshot: exact counters of an ended run, else the live ones (`live`: the run's
    leaves not finished, failed or cancelled, as the core counts its job group; `link`: why
    its link job waits, if it does; `queue_paused`: whether the run's queue is paused)."""
    state = SweepState(row.state)
    live = live or GroupProgress()
    throttled, throttled_seconds, worker_wait, served = _waits(state, link)
    if state.ended:
        completed, failed, cancelled = row.completed, row.failed, row.cancelled
        outstanding = waiting = 0
    else:
        failed, cancelled = live.failed, live.cancelled
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
        walked=row.walked, cursor=row.cursor, links=row.links, max_links=row.max_links,
        enqueued=row.enqueued,
        completed=completed, failed=failed, cancelled=cancelled, outstanding=outstanding,
        waiting=waiting, estimated_total=row.estimated_total, total=total,
        total_is_estimate=estimated, percent=_percent(row, state, completed, total),
        started_at=row.started_at, finished_at=row.finished_at, updated_at=row.updated_at,
        elapsed_seconds=max(row.elapsed, 0.0), failure=row.failure, ends=row.ends, rate=rate,
        eta_seconds=eta, queue=row.queue, throttled=throttled,
        throttled_seconds=throttled_seconds, worker_wait_seconds=worker_wait,
        queue_served=served, queue_paused=queue_paused and not state.ended,
    )  # fmt: skip


def _waits(
    state: SweepState, link: JobWait | None
) -> tuple[str | None, float | None, float | None, bool]:
    """What the run's link waits for: a throttle check (its reason and the seconds left), or
    a worker (the seconds it has been due), and whether its queue is served.

    A link whose last execution was a throttle's wait stays throttled while it is due or
    running its checks again (no seconds left then): the run is throttled until a check passes
    and the link moves on, not only between two looks."""
    if (
        link is None
        or state is not SweepState.RUNNING
        or link.state not in ("available", "running")
    ):
        return None, None, None, True if link is None else link.queue_running
    if link.last_kind == "snoozed" and (link.last_error or "").startswith(THROTTLED):
        reason = (link.last_error or "")[len(THROTTLED) :]
        return reason, link.wait_seconds, None, link.queue_running
    if link.state != "available":
        return None, None, None, link.queue_running
    return None, None, link.due_seconds, link.queue_running


def _total(row: RunRow, state: SweepState) -> tuple[int | None, bool]:
    """Items the run covers, and whether that is an estimate: exact once the last page is read
    (or the population was counted), else the estimate until more items than it are enqueued
    (a run whose walk stopped before the end keeps it, so that resuming it moves on from
    there)."""
    if row.walked or row.draining:
        return row.enqueued, False
    if row.estimated_total is None:
        return None, True
    if row.enqueued > row.estimated_total:
        return row.enqueued, True  # at least this many: the walk goes on
    return row.estimated_total, not row.total_counted


def _percent(row: RunRow, state: SweepState, done: int, total: int | None) -> float | None:
    """Items completed (`done`) over total, in every state. Once the walk has found more items
    than estimated, and until it drains, it counts no more than the last link counted and never
    less than the floor that links growing the total leave (see migration 0003 of the sweeps):
    it never goes backwards."""
    if state is SweepState.COMPLETED:
        return 100.0
    if total is None or total <= 0:
        return None
    past_estimate = row.estimated_total is not None and row.enqueued > row.estimated_total
    if past_estimate and row.done_cap is not None and not (state.ended or row.draining):
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
