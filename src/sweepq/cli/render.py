"""Rich views of what the commands read: functions from data to a renderable, nothing else.

Every view reads well at 80 columns: where a table would not fit, `Fit` shows a narrower
variant of it (fewer columns, or a note under its row) instead of cutting values short; ids,
names and states are never truncated. Tests render them with `Console(record=True, width=N)`
and read `export_text()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime

import msgspec
from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from sweepq.core.admin import AppliedMigration, JobRow, rate_text
from sweepq.core.decision import error_line
from sweepq.core.doctor import Diagnosis, Severity
from sweepq.core.jobs import Job, JobState
from sweepq.core.units import format_bytes, format_duration

STATE_STYLE = {
    JobState.AVAILABLE: "cyan",
    JobState.RUNNING: "yellow",
    JobState.COMPLETED: "green",
    JobState.FAILED: "red",
    JobState.CANCELLED: "magenta",
}
SEVERITY_STYLE = {
    Severity.OK: "green",
    Severity.INFO: "cyan",
    Severity.WARNING: "yellow",
    Severity.CRITICAL: "bold red",
}


class Fit:
    """The first of `variants` (widest first) whose natural width fits the space it is given;
    the last, narrowest, one when none does."""

    def __init__(self, *variants: RenderableType) -> None:
        self.variants = variants

    def chosen(self, console: Console, options: ConsoleOptions) -> RenderableType:
        unbounded = options.update(max_width=max(options.max_width, _UNBOUNDED))
        for variant in self.variants[:-1]:
            if Measurement.get(console, unbounded, variant).maximum <= options.max_width:
                return variant
        return self.variants[-1]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.chosen(console, options)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.chosen(console, options))


_UNBOUNDED = 1_000_000


def listing() -> Table:
    """A table of rows to read down: a rule under the header, two spaces between columns."""
    return Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)


def when(value: datetime | None) -> str:
    return "" if value is None else value.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def settings_table(title: str, lines: Sequence[tuple[str, str, str]]) -> RenderableType:
    """`name = value  (source)` per line, names aligned."""
    width = max((len(name) for name, _, _ in lines), default=0)
    text = Text(title + "\n", style="bold")
    for name, value, source in lines:
        text.append(f"  {name:<{width}} = {value}  ")
        text.append(f"({source})\n", style="dim")
    text.rstrip()
    return text


def migrations_view(
    applied: Sequence[AppliedMigration], done: Sequence[str], *, schema: str, dry_run: bool
) -> RenderableType:
    """The ledger's migrations, and those `done` now (or pending, when dry)."""
    table = Table(title=f"migrations of schema {schema}", title_justify="left")
    table.add_column("migration")
    table.add_column("status")
    table.add_column("applied at")
    for m in applied:
        now = m.label in done
        status = Text("applied now", "cyan") if now else Text("applied", "green")
        table.add_row(m.label, status, when(m.applied_at))
    if dry_run:
        for label in done:
            table.add_row(label, Text("pending", style="yellow"), "")
        summary = f"{len(done)} pending" if done else "nothing pending: up to date"
    else:
        summary = f"applied {len(done)}" if done else "nothing to apply: up to date"
    return Group(table, Text(summary))


def short_when(value: datetime | None, today: date | None = None) -> str:
    """A local time: `HH:MM:SS` today, else `YYYY-MM-DD HH:MM`."""
    if value is None:
        return ""
    local = value.astimezone()
    if local.date() == (today or datetime.now().astimezone().date()):
        return local.strftime("%H:%M:%S")
    return local.strftime("%Y-%m-%d %H:%M")


def jobs_table(rows: Sequence[JobRow], *, limit: int) -> RenderableType:
    """Jobs, one line each where the width allows; else each job's note (its failure, last
    error, key and snoozes) goes on a line of its own under its task. Long task names wrap
    rather than being cut; the queue column shows only when the jobs are on more than one
    queue."""
    if not rows:
        return Text("no jobs match")
    queues = len({r.queue for r in rows}) > 1
    parts: list[RenderableType] = [
        Fit(_jobs_wide(rows, queues=queues), _jobs_narrow(rows, queues=queues))
    ]
    if len(rows) == limit:
        parts.append(Text(f"next page: --before {rows[-1].id}", style="dim"))
    return Group(*parts)


def _jobs_wide(rows: Sequence[JobRow], *, queues: bool) -> Table:
    table = listing()
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("task", overflow="fold", ratio=2)
    if queues:
        table.add_column("queue", overflow="fold")
    table.add_column("state", no_wrap=True)
    table.add_column("try", justify="right", no_wrap=True)
    table.add_column("when", no_wrap=True)
    table.add_column("note", overflow="fold", ratio=3)
    for r in rows:
        cells: list[RenderableType] = [str(r.id), r.task]
        if queues:
            cells.append(r.queue)
        cells += [_job_state(r), f"{r.attempt}/{r.max_attempts}", _job_when(r), _job_note(r)]
        table.add_row(*cells)
    return table


