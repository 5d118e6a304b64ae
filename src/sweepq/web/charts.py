"""The overview's chart, drawn on the server: completed and failed jobs per minute over the last
hour, as the geometry of SVG bars that the template writes out (no script draws it, so it shows
as soon as the page does, and the polled fragment redraws it)."""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec

from sweepq.core.browse import FinishedSeries

WIDTH = 1200
HEIGHT = 160
TOP = 14  # room for the scale's label
BOTTOM = 18  # room for the time labels
MINUTES = 60


class Bar(msgspec.Struct, frozen=True):
    x: float
    width: float
    completed_y: float
    completed_height: float
    failed_y: float
    failed_height: float
    title: str


class Chart(msgspec.Struct, frozen=True, kw_only=True):
    width: int
    height: int
    plot_bottom: float
    bars: list[Bar]
    peak: int  # the scale: jobs per minute at the top of the plot
    unread_width: float  # the part of the hour left of the cut (not read), from x = 0
    completed: int
    failed: int


def nice_ceiling(n: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... at or above n (at least 1)."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if step * m >= n:
                return step * m
        step *= 10


def minute_chart(series: FinishedSeries, at: datetime) -> Chart:
    """Bars for the 60 minutes up to `at` (the newest on the right)."""
    last = at.replace(second=0, microsecond=0)
    first = last - timedelta(minutes=MINUTES - 1)
    by_minute = {m.minute: m for m in series.minutes}
    peak = nice_ceiling(max((m.completed + m.failed for m in series.minutes), default=0))
    plot = HEIGHT - TOP - BOTTOM
    slot = WIDTH / MINUTES
    bars: list[Bar] = []
    for i in range(MINUTES):
        minute = first + timedelta(minutes=i)
        counts = by_minute.get(minute)
        done = counts.completed if counts else 0
        failed = counts.failed if counts else 0
        done_h = plot * done / peak
        failed_h = plot * failed / peak
        bottom = TOP + plot
        bars.append(
            Bar(
                x=round(i * slot + 1, 1),
                width=round(slot - 2, 1),
                completed_y=round(bottom - done_h, 1),
                completed_height=round(done_h, 1),
                failed_y=round(bottom - done_h - failed_h, 1),
                failed_height=round(failed_h, 1),
                title=f"{minute:%H:%M} UTC: {done:,} completed, {failed:,} failed",
            )
        )
    unread = 0.0
    if series.cut is not None:
        cut = series.cut.replace(second=0, microsecond=0)
        unread = max(0.0, min(WIDTH, (cut - first).total_seconds() / 60 * slot))
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        plot_bottom=TOP + plot,
        bars=bars,
        peak=peak,
        unread_width=round(unread, 1),
        completed=sum(m.completed for m in series.minutes),
        failed=sum(m.failed for m in series.minutes),
    )
