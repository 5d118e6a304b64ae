"""`sweepq top`: the figures of a frame, the rate between two frames, estimates past the read
limit, the screen at 100 columns, the command against a live schema, and the cost of a frame on
a table of finished jobs (read from plans and from the transaction's own statistics, not from
timings)."""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import io
import itertools
import os
import pty
import random
import re
import signal
import struct
import sys
import termios
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import asyncpg
import msgspec
import pytest
from rich.console import Console
from rich.live import Live
from typer.testing import CliRunner, Result

import sweepq
from factories import count_jobs, create_items
from sweepq.cli import cli
from sweepq.cli.top import TopScreen, watch
from sweepq.cli.top_frame import (
    Estimate,
    Frame,
    QueueLine,
    SamplePlan,
    WindowName,
    busy_plan,
    estimate,
    probe_plans,
    queue_lines,
    read_frame,
    spread_ranges,
)
from sweepq.cli.top_render import Fit, top_view
from sweepq.core.admin import (
    KeyLoad,
    QueueFinished,
    QueueLive,
    SampleCount,
    WorkerConnections,
    key_load,
)
from sweepq.core.ident import ident
from sweepq.core.jobs import JobState
from sweepq.sweeps.app import App
from sweepq.testing import drain
from waiting import wait_until

AT = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
NO_DATABASE = "postgresql://x@127.0.0.1:1/x"  # nothing listens there

_runner_lock = anyio.Lock()


async def invoke(args: Sequence[str], *, env: Mapping[str, str | None] | None = None) -> Result:
    """Run `sweepq ARGS` in a thread (the command runs its own event loop), 100 columns wide."""
    base: dict[str, str | None] = {
        "SWEEPQ_DSN": None,
        "DATABASE_URL": None,
        "SWEEPQ_SCHEMA": None,
        "COLUMNS": "100",
    }
    runner = CliRunner(env={**base, **(env or {})})
    async with _runner_lock:
        return await anyio.to_thread.run_sync(lambda: runner.invoke(cli, list(args)))


def db(app: sweepq.App) -> list[str]:
    return ["--dsn", app.dsn, "--schema", app.schema]


def cells(text: str, first: str) -> list[str]:
    """The cells of the table row that starts with `first` (cells are two spaces apart)."""
    for line in text.splitlines():
        found = re.split(r"\s{2,}", line.strip())
        if found[0] == first:
            return found
    raise AssertionError(f"no row {first!r} in:\n{text}")


def text_of(frame: Frame, *, trouble: str | None = None, width: int = 100) -> str:
    console = Console(record=True, width=width)
    console.print(top_view(frame, trouble=trouble))
    return console.export_text()


def a_frame(**changes: Any) -> Frame:
    fields: dict[str, Any] = {
        "schema": "sweepq",
        "at": AT,
        "since": None,
        "jobs_estimate": 1_000_000,
        "queues": [],
        "runs": [],
        "more_runs": False,
        "keys": [],
        "workers": [],
        "leader": None,
        "finished_read": 0,
        "finished_read_limit": 10_000,
        "finished_read_since": None,
        "estimates": [],
    }
    fields.update(changes)
    return Frame(**fields)


def by_queue(lines: Sequence[QueueLine]) -> dict[str, QueueLine]:
    return {q.queue: q for q in lines}


# figures ------------------------------------------------------------------------------------


def counted(queue: str, failed: int, completed: int, since: int, read: int,
            cut: datetime | None = None) -> QueueFinished:  # fmt: skip
    return QueueFinished(queue, failed, completed, since, read, cut)


def part(window: WindowName, jobs: dict[str, dict[str, int]], *, exact: bool = False,
         fraction: float = 0.05) -> Estimate:  # fmt: skip
    return Estimate(
        window=window, start=AT - timedelta(hours=1), cut=AT - timedelta(seconds=30),
        fraction=fraction, sampled=100, exact=exact, jobs=jobs,
    )  # fmt: skip


def test_the_rate_is_the_jobs_finished_between_two_frames_over_the_time_between_them() -> None:
    live = [QueueLive("mail", 4, 2, 1, 12.5)]
    finished = [counted("default", 2, 30, 10, 40)]

    first = by_queue(queue_lines(live, finished, [], at=AT, since=None))
    assert first["default"].rate is None  # the first frame has nothing to count from
    assert first["mail"] == QueueLine(
        queue="mail", due=4, scheduled=2, running=1, failed_last_hour=0,
        failed_last_hour_is_estimate=False, completed_last_minute=0,
        completed_last_minute_is_estimate=False, rate=None, rate_is_estimate=False,
        oldest_due_seconds=12.5,
    )  # fmt: skip

    since = AT - timedelta(seconds=2)
    later = by_queue(queue_lines(live, finished, [], at=AT, since=since))
    default = later["default"]
    assert (default.rate, default.rate_is_estimate) == (5.0, False)  # 10 jobs in 2 s
    assert (default.failed_last_hour, default.completed_last_minute) == (2, 30)
    assert not default.failed_last_hour_is_estimate
    assert not default.completed_last_minute_is_estimate
    assert later["mail"].rate == 0.0


