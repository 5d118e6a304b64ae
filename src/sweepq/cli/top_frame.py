"""What one frame of `sweepq top` holds, how it is read, and the figures drawn from two frames.

A frame is read in one read-only snapshot. Every count is either read from the partial indexes
over live jobs, or bounded: finished jobs are read newest first, at most `FINISHED_READ_LIMIT`
of them, and a window that the limit cut short gets an estimate, flagged as one. The rate is the
jobs finished between this frame and the previous one, over the time between them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime, timedelta

import msgspec

from sweepq.core.admin import (
    FINISHED_READ_LIMIT,
    KeyLoad,
    Leader,
    QueueFinished,
    QueueLive,
    WorkerConnections,
    top_concurrency_key_busiest,
    top_job_finished,
    top_job_live,
    top_jobs_estimate,
    top_leader,
    top_worker_list,
)
from sweepq.core.queries import Conn
from sweepq.sweeps.app import App
from sweepq.sweeps.runs import SweepRun

TOP_KEYS = 10  # the busiest concurrency keys shown
TOP_RUNS = 10  # the newest active sweep runs shown

HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


class QueueLine(msgspec.Struct, frozen=True, kw_only=True):
    """One queue in a frame.

    A figure whose `*_is_estimate` is true was scaled up from the part of its window that was
    read (the finished jobs read per frame are limited).
    """

    queue: str
    due: int  # available and due now
    scheduled: int  # available, due later
    running: int
    failed_last_hour: int
    failed_last_hour_is_estimate: bool
    completed_last_minute: int
    completed_last_minute_is_estimate: bool
    rate: float | None  # jobs finished per second since the previous frame; None on the first
    rate_is_estimate: bool
    oldest_due_seconds: float | None  # how long the oldest due job has been due


class Frame(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one screen of `sweepq top` shows, read in one snapshot."""

    schema: str
    at: datetime  # the database's clock
    since: datetime | None  # the previous frame's `at`: the rate's window starts there
    jobs_estimate: int | None  # the planner's estimate of all jobs, any state
    queues: list[QueueLine]
    runs: list[SweepRun]  # active sweep runs, newest first, at most TOP_RUNS
    more_runs: bool  # more runs are active than shown
    keys: list[KeyLoad]  # the busiest concurrency keys
    workers: list[WorkerConnections]
    leader: Leader | None
    finished_read: int  # finished jobs read for this frame
    finished_read_limit: int
    # Reading stopped at the limit, and saw only jobs finished after this; None: it saw all.
    finished_read_since: datetime | None


async def read_frame(
    app: App,
    previous: Frame | None = None,
    *,
    conn: Conn | None = None,
    finished_limit: int = FINISHED_READ_LIMIT,
) -> Frame:
    """Read one frame of `app`'s schema; the rate is counted from `previous` on.

    Without `conn`, the frame is read in a read-only repeatable-read transaction of its own,
    so that its figures, and its clock, are those of one moment.
    """
    since = None if previous is None else previous.at
    queries = app.queries
    async with contextlib.AsyncExitStack() as stack:
        c = await stack.enter_async_context(app.connection(conn))
        if conn is None:
            await stack.enter_async_context(
                c.transaction(isolation="repeatable_read", readonly=True)
            )
        clock = await top_jobs_estimate(queries, c)
        live = await top_job_live(queries, c)
        # One more than the limit: whether reading stopped short of the windows' start.
        finished = await top_job_finished(queries, c, since=since, limit=finished_limit + 1)
        runs = await app.list_sweep_runs(TOP_RUNS + 1, active_only=True, conn=c)
        keys = await top_concurrency_key_busiest(queries, c, limit=TOP_KEYS)
        workers = await top_worker_list(queries, c)
        leader = await top_leader(queries, c)
    return Frame(
        schema=app.schema,
        at=clock.at,
        since=since,
        jobs_estimate=clock.jobs,
        queues=queue_lines(live, finished, at=clock.at, since=since, limit=finished_limit),
        runs=runs[:TOP_RUNS],
        more_runs=len(runs) > TOP_RUNS,
        keys=keys,
        workers=workers,
        leader=leader,
        finished_read=min(sum(f.read for f in finished), finished_limit),
        finished_read_limit=finished_limit,
        finished_read_since=read_cut(finished, finished_limit),
    )


def queue_lines(
    live: Sequence[QueueLive],
    finished: Sequence[QueueFinished],
    *,
    at: datetime,
    since: datetime | None,
    limit: int,
) -> list[QueueLine]:
    """One line per queue with live jobs or jobs finished in the last hour, by name."""
    first = min((f.first_in_hour for f in finished if f.first_in_hour), default=None)
    window = Window(at=at, cut=read_cut(finished, limit), first=first)
    by_queue = {q.queue: q for q in live}
    done = {f.queue: f for f in finished}
    lines: list[QueueLine] = []
    for name in sorted(by_queue.keys() | done.keys()):
        q = by_queue.get(name) or QueueLive(name, 0, 0, 0, None)
        f = done.get(name) or QueueFinished(name, 0, 0, 0, 0, at, None)
        failed, failed_est = window.count(f.failed_last_hour, at - HOUR)
        completed, completed_est = window.count(f.completed_last_minute, at - MINUTE)
        rate, rate_est = window.rate(f.finished_since, since)
        lines.append(
            QueueLine(
                queue=name, due=q.due, scheduled=q.scheduled, running=q.running,
                failed_last_hour=failed, failed_last_hour_is_estimate=failed_est,
                completed_last_minute=completed, completed_last_minute_is_estimate=completed_est,
                rate=rate, rate_is_estimate=rate_est, oldest_due_seconds=q.oldest_due_seconds,
            )
        )  # fmt: skip
    return lines


def read_cut(finished: Sequence[QueueFinished], limit: int) -> datetime | None:
    """Where reading stopped, if there was more than `limit` to read (`finished` holds one job
    more than the limit, then): what finished before was not seen."""
    if sum(f.read for f in finished) <= limit:
        return None
    return min(f.oldest_read for f in finished)


class Window(msgspec.Struct, frozen=True):
    """The finished jobs read for a frame at `at`: all of them, or only those after `cut`."""

    at: datetime
    cut: datetime | None  # None: every job finished in the windows was read
    first: datetime | None = None  # the oldest job finished in the last hour, if known

    def count(self, seen: int, start: datetime) -> tuple[int, bool]:
        """The jobs finished from `start` to `at`, of which `seen` were read; and whether that
        is an estimate: scaled from the part read to the part of the window since the first
        job finished in it (nothing finished before that)."""
        if self.first is not None:
            start = max(start, self.first)
        # Jobs that finished at the very instant of the cut may not all have been read.
        if self.cut is None or self.cut < start:
            return seen, False
        read_seconds = (self.at - self.cut).total_seconds()
        if read_seconds <= 0:
            return seen, True  # all read at one instant: nothing to scale by; at least `seen`
        return round(seen * (self.at - start).total_seconds() / read_seconds), True

    def rate(self, seen: int, since: datetime | None) -> tuple[float | None, bool]:
        """Jobs finished per second from `since` to `at`, of which `seen` were read (None
        without `since`); and whether that is an estimate (the rate of the part read)."""
        if since is None or self.at <= since:
            return None, False
        if self.cut is None or self.cut <= since:
            return seen / (self.at - since).total_seconds(), False
        read_seconds = (self.at - self.cut).total_seconds()
        return (seen / read_seconds if read_seconds > 0 else None), True
