"""What one frame of `sweepq top` holds, how it is read, and the figures drawn from two frames.

A frame is read in one read-only snapshot. Live jobs are counted from the partial indexes over
them. The windows of finished jobs (failed in the last hour, completed in the last minute,
finished since the previous frame) are counted exactly, newest first, up to
`FINISHED_READ_LIMIT` finished jobs; a window holding more is counted that far, and the rest of
it is read in short ranges end to end, a bounded number of jobs each: the ranges that held fewer
are counted, the others estimated from a sample spread evenly over them (systematic, from a
random start: every instant is as likely to be read), and the figures they add to are flagged
as estimates. The rate is the jobs finished between this frame and the previous one, over the
time between them.
"""

from __future__ import annotations

import contextlib
import itertools
import random
from collections import defaultdict
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Literal

import msgspec

from sweepq.core.admin import (
    FINISHED_READ_LIMIT,
    SAMPLE_BUSY_RANGES,
    SAMPLE_PROBE_LIMIT,
    SAMPLE_RANGE_LIMIT,
    SAMPLE_RANGES,
    SAMPLE_ROWS,
    KeyLoad,
    Leader,
    QueueFinished,
    QueueLive,
    SampleCount,
    WorkerConnections,
    top_concurrency_key_busiest,
    top_job_finished,
    top_job_finished_sample,
    top_job_live,
    top_jobs_estimate,
    top_leader,
    top_worker_list,
)
from sweepq.core.queries import Conn
from sweepq.core.queues import pauses
from sweepq.sweeps.app import App
from sweepq.sweeps.runs import SweepRun

TOP_KEYS = 10  # the busiest concurrency keys shown
TOP_RUNS = 10  # the newest active sweep runs shown

HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)
TICK = timedelta(microseconds=1)  # timestamptz's resolution

WindowName = Literal["1h", "1m", "since"]


class QueueLine(msgspec.Struct, frozen=True, kw_only=True):
    """One queue in a frame.

    A figure whose `*_is_estimate` is true is the jobs counted in the newest part of its window
    plus an estimate of the rest (see `Estimate`).
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
    paused: bool = False  # no worker starts its jobs until it is resumed (`sweepq queues`)


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
    finished_read: int  # finished jobs read for this frame: counted, and sampled
    finished_read_limit: int  # finished jobs counted at most, newest first
    # Counting stopped at the limit, and counted only jobs finished after this; None: it
    # counted every window in full.
    finished_read_since: datetime | None
    estimates: list[Estimate]  # the windows not counted in full, and how they were estimated


class Estimate(msgspec.Struct, frozen=True, kw_only=True):
    """The part of a window that counting newest first did not reach (the jobs finished after
    `start`, up to `cut` included): counted in the ranges that held few jobs, and estimated
    from a sample in the others."""

    window: WindowName  # the hour (failed 1h), the minute (completed 1m), or since the last frame
    start: datetime
    cut: datetime
    fraction: float  # the share of the busy ranges' time the sample read (1.0: none was busy)
    sampled: int  # the jobs read for the part: by its ranges, and by the sample
    exact: bool  # all of the part was read: its figures are counts, not estimates
    jobs: dict[str, dict[str, int]]  # per queue and state, the part's jobs

    def of(self, queue: str, *states: str) -> int:
        counts = self.jobs.get(queue, {})
        return sum(counts.get(state, 0) for state in states)


class SamplePlan(msgspec.Struct, frozen=True, kw_only=True):
    """Ranges of the part of a window not counted, each read up to `limit` jobs, oldest first;
    they cover `fraction` of the time they are drawn over."""

    window: WindowName
    start: datetime
    cut: datetime
    fraction: float
    ranges: list[tuple[datetime, datetime]]
    limit: int


async def read_frame(
    app: App,
    previous: Frame | None = None,
    *,
    conn: Conn | None = None,
    finished_limit: int = FINISHED_READ_LIMIT,
    sample_rows: int = SAMPLE_ROWS,
    rng: random.Random | None = None,
) -> Frame:
    """Read one frame of `app`'s schema; the rate is counted from `previous` on.

    Without `conn`, the frame is read in a read-only repeatable-read transaction of its own,
    so that its figures, and its clock, are those of one moment. At most `finished_limit`
    finished jobs are counted; a window with more is estimated from about `sample_rows` more.
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
        finished = await top_job_finished(queries, c, since=since, limit=finished_limit)
        cut = finished[0].cut if finished else None
        read = sum(f.read for f in finished)
        # First the whole of each part in short ranges: a range that holds fewer jobs than its
        # limit is counted; then a sample of the ranges that held more.
        first = probe_plans(at=clock.at, since=since, cut=cut)
        probed = await _sample(app, c, first)
        second = [
            busy_plan(plan, found, rows=sample_rows, rng=rng)
            for plan, found in zip(first, probed, strict=True)
        ]
        sampled = iter(await _sample(app, c, [plan for plan in second if plan is not None]))
        estimates = [
            estimate(plan, found, busy, [] if busy is None else next(sampled))
            for plan, found, busy in zip(first, probed, second, strict=True)
        ]
        runs = await app.list_sweep_runs(TOP_RUNS + 1, active_only=True, conn=c)
        keys = await top_concurrency_key_busiest(queries, c, limit=TOP_KEYS)
        workers = await top_worker_list(queries, c)
        leader = await top_leader(queries, c)
        paused = {p.queue for p in await pauses(queries, c)}
    return Frame(
        schema=app.schema,
        at=clock.at,
        since=since,
        jobs_estimate=clock.jobs,
        queues=queue_lines(live, finished, estimates, at=clock.at, since=since, paused=paused),
        runs=runs[:TOP_RUNS],
        more_runs=len(runs) > TOP_RUNS,
        keys=keys,
        workers=workers,
        leader=leader,
        finished_read=read + sum(e.sampled for e in estimates),
        finished_read_limit=finished_limit,
        finished_read_since=cut,
        estimates=estimates,
    )