def test_a_window_counted_in_part_adds_the_estimate_of_the_rest_and_says_so() -> None:
    cut = AT - timedelta(seconds=30)
    finished = [counted("a", 3, 40, 8, 60, cut), counted("b", 0, 10, 2, 41, cut)]
    hour = part("1h", {"a": {"failed": 200, "completed": 9_000}, "c": {"failed": 7}})
    lines = by_queue(queue_lines([], finished, [hour], at=AT, since=AT - timedelta(seconds=2)))
    a = lines["a"]
    assert (a.failed_last_hour, a.failed_last_hour_is_estimate) == (203, True)
    assert (a.completed_last_minute, a.completed_last_minute_is_estimate) == (40, False)
    assert (a.rate, a.rate_is_estimate) == (4.0, False)
    assert (lines["b"].failed_last_hour, lines["b"].failed_last_hour_is_estimate) == (0, True)
    # A queue seen only in the sample has a line too.
    assert (lines["c"].failed_last_hour, lines["c"].due) == (7, 0)

    minute = part("1m", {"a": {"completed": 120, "failed": 1}})
    recent = part("since", {"a": {"completed": 10, "failed": 1, "cancelled": 1}})
    both = by_queue(queue_lines([], finished, [minute, recent], at=AT, since=AT - timedelta(2)))
    assert (both["a"].completed_last_minute, both["a"].completed_last_minute_is_estimate) == (
        160, True
    )  # fmt: skip
    assert (both["a"].rate, both["a"].rate_is_estimate) == (20 / 2 / 86_400, True)

    # A sample that read all of the rest is a count: nothing is flagged.
    whole = part("1h", {"a": {"failed": 5}}, exact=True, fraction=1.0)
    exact = by_queue(queue_lines([], finished, [whole], at=AT, since=None))["a"]
    assert (exact.failed_last_hour, exact.failed_last_hour_is_estimate) == (8, False)


def test_only_the_windows_counting_stopped_short_of_are_probed() -> None:
    assert probe_plans(at=AT, since=None, cut=None) == []
    # Counting stopped 90 s back: the hour is probed, the minute and the 2 s are not.
    cut = AT - timedelta(seconds=90)
    plans = probe_plans(at=AT, since=AT - timedelta(seconds=2), cut=cut, ranges=10, limit=5)
    assert [(p.window, p.fraction, p.limit, len(p.ranges)) for p in plans] == [("1h", 1.0, 5, 10)]
    (hour,) = plans
    tick = timedelta(microseconds=1)
    # The part not counted, (an hour ago, cut], in ranges end to end.
    assert hour.ranges[0][0] == AT - timedelta(hours=1) + tick
    assert hour.ranges[-1][1] == cut + tick
    assert all(b == a for (_, b), (a, _) in itertools.pairwise(hour.ranges))
    # A previous frame older than the hour is probed back to it.
    old = probe_plans(at=AT, since=AT - timedelta(hours=2), cut=cut)
    assert [p.window for p in old] == ["1h", "since"]


def test_the_busy_ranges_of_a_probe_are_sampled_and_the_others_counted() -> None:
    cut = AT - timedelta(seconds=90)
    (probe,) = probe_plans(at=AT, since=None, cut=AT - timedelta(seconds=90), ranges=4, limit=5)
    quiet = [SampleCount(0, "q", JobState.FAILED, 2, probe.ranges[0][0])]
    full = [SampleCount(1, "q", JobState.COMPLETED, 5, probe.ranges[1][0] + timedelta(seconds=1))]
    found = [quiet, full, [], []]
    busy = busy_plan(probe, found, rows=100, ranges=4, limit=50, rng=random.Random(2))
    assert busy is not None
    # Only within the range that held 5 or more: ~877 s holding ~5 a second.
    assert all(probe.ranges[1][0] <= a < b <= probe.ranges[1][1] for a, b in busy.ranges)
    assert busy.fraction == pytest.approx(100 / (5 * (probe.ranges[1][1] - probe.ranges[1][0])
                                                 .total_seconds()), rel=0.01)  # fmt: skip
    assert busy_plan(probe, [quiet, [], [], []]) is None

    sampled = [[SampleCount(0, "q", JobState.COMPLETED, 7, busy.ranges[0][0])]] + [
        [] for _ in busy.ranges[1:]
    ]
    part = estimate(probe, found, busy, sampled)
    assert part.jobs == {"q": {"failed": 2, "completed": round(7 / busy.fraction)}}
    assert (part.exact, part.sampled, part.fraction) == (False, 14, busy.fraction)
    whole = estimate(probe, [quiet, [], [], []], None, [])
    assert (whole.jobs, whole.exact) == ({"q": {"failed": 2}}, True)
    assert cut == probe.cut