def _jobs_narrow(rows: Sequence[JobRow], *, queues: bool) -> Table:
    """The task last, where it has the most room, and the note under it."""
    table = listing()
    table.add_column("id", justify="right", no_wrap=True)
    if queues:
        table.add_column("queue", overflow="fold")
    table.add_column("state", no_wrap=True)
    table.add_column("try", justify="right", no_wrap=True)
    table.add_column("when", no_wrap=True)
    table.add_column("task", overflow="fold")
    for r in rows:
        task = Text(r.task)
        note = _job_note(r)
        if note:
            task.append("\n").append_text(note)
        cells: list[RenderableType] = [str(r.id)]
        if queues:
            cells.append(r.queue)
        cells += [_job_state(r), f"{r.attempt}/{r.max_attempts}", _job_when(r), task]
        table.add_row(*cells)
    return table


def _job_state(r: JobRow) -> Text:
    return Text(str(r.state), style=STATE_STYLE[r.state])


def _job_when(r: JobRow) -> str:
    return short_when(r.finished_at or r.run_at)


def _job_note(r: JobRow) -> Text:
    note = Text()
    if r.failure_reason:
        note.append(r.failure_reason, style="red")
    error = error_line(r.last_error)
    if error:
        note.append(("  " if note else "") + error)
    if r.concurrency_key:
        note.append(("  " if note else "") + f"key={r.concurrency_key}", style="dim")
    if r.snoozes:
        note.append(("  " if note else "") + f"snoozes={r.snoozes}", style="dim")
    return note


def job_detail(job: Job) -> RenderableType:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    fields = msgspec.structs.asdict(job)
    for name, value in fields.items():
        if name in ("args", "errors", "result"):
            continue
        if isinstance(value, datetime):
            shown: str | Text = when(value)
        elif name == "state":
            shown = Text(str(value), style=STATE_STYLE[job.state])
        else:
            shown = "" if value is None else str(value)
        table.add_row(name, shown)
    table.add_row("args", msgspec.json.encode(job.args).decode())
    if job.result is not None:
        table.add_row("result", msgspec.json.encode(job.result).decode())
    parts: list[RenderableType] = [table]
    for error in job.errors:
        parts.append(Text(f"\nerror (attempt {error.attempt}, {error.kind}, {error.at})", "bold"))
        parts.append(Text(error.error.rstrip(), style="red"))
    return Group(*parts)


def prune_view(removed: dict[str, int], *, older_than: str) -> RenderableType:
    table = Table(title=f"pruned rows older than {older_than}", title_justify="left")
    table.add_column("table")
    table.add_column("rows removed", justify="right")
    for name, count in removed.items():
        table.add_row(name, f"{count:,}")
    return table


def doctor_view(d: Diagnosis) -> RenderableType:
    findings = Table(title=f"sweepq doctor: schema {d.schema}", title_justify="left")
    findings.add_column("severity", no_wrap=True)
    findings.add_column("topic", overflow="fold")
    findings.add_column("finding", overflow="fold")
    for f in d.findings:
        findings.add_row(Text(str(f.severity), SEVERITY_STYLE[f.severity]), f.topic, f.message)

    keys = Table(title="concurrency keys", title_justify="left")
    for column in (
        "key",
        "limit",
        "running",
        "due",
        "oldest due",
        "scheduled",
        "rate",
        "ratio",
        "binding",
    ):
        if column == "key":
            keys.add_column(column, overflow="fold")
        else:
            keys.add_column(column, justify="right", no_wrap=True)
    for k in d.keys:
        keys.add_row(
            k.key,
            "none" if k.max_running is None else str(k.max_running),
            str(k.running),
            f"{k.due:,}",
            "" if k.oldest_due_seconds is None else format_duration(k.oldest_due_seconds),
            f"{k.scheduled:,}",
            rate_text(k),
            "" if k.ratio is None else f"{k.ratio:.2f}x",
            ", ".join(w for w, on in (("limit", k.binding), ("rate", k.rate_binding)) if on),
        )
    if d.overall_ratio is not None:
        keys.add_section()
        keys.add_row("overall", "", "", "", "", "", "", f"{d.overall_ratio:.2f}x", "")

    sizes = Table(title="tables", title_justify="left")
    for column in ("table", "total", "indexes", "rows (est.)", "dead rows"):
        sizes.add_column(column, justify="left" if column == "table" else "right")
    for t in d.tables:
        sizes.add_row(
            t.name,
            format_bytes(t.total_bytes),
            format_bytes(t.index_bytes),
            f"{t.estimated_rows:,}",
            f"{t.dead_rows:,}",
        )

    states = Table(title="jobs by state", title_justify="left")
    for column in ("state", "jobs", "oldest created", "oldest finished"):
        states.add_column(column, justify="left" if column == "state" else "right")
    for s in d.states:
        states.add_row(
            Text(str(s.state), STATE_STYLE[s.state]),
            f"{s.jobs:,}",
            format_duration(s.oldest_created_seconds) + " ago",
            ""
            if s.oldest_finished_seconds is None
            else f"{format_duration(s.oldest_finished_seconds)} ago",
        )

    parts: list[RenderableType] = [findings]
    if d.keys:
        parts.append(keys)
    if d.tables:
        parts.append(sizes)
    if d.migrated:  # else its jobs were not read
        parts.append(states if d.states else Text("no jobs"))
    return Group(*parts)