def queue_lines(
    live: Sequence[QueueLive],
    finished: Sequence[QueueFinished],
    estimates: Sequence[Estimate],
    *,
    at: datetime,
    since: datetime | None,
    paused: Collection[str] = (),
) -> list[QueueLine]:
    """One line per queue with live jobs, jobs finished in the last hour or a pause, by name:
    the jobs counted in each window, plus the estimate of the part of it not counted."""
    parts = {e.window: e for e in estimates}
    hour, minute, recent = parts.get("1h"), parts.get("1m"), parts.get("since")
    by_queue = {q.queue: q for q in live}
    done = {f.queue: f for f in finished}
    sampled = {queue for e in estimates for queue in e.jobs}
    lines: list[QueueLine] = []
    for name in sorted(by_queue.keys() | done.keys() | sampled | set(paused)):
        q = by_queue.get(name) or QueueLive(name, 0, 0, 0, None)
        f = done.get(name) or QueueFinished(name, 0, 0, 0, 0, None)
        failed = f.failed_last_hour + (hour.of(name, "failed") if hour else 0)
        completed = f.completed_last_minute + (minute.of(name, "completed") if minute else 0)
        rate: float | None = None
        if since is not None and at > since:
            ended = f.finished_since + (recent.of(name, *_ENDED) if recent else 0)
            rate = ended / (at - since).total_seconds()
        lines.append(
            QueueLine(
                queue=name, due=q.due, scheduled=q.scheduled, running=q.running,
                failed_last_hour=failed, failed_last_hour_is_estimate=_estimated(hour),
                completed_last_minute=completed,
                completed_last_minute_is_estimate=_estimated(minute),
                rate=rate, rate_is_estimate=rate is not None and _estimated(recent),
                oldest_due_seconds=q.oldest_due_seconds, paused=name in paused,
            )
        )  # fmt: skip
    return lines


_ENDED = ("completed", "failed", "cancelled")


def _estimated(part: Estimate | None) -> bool:
    return part is not None and not part.exact


async def _sample(
    app: App, conn: Conn, plans: Sequence[SamplePlan]
) -> list[list[list[SampleCount]]]:
    """Read the ranges of `plans`, in one statement per limit: per plan, per range, its jobs."""
    found: defaultdict[tuple[int, int], list[SampleCount]] = defaultdict(list)
    for limit in sorted({plan.limit for plan in plans}):
        mine = [
            (i, k) for i, p in enumerate(plans) if p.limit == limit for k in range(len(p.ranges))
        ]
        ranges = [plans[i].ranges[k] for i, k in mine]
        for count in await top_job_finished_sample(app.queries, conn, ranges, limit=limit):
            found[mine[count.range]].append(count)
    return [[found[(i, k)] for k in range(len(p.ranges))] for i, p in enumerate(plans)]


def probe_plans(
    *,
    at: datetime,
    since: datetime | None,
    cut: datetime | None,
    ranges: int = SAMPLE_RANGES,
    limit: int = SAMPLE_PROBE_LIMIT,
) -> list[SamplePlan]:
    """For each window that counting newest first stopped short of (at `cut`), its part not
    counted (finished after the window's start, up to `cut` included) cut in `ranges` ranges,
    each read up to `limit` jobs."""
    if cut is None:
        return []
    starts: list[tuple[WindowName, datetime | None]] = [
        ("1h", at - HOUR), ("1m", at - MINUTE), ("since", since)
    ]  # fmt: skip
    plans: list[SamplePlan] = []
    for window, start in starts:
        if start is None or start >= cut:
            continue  # counted in full
        spans, _ = spread_ranges(start + TICK, cut + TICK, ranges, 1.0, 0.0)
        plans.append(
            SamplePlan(window=window, start=start, cut=cut, fraction=1.0, ranges=spans, limit=limit)
        )
    return plans