def test_the_ranges_read_every_instant_with_the_same_chance_whatever_the_offset() -> None:
    low = AT - timedelta(hours=1)
    high = AT
    for offset in (0.0, 0.37, 0.999):
        ranges, fraction = spread_ranges(low, high, 100, 0.02, offset)
        covered = sum(((b - a) for a, b in ranges), timedelta())
        assert covered / (high - low) == pytest.approx(fraction, rel=1e-6)
        assert fraction == pytest.approx(0.02, rel=1e-3)
        assert all(low <= a < b <= high for a, b in ranges)
        assert all(b1 <= a2 for (_, b1), (a2, _) in itertools.pairwise(ranges))
    # An instant is read when its place in its period falls in the range: over offsets drawn
    # evenly, 2 % of the draws read it, wherever it is.
    instant = low + timedelta(minutes=17, seconds=3.3)
    draws = [spread_ranges(low, high, 100, 0.02, k / 1000)[0] for k in range(1000)]
    hits = sum(any(a <= instant < b for a, b in ranges) for ranges in draws)
    assert hits == pytest.approx(20, abs=1)


def sample_of(finished: Sequence[tuple[datetime, str, str]],
              plan: SamplePlan) -> list[list[SampleCount]]:  # fmt: skip
    """What top_job_finished_sample reads of jobs finished at those times (in Python): per
    range of `plan`, its jobs."""
    out: list[list[SampleCount]] = []
    ordered = sorted(finished)
    for a, b in plan.ranges:
        first = bisect.bisect_left(ordered, (a,))
        last = min(bisect.bisect_left(ordered, (b,)), first + plan.limit)
        inside = ordered[first:last]
        groups: dict[tuple[str, str], list[datetime]] = {}
        for at, queue, state in inside:
            groups.setdefault((queue, state), []).append(at)
        out.append([SampleCount(0, q, JobState(s), len(t), max(t))
                    for (q, s), t in sorted(groups.items())])  # fmt: skip
    return out


def test_an_estimate_is_right_on_average_however_bursty_the_hour_was() -> None:
    # The newest 1,000 jobs finished in the last 20 s; before them, a burst of 30,000 jobs
    # (90 of them failed) 40 minutes ago, and a trickle of 3,000 over the hour, 30 of them
    # failed. Scaling the newest 1,000 to the hour at their rate would say ~180,000 jobs.
    rng = random.Random(7)
    jobs = [(AT - timedelta(seconds=rng.uniform(0, 20)), "q", "completed") for _ in range(1_000)]
    burst = AT - timedelta(minutes=40)
    jobs += [(burst + timedelta(seconds=rng.uniform(0, 30)), "q", "failed" if i % 333 == 0
              else "completed") for i in range(30_000)]  # fmt: skip
    jobs += [(AT - timedelta(seconds=rng.uniform(20, 3_599)), "q", "failed" if i % 100 == 0
              else "completed") for i in range(3_000)]  # fmt: skip
    cut = min(j[0] for j in jobs if j[0] > AT - timedelta(seconds=20))
    failed = sum(1 for at, _, state in jobs if state == "failed" and at <= cut)
    total = sum(1 for at, _, _ in jobs if at <= cut)
    (probe,) = probe_plans(at=AT, since=None, cut=cut)[:1]
    probed = sample_of(jobs, probe)
    seen_failed, seen_total = [], []
    for draw in range(100):
        busy = busy_plan(probe, probed, rows=2_000, rng=random.Random(draw))
        assert busy is not None
        hour = estimate(probe, probed, busy, sample_of(jobs, busy))
        assert not hour.exact
        assert hour.sampled < 5_000 + 2 * 2_000
        seen_failed.append(hour.of("q", "failed"))
        seen_total.append(hour.of("q", "completed", "failed"))
    assert sum(seen_total) / 100 == pytest.approx(total, rel=0.05)
    assert sum(seen_failed) / 100 == pytest.approx(failed, rel=0.15)


async def test_the_windows_equal_a_count_of_the_jobs_table_at_the_same_moment(app: App) -> None:
    await finish_at(app, WINDOW_JOBS)
    async with app.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        # Counted in full, then counting only the newest 3 with the rest sampled whole.
        frame = await read_frame(app, conn=conn)
        earlier = msgspec.structs.replace(frame, at=frame.at - timedelta(seconds=5))
        frames = [
            await read_frame(app, earlier, conn=conn),
            await read_frame(app, earlier, conn=conn, finished_limit=3, sample_rows=1_000_000),
        ]
        truth = {r["queue"]: r for r in await conn.fetch(WINDOW_COUNT.format(
            schema=ident(app.schema)), earlier.at)}  # fmt: skip
    assert frames[1].finished_read_since is not None  # the newest 3 were counted, no more
    assert frames[1].estimates
    assert all(e.exact for e in frames[1].estimates)
    for f in frames:
        lines = by_queue(f.queues)
        assert set(lines) == {"a", "b"}
        for name, line in lines.items():
            expected = truth[name]
            assert line.failed_last_hour == expected["failed_last_hour"]
            assert line.completed_last_minute == expected["completed_last_minute"]
            assert line.rate == pytest.approx(expected["finished_since"] / 5)
            assert not line.failed_last_hour_is_estimate
            assert not line.rate_is_estimate
            assert not line.completed_last_minute_is_estimate
    assert (truth["a"]["failed_last_hour"], truth["a"]["completed_last_minute"]) == (2, 2)


