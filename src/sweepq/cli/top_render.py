"""The screen of `sweepq top`: a frame as a rich renderable that fits 100 columns (and 80).

A figure marked `~` is an estimate (its window held more finished jobs than a frame counts; the
last lines say how it was estimated); `?` is a figure not known yet (the rate, on the first
frame). On a terminal, a frame is cut to the terminal's height (`Fit`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from sweepq.core.admin import KeyLoad, Leader, WorkerConnections, rate_text
from sweepq.core.units import format_duration

from . import render, sweep_render
from .top_frame import Frame, QueueLine

# The right-aligned columns of each table, after its name column.
_QUEUE_FIGURES = (
    "due",
    "scheduled",
    "running",
    "failed 1h",
    "completed 1m",
    "rate/s",
    "oldest due",
)
_KEY_FIGURES = ("running/limit", "due", "scheduled", "oldest due", "rate")
_WORKER_FIGURES = ("connections", "connected", "running here")


def top_view(frame: Frame, *, trouble: str | None = None) -> RenderableType:
    """The whole screen: a header, queues, active sweep runs, busiest keys, workers, leader.

    `trouble` says why the frame shown is not fresh (the last read failed).
    """
    head: list[RenderableType] = [_header(frame)]
    if trouble:
        head.append(Text(trouble, style="bold red"))
    runs: list[RenderableType] = [_section("sweep runs"), sweep_render.sweep_progress(frame.runs)]
    if frame.more_runs:
        runs.append(Text("more runs are active: sweepq sweep status --active", style="dim"))
    sections = [
        Group(*head),
        _queues(frame.queues),
        Group(*runs),
        _keys(frame.keys),
        Group(_workers(frame.workers), _leader(frame.leader)),
    ]
    if frame.finished_read_since is not None and any(not e.exact for e in frame.estimates):
        sections.append(_estimated(frame, frame.finished_read_since))
    spaced: list[RenderableType] = []
    for section in sections:
        spaced += [Text(""), section] if spaced else [section]
    return Group(*spaced)


_WINDOWS = {"1h": "the hour", "1m": "the minute", "since": "the time since the last frame"}


def _estimated(frame: Frame, cut: datetime) -> Text:
    span = format_duration((frame.at - cut).total_seconds())
    text = Text(
        f"~ estimated: a frame counts the newest {frame.finished_read_limit:,} finished jobs "
        f"(here those of the last {span}); the rest of",
        style="dim",
    )
    for e in frame.estimates:
        if not e.exact:
            rest = sum(n for per in e.jobs.values() for n in per.values())
            text.append(
                f"\n  {_WINDOWS[e.window]}, ~{rest:,} jobs, from a {e.fraction * 100:.2g}% sample "
                f"spread over it ({e.sampled:,} jobs read)"
            )
    return text


class Fit:
    """A renderable cut to the height it is given (a terminal's), its last line saying how many
    lines did not fit; the width is the console's at each render, so a resized terminal gets a
    frame of its new size."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        height = max(1, options.height or options.size.height)
        lines = console.render_lines(self.renderable, options, pad=False)
        if len(lines) > height:
            hidden = len(lines) - height + 1
            note = Text(f"... {hidden} more lines: a taller window shows them", style="dim")
            lines = lines[: height - 1] + console.render_lines(note, options, pad=False)[:1]
        for i, line in enumerate(lines):
            yield from line
            if i < len(lines) - 1:
                yield Segment.line()


def _header(frame: Frame) -> Text:
    text = Text("sweepq top", style="bold")
    text.append(f"  schema {frame.schema}  {render.when(frame.at)}")
    if frame.since is not None:
        text.append(f"  every {format_duration((frame.at - frame.since).total_seconds())}")
    jobs = "?" if frame.jobs_estimate is None else f"~{frame.jobs_estimate:,}"
    text.append(f"  jobs {jobs}", style="dim")
    return text


def _section(title: str) -> Text:
    return Text(title, style="italic")


def _table(title: str, name: str, width: int, figures: Sequence[str]) -> Table:
    """A table with a title, a rule under its header, and two spaces between columns: first
    the column `name` (folded past `width`), then the right-aligned columns `figures`."""
    table = Table(
        box=box.SIMPLE_HEAD,
        title=title,
        title_justify="left",
        pad_edge=False,
        show_edge=False,
        collapse_padding=True,
    )
    table.add_column(name, overflow="fold", min_width=8, max_width=width)
    for column in figures:
        table.add_column(column, justify="right", no_wrap=True)
    return table


def _count(value: int, estimate: bool) -> str:
    return ("~" if estimate else "") + f"{value:,}"


def _rate(line: QueueLine) -> str:
    if line.rate is None:
        return "?"
    return ("~" if line.rate_is_estimate else "") + f"{line.rate:,.1f}"


def _queues(lines: Sequence[QueueLine]) -> RenderableType:
    if not lines:
        return Text("queues: no live jobs, and none finished in the last hour")
    table = _table("queues", "queue", 28, _QUEUE_FIGURES)
    for q in lines:
        table.add_row(
            Text(q.queue).append(" paused", style="bold yellow") if q.paused else q.queue,
            f"{q.due:,}",
            f"{q.scheduled:,}",
            f"{q.running:,}",
            Text(
                _count(q.failed_last_hour, q.failed_last_hour_is_estimate),
                style="red" if q.failed_last_hour else "",
            ),
            _count(q.completed_last_minute, q.completed_last_minute_is_estimate),
            _rate(q),
            "" if q.oldest_due_seconds is None else format_duration(q.oldest_due_seconds),
        )
    return table


def _keys(keys: Sequence[KeyLoad]) -> RenderableType:
    if not keys:
        return Text("concurrency keys: none has live jobs")
    table = _table("concurrency keys, most due jobs first", "key", 40, _KEY_FIGURES)
    table.add_column("", no_wrap=True)
    for k in keys:
        limit = "-" if k.max_running is None else str(k.max_running)
        table.add_row(
            k.key,
            f"{k.running}/{limit}",
            f"{k.due:,}",
            f"{k.scheduled:,}",
            "" if k.oldest_due_seconds is None else format_duration(k.oldest_due_seconds),
            rate_text(k),
            _key_flag(k),
        )
    return table


def _key_flag(k: KeyLoad) -> Text | str:
    """Why a key's due jobs wait: its limit is full, or its rate spent for this window."""
    why = [w for w, on in (("full", k.binding), ("rate spent", k.rate_binding)) if on]
    return Text(", ".join(why), style="yellow") if why else ""


def _workers(workers: Sequence[WorkerConnections]) -> RenderableType:
    if not workers:
        return Text("workers: none connected to this database")
    table = _table("workers connected to this database", "worker", 52, _WORKER_FIGURES)
    for w in workers:
        up = "?" if w.connected_seconds is None else format_duration(w.connected_seconds)
        table.add_row(w.worker_id, str(w.connections), up, f"{w.running:,}")
    return table


def _leader(leader: Leader | None) -> Text:
    if leader is None:
        return Text("maintenance leader: none (no worker runs run(): nothing is rescued or pruned)")
    text = Text("maintenance leader: ")
    text.append(leader.worker_id, style="bold")
    text.append(f", elected {format_duration(leader.elected_seconds)} ago, ")
    if leader.term_left_seconds >= 0:
        text.append(f"term ends in {format_duration(leader.term_left_seconds)}")
    else:
        lapsed = format_duration(-leader.term_left_seconds)
        text.append(f"term lapsed {lapsed} ago, no worker took over", style="yellow")
    return text