def busy_plan(
    probe: SamplePlan,
    found: Sequence[Sequence[SampleCount]],
    *,
    rows: int = SAMPLE_ROWS,
    ranges: int = SAMPLE_BUSY_RANGES,
    limit: int = SAMPLE_RANGE_LIMIT,
    rng: random.Random | None = None,
) -> SamplePlan | None:
    """A sample of about `rows` jobs of the ranges of `probe` that held more than its limit
    (None: there are none): each of them cut in periods (`ranges` in all), and the same share
    of each period read, from a random start."""
    busy = [(r, f) for r, f in zip(probe.ranges, found, strict=True) if _read(f) >= probe.limit]
    if not busy:
        return None
    # How many jobs the busy ranges hold, guessed from the part each probe read: it only sets
    # how much to read, and every instant is as likely to be read whatever it is.
    guess = sum(
        probe.limit * ((b - a) / max(max(c.newest for c in f) - a, TICK)) for (a, b), f in busy
    )
    wanted = min(1.0, rows / guess)
    pick = rng or random.Random()
    parts: list[tuple[datetime, datetime]] = []
    fraction = wanted
    for (a, b), _ in busy:
        spread, fraction = spread_ranges(a, b, max(1, ranges // len(busy)), wanted, pick.random())
        parts += spread
    return SamplePlan(
        window=probe.window, start=probe.start, cut=probe.cut, fraction=fraction, ranges=parts,
        limit=limit,
    )  # fmt: skip


def _read(found: Sequence[SampleCount]) -> int:
    return sum(c.jobs for c in found)


def spread_ranges(
    low: datetime, high: datetime, count: int, fraction: float, offset: float
) -> tuple[list[tuple[datetime, datetime]], float]:
    """Ranges covering `fraction` of `[low, high)`: the time is cut into `count` periods, and
    each range is the first `fraction` of a period shifted by `offset` (from 0 to 1) of one, the
    last one wrapping round to `low`; and the fraction they cover (after rounding to
    microseconds). Any instant of `[low, high)` is read with the same chance, whatever `offset`
    is drawn: an estimate scaled by 1/fraction is unbiased however the jobs are spread in time.
    """
    period = (high - low) / count
    if period <= TICK:
        return [(low, high)], 1.0
    if fraction >= 1.0:
        bounds = [low + period * k for k in range(count)] + [high]
        return [(a, b) for a, b in itertools.pairwise(bounds) if a < b], 1.0
    width = max(period * fraction, TICK)
    shift = period * offset
    spread: list[tuple[datetime, datetime]] = []
    for k in range(-1, count):
        start = low + shift + period * k
        a, b = max(start, low), min(start + width, high)
        if a < b:
            spread.append((a, b))
    return spread, width / period


def estimate(
    probe: SamplePlan,
    probed: Sequence[Sequence[SampleCount]],
    busy: SamplePlan | None,
    sampled: Sequence[Sequence[SampleCount]],
) -> Estimate:
    """A window's part not counted: the jobs of the ranges the probe read whole, plus the
    sample of the others scaled by 1/fraction (and a range of it that hit its limit, scaled from
    the time it read to its whole width)."""
    jobs: defaultdict[str, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))
    read = 0
    for found in probed:
        read += _read(found)
        if _read(found) < probe.limit:
            for c in found:
                jobs[c.queue][str(c.state)] += c.jobs
    exact = busy is None
    if busy is not None:
        exact = busy.fraction >= 1.0
        for (a, b), found in zip(busy.ranges, sampled, strict=True):
            read += _read(found)
            scale = 1.0
            if _read(found) >= busy.limit:  # the range holds more than was read
                exact = False
                newest = max(c.newest for c in found)
                if newest > a:
                    scale = (b - a) / (newest - a)
            for c in found:
                jobs[c.queue][str(c.state)] += c.jobs * scale / busy.fraction
    return Estimate(
        window=probe.window, start=probe.start, cut=probe.cut,
        fraction=1.0 if busy is None else busy.fraction, sampled=read, exact=exact,
        jobs={q: {s: round(n) for s, n in per.items()} for q, per in jobs.items()},
    )  # fmt: skip