async def test_a_window_past_what_a_frame_counts_is_estimated_and_labelled(app: App) -> None:
    # A burst of 200 jobs half an hour ago: more than a probe of its range reads.
    burst = [("a", "failed" if i % 10 == 0 else "completed", 1_800 + i / 1_000) for i in range(200)]
    await finish_at(app, [*WINDOW_JOBS, *burst])
    frame = await read_frame(app, finished_limit=2, sample_rows=10, rng=random.Random(3))
    assert frame.finished_read_since is not None
    (hour,) = [e for e in frame.estimates if e.window == "1h"]
    assert not hour.exact
    assert hour.fraction < 1
    a = by_queue(frame.queues)["a"]
    assert a.failed_last_hour_is_estimate
    assert not a.completed_last_minute_is_estimate  # the minute was read whole by its probe
    text = text_of(frame)
    assert cells(text, "a")[4].startswith("~")
    flat = " ".join(text.split())
    assert "~ estimated: a frame counts the newest 2 finished jobs" in flat
    assert "the hour, ~" in flat


# Seconds ago each job finished: two queues, every state, on both sides of each window's start.
WINDOW_JOBS = [
    ("a", "completed", 1), ("a", "completed", 30), ("a", "completed", 61), ("a", "failed", 3),
    ("a", "failed", 3_000), ("a", "failed", 3_700), ("a", "cancelled", 2), ("b", "completed", 59),
    ("b", "failed", 1_800), ("b", "failed", 7_200), ("b", "cancelled", 600), ("b", "completed", 4),
]  # fmt: skip
WINDOW_COUNT = """
SELECT queue,
       count(*) FILTER (WHERE state = 'failed' AND finished_at > now() - interval '1 hour')
           AS failed_last_hour,
       count(*) FILTER (WHERE state = 'completed' AND finished_at > now() - interval '1 minute')
           AS completed_last_minute,
       count(*) FILTER (WHERE finished_at > $1) AS finished_since
FROM {schema}.jobs
WHERE state IN ('completed', 'failed', 'cancelled')
GROUP BY queue
"""


async def finish_at(app: App, jobs: Sequence[tuple[str, str, float]]) -> None:
    """Jobs of those queues and states, finished that many seconds ago."""
    await app.pool.executemany(
        f"INSERT INTO {ident(app.schema)}.jobs (task, queue, state, attempt, max_attempts,"
        " finished_at, failure_reason)"
        f" VALUES ('t', $1, $2::text::{ident(app.schema)}.job_state, 1, 1,"
        " now() - make_interval(secs => $3), CASE WHEN $2 = 'failed' THEN 'error' END)",
        jobs,
    )


# the screen ---------------------------------------------------------------------------------


def stripe(**changes: Any) -> KeyLoad:
    return key_load(**{"key": "stripe", "max_running": 2, "running": 2, "running_jobs": 2,
                       "due": 40, "scheduled": 3, **changes})  # fmt: skip


def test_the_screen_marks_estimates_and_unknown_rates_and_fits_100_columns() -> None:
    cut = AT - timedelta(seconds=30)
    hour = part("1h", {"mail": {"failed": 357, "completed": 40_000}}, fraction=0.025)
    lines = queue_lines(
        [QueueLive("mail", 1_204, 30, 8, 95.0), QueueLive("q" * 60, 1, 0, 0, 1.0)],
        [counted("mail", 3, 80, 8, 100, cut)],
        [hour],
        at=AT,
        since=AT - timedelta(seconds=2),
    )
    worker = WorkerConnections("host-" + "x" * 44, 3, 125.0, 8)
    frame = a_frame(
        queues=lines,
        since=AT - timedelta(seconds=2),
        keys=[stripe(), stripe(key="k" * 70, max_running=None, due=0, running=0)],
        workers=[worker],
        finished_read=100,
        finished_read_limit=99,
        finished_read_since=cut,
        estimates=[hour],
    )
    text = text_of(frame)
    assert all(len(line) <= 100 for line in text.splitlines()), text
    assert cells(text, "mail") == ["mail", "1,204", "30", "8", "~360", "80", "4.0", "2m"]
    assert cells(text, "stripe") == ["stripe", "2/2", "40", "3", "full"]
    # A key whose rate is spent shows it, and why its due jobs wait.
    rated = text_of(
        a_frame(
            queues=lines,
            since=AT - timedelta(seconds=2),
            keys=[
                stripe(
                    max_running=None,
                    running=0,
                    oldest_due_seconds=95.0,
                    rate_count=5,
                    rate_seconds=3600.0,
                    rate_used=5,
                )
            ],
        )
    )
    assert cells(rated, "stripe") == [
        "stripe", "0/-", "40", "3", "2m", "5/5 per 1.0h", "rate spent"
    ]  # fmt: skip
    assert cells(text, worker.worker_id) == [worker.worker_id, "3", "2m", "8"]
    assert "every 2s  jobs ~1,000,000" in text
    flat = " ".join(text.split())
    assert "~ estimated: a frame counts the newest 99 finished jobs (here those of the last 30s)" \
        in flat  # fmt: skip
    assert "the hour, ~40,357 jobs, from a 2.5% sample spread over it (100 jobs read)" in flat
    assert "maintenance leader: none" in text
    assert "no active sweep runs" in text

    first = text_of(a_frame(queues=queue_lines([QueueLive("mail", 1, 0, 0, 1.0)], [], [], at=AT,
                                               since=None)))  # fmt: skip
    assert cells(first, "mail")[6] == "?"
    assert "estimated" not in first


