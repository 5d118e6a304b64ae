"""Rich views of sweep runs (`sweepq sweep ...`): functions from data to a renderable, nothing
else, as in `render.py`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from sweepq.core.decision import error_line
from sweepq.core.units import format_duration
from sweepq.sweeps.runs import SweepFailure, SweepRun, SweepState

from .render import Fit, listing, short_when, when

BAR_WIDTH = 22
SWEEP_STATE_STYLE = {
    SweepState.RUNNING: "yellow",
    SweepState.PAUSED: "cyan",
    SweepState.COMPLETED: "green",
    SweepState.FAILED: "red",
    SweepState.CANCELLED: "magenta",
}


def _eta(run: SweepRun) -> str:
    if run.ended:
        return "done"
    if run.state is SweepState.PAUSED:
        return "paused"
    return "?" if run.eta_seconds is None else format_duration(run.eta_seconds)


def _of(run: SweepRun) -> str:
    """`completed/total`, as the percentage counts: `~` while the total is an estimate."""
    if run.total is None:
        return f"{run.completed:,}/{run.enqueued:,}+"
    return f"{run.completed:,}/{'~' if run.total_is_estimate else ''}{run.total:,}"


def _rate(run: SweepRun, decimals: int = 0) -> str:
    """Items per second over the recent window, `?` until it is known."""
    return "?" if run.rate is None else f"{run.rate:,.{decimals}f}"


def _share(run: SweepRun) -> str:
    """Whole percents, rounded down: `100%` only once the run has completed."""
    return "" if run.percent is None else f"  {math.floor(run.percent)}%"


def _walk(run: SweepRun) -> str:
    """Where the walk stands: at the end, stopped, or on its way."""
    if run.walked:
        return "reached the end" if run.ended or not run.draining else "reached the end, draining"
    return "stopped before the end" if run.ended else "on its way"


def _total(run: SweepRun) -> str:
    if run.total is None:
        return "unknown"
    return f"{run.total:,}" + (" (estimate)" if run.total_is_estimate else "")


def _cursor(run: SweepRun, width: int = 28) -> str:
    if run.cursor is None:
        return "start"
    text = msgspec.json.encode(run.cursor).decode()
    return text if len(text) <= width else text[: width - 1] + "…"


def _params(run: SweepRun, width: int = 40) -> str:
    text = msgspec.json.encode(run.params).decode() if run.params else ""
    return text if len(text) <= width else text[: width - 1] + "…"


def sweep_progress(runs: Sequence[SweepRun]) -> RenderableType:
    """Per run, a progress bar of items done of the total, then rate, ETA, failures, link and
    cursor on a second line. At 80 columns a long sweep name puts the bar on a line of its
    own rather than being cut short."""
    if not runs:
        return Text("no active sweep runs")
    parts: list[RenderableType] = []
    for run in runs:
        parts.append(Fit(_progress_head(run), _progress_head(run, narrow=True)))
        link = run.links + (0 if run.ended or run.draining else 1)
        detail = Text(f"{_rate(run)} items/s  eta {_eta(run)}  ")
        detail.append(f"failed {run.failed:,}", style="red" if run.failed else "")
        if run.cancelled:
            detail.append(f"  cancelled {run.cancelled:,}", style="magenta")
        if run.waiting:
            detail.append(f"  retrying {run.waiting:,}", style="yellow")
        detail.append(f"  link {link:,}  cursor {_cursor(run)}")
        if run.params:
            detail.append(f"  params {_params(run)}")
        parts.append(_indented(detail))
        if run.hint:
            parts.append(_indented(Text(run.hint, style="yellow")))
        if run.failure:
            parts.append(_indented(Text(run.failure, style="red")))
    return Group(*parts)


def _indented(text: Text) -> Padding:
    """`text` four columns in, its wrapped lines too."""
    return Padding(text, (0, 0, 0, 4), expand=False)


def _progress_head(run: SweepRun, *, narrow: bool = False) -> RenderableType:
    """`#7 name  [bar]  done/total  45%  state` on one line; `narrow`: the name and state on
    one, the bar and the counts on the next."""
    style = SWEEP_STATE_STYLE[run.state]
    bar = ProgressBar(
        total=100 if run.percent is not None else None,
        completed=run.percent or 0,
        width=BAR_WIDTH,
        pulse=run.percent is None and not run.ended,
        complete_style=style,
        finished_style=style,
    )
    label = Text(f"#{run.id} {run.sweep}", style=style)
    head = Table.grid(padding=(0, 1))
    if narrow:
        head.add_column(overflow="fold")
        head.add_row(label + Text(f"  {run.state}"))
        line = Table.grid(padding=(0, 1))
        line.add_column(width=BAR_WIDTH, no_wrap=True)
        line.add_column(no_wrap=True)
        line.add_row(bar, f"{_of(run)}{_share(run)}")
        return Group(head, Padding(line, (0, 0, 0, 4), expand=False))
    head.add_column(no_wrap=True)
    head.add_column(width=BAR_WIDTH, no_wrap=True)
    head.add_column(no_wrap=True)
    head.add_row(label, bar, f"{_of(run)}{_share(run)}  {run.state}")
    return head


_RUN_COLUMNS = ("run", "sweep", "state", "done", "failed", "left", "rate", "eta", "started")


def sweep_runs_table(runs: Sequence[SweepRun]) -> RenderableType:
    """Recent runs, newest first; where they do not fit, without their start time and rate,
    then without their ETA and what is left (the run, its sweep and state always show)."""
    if not runs:
        return Text("no sweep runs")
    return Fit(
        _runs_table(runs, _RUN_COLUMNS),
        _runs_table(runs, (*_RUN_COLUMNS[:6], "eta")),
        _runs_table(runs, _RUN_COLUMNS[:5]),
    )


def _runs_table(runs: Sequence[SweepRun], columns: Sequence[str]) -> Table:
    table = listing()
    for column in columns:
        numeric = column in ("run", "done", "failed", "left", "rate")
        # Where even the narrowest does not fit, the figures wrap: the run, its sweep and its
        # state stay whole.
        key = column in ("run", "sweep", "state")
        table.add_column(
            column, justify="right" if numeric else "left", no_wrap=key, overflow="fold"
        )
    for run in runs:
        cells = _run_cells(run)
        table.add_row(*(cells[column] for column in columns))
    return table


def _run_cells(run: SweepRun) -> dict[str, RenderableType]:
    state = Text(
        "draining" if run.draining and not run.ended else str(run.state),
        style=SWEEP_STATE_STYLE[run.state],
    )
    if run.hint:
        waits = (
            "queue paused" if run.queue_paused
            else "throttled" if run.throttled
            else "busy" if run.queue_served
            else "no worker"
        )  # fmt: skip
        state.append(f"\n{waits}", style="yellow")
    undone = Text(f"{run.failed:,}", style="red" if run.failed else "")
    if run.cancelled:
        undone.append(f"\n{run.cancelled:,} cancelled", style="magenta")
    left = Text(f"{run.outstanding:,}")
    if run.waiting:
        left.append(f"\n{run.waiting:,} retrying", style="yellow")
    sweep = Text(run.sweep)
    if run.params:
        sweep.append("\n" + _params(run, width=max(len(run.sweep), 16)), style="dim")
    return {
        "run": str(run.id),
        "sweep": sweep,
        "state": state,
        "done": _of(run) + _share(run),
        "failed": undone,
        "left": left,
        "rate": f"{_rate(run)}/s",
        "eta": _eta(run),
        "started": short_when(run.started_at),
    }


def sweep_detail(run: SweepRun, failures: Sequence[SweepFailure] = ()) -> RenderableType:
    """One run: every field, its progress bar, then its last failures."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    rows: list[tuple[str, str | Text]] = [
        ("run", str(run.id)),
        ("sweep", run.sweep),
        ("params", msgspec.json.encode(run.params).decode()),
        ("state", Text(str(run.state), style=SWEEP_STATE_STYLE[run.state])),
        ("walk", _walk(run)),
        ("cursor", "start" if run.cursor is None else msgspec.json.encode(run.cursor).decode()),
        ("links", f"{run.links:,} of at most {run.max_links:,}"),
        ("enqueued", f"{run.enqueued:,}"),
        ("completed", f"{run.completed:,}"),
        ("failed", f"{run.failed:,}"),
        ("cancelled", f"{run.cancelled:,}"),
        (
            "outstanding",
            f"{run.outstanding:,}"
            + (f", {run.waiting:,} of them waiting to retry" if run.waiting else ""),
        ),
        ("total", _total(run)),
        (
            "progress",
            f"{run.completed:,} completed"
            + ("" if run.percent is None else f" ({run.percent:.1f}%)")
            + f", {run.done:,} ended",
        ),
        ("rate", f"{_rate(run, 1)} items/s" + ("" if run.ended else " (the last minute or two)")),
        ("eta", _eta(run)),
        ("started", when(run.started_at)),
        ("finished", when(run.finished_at)),
        ("elapsed", format_duration(run.elapsed_seconds)),
    ]
    if run.hint:
        rows.append(("waiting", Text(run.hint, style="yellow")))
    if run.failure:
        rows.append(("failure", Text(run.failure, style="red")))
    for name, value in rows:
        table.add_row(name, value)
    parts: list[RenderableType] = [table, Text(""), sweep_progress([run])]
    if failures:
        undone = run.failed + run.cancelled
        more = undone > len(failures)
        title = (
            f"last {len(failures)} of {undone:,} failed or cancelled items"
            if more
            else "failed or cancelled items"
        )
        parts += [Text(""), sweep_failures_table(failures, title=title)]
        if more:
            parts.append(Text(f"all of them: sweepq sweep failures {run.id}", style="dim"))
    return Group(*parts)


def sweep_failures_table(
    failures: Sequence[SweepFailure], *, title: str | None = None
) -> RenderableType:
    """A run's failed and cancelled items, newest first: the item's key, its leaf job, its state,
    and its last error's last line (`--json`, or `sweepq jobs show JOB`, has the whole
    traceback)."""
    if not failures:
        return Text("no failed or cancelled items")
    table = Table(title=title, title_justify="left")
    table.add_column("key", overflow="fold", ratio=1)
    table.add_column("job", justify="right", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("tries", justify="right", no_wrap=True)
    table.add_column("ended", no_wrap=True)
    table.add_column("error", overflow="fold", ratio=3)
    for f in failures:
        key = f.key if isinstance(f.key, str) else msgspec.json.encode(f.key).decode()
        style = "red" if f.state == "failed" else "magenta"
        error = Text(error_line(f.error) or (f.failure_reason or ""), style=style)
        table.add_row(
            key, str(f.job_id), Text(f.state, style=style), str(f.attempts),
            short_when(f.failed_at), error,
        )  # fmt: skip
    return table