# the terminal -------------------------------------------------------------------------------

CLEAR = "\x1b[2J"
ESCAPES = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|\][^\x07]*\x07|[()][A-Z0-9])")


def screen_lines(output: str) -> list[str]:
    """The lines drawn after the last clearing of the screen, as they read."""
    drawn = output[output.rindex(CLEAR) :] if CLEAR in output else output
    return ESCAPES.sub("", drawn).replace("\r", "").split("\n")


def tall_frame() -> Frame:
    """A frame taller than 24 lines, with rows wider than 80 columns."""
    queues = [QueueLive(f"queue-{n:02d}-" + "x" * 20, 1_000 * n, n, n, 60.0) for n in range(30)]
    lines = queue_lines(queues, [], [], at=AT, since=None)
    worker = WorkerConnections("host-" + "x" * 44, 3, 125.0, 8)
    return a_frame(queues=lines, workers=[worker], keys=[stripe()])


def test_a_frame_drawn_after_a_resize_fits_the_new_size_and_nothing_else_is_left() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=110, height=45, color_system=None)
    live = Live(console=console, screen=True, auto_refresh=False, redirect_stdout=False,
                redirect_stderr=False)  # fmt: skip
    with live:
        screen = TopScreen(live)
        screen.show(tall_frame(), None)
        big = screen_lines(out.getvalue())
        console.size = (80, 24)  # the terminal shrank
        screen.draw(clear=True)
        small = screen_lines(out.getvalue())
    assert len(big) == 45
    assert max(len(line.rstrip()) for line in big) > 80
    assert len(small) == 24, small
    assert all(len(line) <= 80 for line in small), small
    assert small[0].startswith("sweepq top  schema sweepq")
    # Cut to fit, saying so on its last line (the leader, at the bottom, is not shown).
    assert re.fullmatch(r"\.\.\. \d+ more lines: a taller window shows them\s*", small[-1])
    assert not any("maintenance leader" in line for line in small)


def test_a_frame_that_fits_is_drawn_whole() -> None:
    console = Console(record=True, width=100, height=200)
    console.print(Fit(top_view(tall_frame())))
    text = console.export_text()
    assert "more lines" not in text
    assert "maintenance leader: none" in text


async def test_a_resized_terminal_gets_the_frame_at_its_new_size_at_once(app: App) -> None:
    master, terminal = pty.openpty()
    resize(terminal, 110, 45)
    # The size given at start in COLUMNS and LINES is not what a resized terminal has.
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "110", "LINES": "45"}
    env.pop("SWEEPQ_DSN", None)
    command = [sys.executable, "-m", "sweepq", "top", "--interval", "3600", *db(app)]
    process = await anyio.open_process(
        command, stdin=terminal, stdout=terminal, stderr=terminal, env=env
    )
    os.close(terminal)
    os.set_blocking(master, False)
    output = bytearray()

    async def drawn(lines: int) -> bool:
        """A whole frame of `lines` lines has been drawn since the last clearing."""
        with contextlib.suppress(BlockingIOError):
            output.extend(os.read(master, 1 << 16))
        assert process.returncode is None, output.decode(errors="replace")
        shown = screen_lines(output.decode(errors="replace"))
        return len(shown) >= lines and "maintenance leader" in "".join(shown)

    try:
        await wait_until(lambda: drawn(45), what="the first frame", timeout=30)
        assert len(screen_lines(output.decode(errors="replace"))) == 45
        resize(master, 80, 24)
        output.clear()
        process.send_signal(signal.SIGWINCH)
        # The next frame is an hour away: what is drawn now is the last one, at the new size.
        await wait_until(lambda: drawn(24), what="a redraw", timeout=10)
        shown = screen_lines(output.decode(errors="replace"))
        assert output.decode(errors="replace").count(CLEAR) == 1
        assert len(shown) == 24, shown
        assert all(len(line) <= 80 for line in shown), shown
        assert shown[0].startswith(f"sweepq top  schema {app.schema}")
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C
        with anyio.move_on_after(10):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
        os.close(master)


def resize(fd: int, columns: int, lines: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))


def test_a_frame_that_could_not_be_refreshed_says_so_above_the_last_figures() -> None:
    text = text_of(a_frame(), trouble="09:00:04: reading failed (OSError: refused)")
    assert text.splitlines()[1] == "09:00:04: reading failed (OSError: refused)"


class Stop(Exception):
    """Ends a watch in a test."""


async def test_watching_shows_the_last_frame_with_the_error_while_the_database_is_away() -> None:
    steps: list[Frame | Exception] = [
        a_frame(), OSError("connection refused"), a_frame(at=AT + timedelta(1)), Stop()
    ]  # fmt: skip
    frames = iter(steps)
    seen: list[tuple[datetime, str | None]] = []
    previous: list[Frame | None] = []

    async def read(app: App, last: Frame | None) -> Frame:
        previous.append(last)
        step = next(frames)
        if isinstance(step, BaseException):
            raise step
        return step

    def show(frame: Frame, trouble: str | None) -> None:
        seen.append((frame.at, trouble))

    with pytest.raises(Stop):
        await watch(App("postgresql://x/y"), show, interval=0.01, once=False, read=read)
    assert [at for at, _ in seen] == [AT, AT, AT + timedelta(1)]
    assert seen[0][1] is None
    assert "reading failed (OSError: connection refused)" in (seen[1][1] or "")
    assert "figures of" in (seen[1][1] or "")
    assert seen[2][1] is None
    # After the failure, the rate still counts from the last frame read.
    assert [p is None for p in previous] == [True, False, False, False]

    failing = iter([OSError("refused")])

    async def unreachable(app: App, last: Frame | None) -> Frame:
        raise next(failing)

    with pytest.raises(OSError, match="refused"):  # no frame yet: the command ends with it
        await watch(App("postgresql://x/y"), show, interval=0.01, once=False, read=unreachable)


# the command --------------------------------------------------------------------------------


class Touch(sweepq.TableSweep):
    name = "touch"
    key = ("id",)
    queue = "sweeps"

    async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
        return None


async def start_touch(app: App, items: int) -> int:
    await create_items(app, items)
    app.register_sweep(type("Touch", (Touch,), {"table": f"{app.schema}.items"}))
    return (await app.start_sweep("touch")).run_id


async def leader_of(app: App) -> str | None:
    found: str | None = await app.pool.fetchval(
        f"SELECT worker_id FROM {ident(app.schema)}.leaders WHERE role = 'maintenance'"
    )
    return found


@contextlib.asynccontextmanager
async def busy(app: App) -> AsyncIterator[tuple[sweepq.Worker, int]]:
    """Jobs in several queues and states, a full concurrency key, an active sweep run, and a
    live worker holding one job of the key, as the maintenance leader; the run's id."""

    @app.task(name="ok")
    async def ok(ctx: sweepq.Context) -> None:
        return None

    @app.task(name="boom", max_attempts=1)
    async def boom(ctx: sweepq.Context) -> None:
        raise RuntimeError("boom")

    gate = anyio.Event()

    @app.task(name="pay", queue="payments")
    async def pay(ctx: sweepq.Context) -> None:
        await gate.wait()

    for _ in range(3):
        await app.enqueue("ok")
    for _ in range(2):
        await app.enqueue("boom")
    assert await drain(app, queues=["default"]) == {"completed": 3, "failed": 2}
    for n in range(6):
        await app.enqueue("ok", queue="mail", delay=3600 if n >= 4 else 0)
    await app.set_concurrency_limit("stripe", 1)
    for _ in range(5):
        await app.enqueue("pay", concurrency_key="stripe")
    run_id = await start_touch(app, 200)

    worker = sweepq.Worker(
        app, queues=["payments"], concurrency=2, poll_seconds=0.1, maintenance_seconds=0.2,
        leader_ttl_seconds=2.0,
    )  # fmt: skip
    async with worker, anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await wait_until(lambda: _is(count_jobs(app, "running"), 1), what="a job runs", timeout=30)
        await wait_until(lambda: _is(leader_of(app), worker.id), what="it leads", timeout=30)
        try:
            yield worker, run_id
        finally:
            gate.set()
            worker.stop()


async def _is(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def test_top_once_shows_queues_runs_keys_workers_and_the_leader(app: App) -> None:
    async with busy(app) as (worker, run_id):
        result = await invoke(["top", "--once", *db(app)])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert all(len(line) <= 100 for line in text.splitlines()), text
    assert text.startswith(f"sweepq top  schema {app.schema}  ")

    assert cells(text, "queue") == [
        "queue", "due", "scheduled", "running", "failed 1h", "completed 1m", "rate/s",
        "oldest due",
    ]  # fmt: skip
    assert cells(text, "default") == ["default", "0", "0", "0", "2", "3", "?"]
    mail = cells(text, "mail")
    assert mail[:7] == ["mail", "4", "2", "0", "0", "0", "?"]
    assert re.fullmatch(r"\d+s", mail[7])  # the oldest due job's age
    assert cells(text, "payments")[:7] == ["payments", "4", "0", "1", "0", "0", "?"]
    assert cells(text, "sweeps")[:4] == ["sweeps", "1", "0", "0"]  # the run's first link

    assert f"#{run_id} touch" in text
    assert "0/200" in text
    key = cells(text, "stripe")
    assert key[:4] == ["stripe", "1/1", "4", "0"]
    assert re.fullmatch(r"\d+s", key[4])  # its oldest due job's age
    assert key[5:] == ["full"]

    row = cells(text, worker.id[:49])
    assert 2 <= int(row[1]) <= 4  # its pool (2 to 3) and its listening connection
    assert re.fullmatch(r"\d+s", row[2])
    assert row[3] == "1"  # the job of `stripe` it runs
    assert f"maintenance leader: {worker.id}, elected " in " ".join(text.split())
    assert "estimated" not in text


async def test_top_json_has_the_same_figures(app: App) -> None:
    async with busy(app) as (worker, run_id):
        result = await invoke(["top", "--once", "--json", *db(app)])
    assert result.exit_code == 0, result.output
    frame = msgspec.json.decode(result.stdout, type=Frame)
    assert frame.schema == app.schema
    queues = by_queue(frame.queues)
    assert set(queues) == {"default", "mail", "payments", "sweeps"}
    default = queues["default"]
    assert (default.failed_last_hour, default.completed_last_minute, default.rate) == (2, 3, None)
    assert (queues["mail"].due, queues["mail"].scheduled) == (4, 2)
    assert (queues["payments"].due, queues["payments"].running) == (4, 1)
    assert [(r.id, r.sweep, r.state) for r in frame.runs] == [(run_id, "touch", "running")]
    assert [(k.key, k.max_running, k.running, k.due, k.binding) for k in frame.keys] == [
        ("stripe", 1, 1, 4, True)
    ]
    mine = [w for w in frame.workers if w.worker_id == worker.id[:49]]
    assert [w.running for w in mine] == [1]
    assert frame.leader is not None
    assert frame.leader.worker_id == worker.id
    assert frame.jobs_estimate is None or frame.jobs_estimate >= 0
    assert (frame.finished_read, frame.finished_read_since) == (5, None)


async def test_the_rate_counts_the_jobs_finished_since_the_previous_frame(app: App) -> None:
    @app.task(name="ok", queue="fast")
    async def ok(ctx: sweepq.Context) -> None:
        return None

    first = await read_frame(app)
    for _ in range(4):
        await app.enqueue("ok")
    await drain(app, queues=["fast"])
    second = await read_frame(app, first)

    fast = by_queue(second.queues)["fast"]
    seconds = (second.at - first.at).total_seconds()
    assert fast.rate == pytest.approx(4 / seconds)
    assert not fast.rate_is_estimate
    assert fast.completed_last_minute == 4
    assert second.since == first.at


async def test_a_frame_past_its_read_limit_reads_the_rest_whole_when_it_is_small(app: App) -> None:
    @app.task(name="ok", queue="fast")
    async def ok(ctx: sweepq.Context) -> None:
        return None

    for _ in range(6):
        await app.enqueue("ok")
    await drain(app, queues=["fast"])

    frame = await read_frame(app, finished_limit=4)

    assert frame.finished_read_since is not None  # counting stopped after 4 (and one more)
    assert frame.estimates
    assert all(e.exact and e.fraction == 1.0 for e in frame.estimates)
    fast = by_queue(frame.queues)["fast"]
    assert (fast.completed_last_minute, fast.completed_last_minute_is_estimate) == (6, False)
    assert (fast.failed_last_hour, fast.failed_last_hour_is_estimate) == (0, False)
    assert "estimated" not in text_of(frame)


async def test_an_unreachable_database_ends_top_with_one_line() -> None:
    for args in (["top", "--once"], ["top", "--once", "--json"]):
        result = await invoke([*args, "--dsn", NO_DATABASE])
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("error: ")
        assert "cannot reach PostgreSQL" in lines[0]
    refused = await invoke(["top", "--once", "--interval", "0"])
    assert refused.exit_code == 2


# the cost of a frame ------------------------------------------------------------------------

OLD_FINISHED = 100_000
SEED = """
INSERT INTO {schema}.jobs (task, queue, state, attempt, max_attempts, run_at, created_at,
                           attempted_at, finished_at, failure_reason)
SELECT 'old', 'q' || (i % 3), 'completed', 1, 1, f - interval '1 s', f - interval '2 s', f, f,
       NULL
FROM generate_series(1, $1::int) AS i,
     LATERAL (SELECT now() - interval '2 days' - i * interval '1 s' AS f) AS t
"""
RECENT = """
INSERT INTO {schema}.jobs (task, queue, state, attempt, max_attempts, run_at, finished_at,
                           failure_reason, concurrency_key, worker_id, lease_expires_at)
SELECT 'new', 'q1', s::{schema}.job_state, 1, 1, now() - interval '5 s',
       CASE WHEN s IN ('completed', 'failed') THEN now() - i * interval '10 s' END,
       CASE WHEN s = 'failed' THEN 'error' END,
       CASE WHEN i % 2 = 0 THEN 'k' || i END,
       CASE WHEN s = 'running' THEN 'w' END,
       CASE WHEN s = 'running' THEN now() + interval '1 minute' END
FROM unnest(ARRAY['completed', 'failed', 'available', 'running']) AS s,
     generate_series(1, 5) AS i
"""
PARAMS = {
    "top_jobs_estimate": "('{schema}')",
    "top_job_live": "",
    "top_job_finished": "(now() - interval '2 s', 10000)",
    # Over the old jobs, and over the recent ones: each range stops at its limit.
    "top_job_finished_sample": "(ARRAY[now() - interval '3 days', now() - interval '10 min'],"
    " ARRAY[now() - interval '1 day', now()], 40)",
    "top_concurrency_key_busiest": "(10)",
    "top_worker_list": "",
    "top_leader": "",
}
VISITED_MOST = 100  # rows of `jobs` any one statement may visit: the 20 recent ones, and slack


@pytest.fixture
async def finished_history(app: App) -> App:
    """100,000 jobs completed two days ago, and five jobs per state of the last minutes."""
    schema = ident(app.schema)
    await app.pool.execute(SEED.format(schema=schema), OLD_FINISHED)
    await app.pool.execute(RECENT.format(schema=schema))
    await app.pool.execute(f"ANALYZE {schema}.jobs")
    await start_touch(app, 50)
    return app


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


def jobs_rows_visited(node: dict[str, Any]) -> int:
    """Rows a scan of `jobs` read: those it returned, and those its filters threw away."""
    returned = node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
    thrown = node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)
    return int(returned + thrown)


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize("statement", sorted(PARAMS))
async def test_no_statement_of_a_frame_reads_the_finished_jobs_outside_its_windows(
    finished_history: App, statement: str, plan_cache_mode: str
) -> None:
    app = finished_history
    conn = await asyncpg.connect(app.dsn)
    try:
        await conn.execute(f"SET plan_cache_mode = {plan_cache_mode}")
        await conn.execute(f"PREPARE top_statement AS {app.queries.sql[statement]}")
        args = PARAMS[statement].format(schema=app.schema)  # t_<hex>: safe as a literal
        explain = f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE top_statement{args}"
        plan = msgspec.json.decode((await conn.fetchval(explain)).encode())[0]["Plan"]
    finally:
        await conn.close()
    scans = [n for n in plan_nodes(plan) if n.get("Relation Name") == "jobs"]
    kinds = {n["Node Type"] for n in scans}
    assert "Seq Scan" not in kinds, msgspec.json.encode(plan).decode()
    for scan in scans:
        assert scan.get("Index Name") or scan["Node Type"] == "Bitmap Heap Scan", scan
        assert jobs_rows_visited(scan) <= VISITED_MOST, msgspec.json.encode(scan).decode()


async def test_a_whole_frame_reads_jobs_through_indexes_and_only_a_few_rows(
    finished_history: App,
) -> None:
    app = finished_history
    # A connection of its own: the statistics below count what this session has not reported
    # yet, which is only the frames read here.
    conn = await asyncpg.connect(app.dsn)
    try:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            first = await read_frame(app, conn=conn)
            earlier = msgspec.structs.replace(first, at=first.at - timedelta(seconds=2))
            frame = await read_frame(app, earlier, conn=conn)
            stats = await conn.fetchrow(
                "SELECT seq_scan, seq_tup_read, idx_tup_fetch FROM pg_stat_xact_user_tables"
                " WHERE relid = $1::regclass",
                f"{ident(app.schema)}.jobs",
            )
    finally:
        await conn.close()
    assert stats is not None
    assert (stats["seq_scan"], stats["seq_tup_read"]) == (0, 0)
    assert stats["idx_tup_fetch"] <= 2 * VISITED_MOST  # two frames; none of the old jobs
    q1 = by_queue(frame.queues)["q1"]
    assert (q1.due, q1.running, q1.failed_last_hour, q1.completed_last_minute) == (5, 5, 5, 5)
    assert q1.rate == 0.0
    assert frame.finished_read == 10  # the recent ones; none of the 100,000 old ones
    assert [r.sweep for r in frame.runs] == ["touch"]


async def test_a_paused_queue_is_marked_and_listed_even_without_live_jobs(app: App) -> None:
    await app.pause_queue("mail", reason="provider down")
    await app.pause_queue("idle")
    result = await invoke(["top", "--once", *db(app)])
    assert result.exit_code == 0, result.output
    assert cells(result.stdout, "idle paused")[:2] == ["idle paused", "0"]
    frame = msgspec.json.decode((await invoke(["top", "--once", "--json", *db(app)])).stdout,
                                type=Frame)  # fmt: skip
    assert {q.queue: q.paused for q in frame.queues} == {"idle": True, "mail": True}
    await app.resume_queue("idle")
    frame = msgspec.json.decode((await invoke(["top", "--once", "--json", *db(app)])).stdout,
                                type=Frame)  # fmt: skip
    assert {q.queue: q.paused for q in frame.queues} == {"mail": True}


async def test_top_on_an_unmigrated_schema_names_the_migrations_to_run(app: App) -> None:
    result = await invoke(["top", "--once", "--dsn", app.dsn, "--schema", "never_migrated"])
    assert result.exit_code == 2, result.output
    assert "schema 'never_migrated'" in result.output
    assert "is not migrated" in result.output
    assert "sweepq migrate --schema never_migrated" in result.output
