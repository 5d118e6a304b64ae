"""`sweepq queues list|pause|resume`: the queues, and pausing them for every worker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from sweepq.core.queues import QueueState
from sweepq.core.units import format_duration

from .common import JsonOption, respond
from .database import DsnOption, SchemaOption, database, plain_app
from .render import when

queues = typer.Typer(
    help="List queues; pause and resume them for every worker.", no_args_is_help=True
)

QueueArgument = Annotated[
    str, typer.Argument(help="The queue's name.", metavar="QUEUE", show_default=False)
]


@queues.command("list")
def list_queues(
    ctx: typer.Context,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every queue with live jobs or a pause: due, scheduled and running jobs, and its pause."""
    respond(plain_app(database(ctx)), as_json, lambda app: app.queues(), queues_table)


@queues.command()
def pause(
    ctx: typer.Context,
    queue: QueueArgument,
    reason: Annotated[
        str | None,
        typer.Option("--reason", help="Why, shown by `queues list`, top and the dashboard."),
    ] = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Stop every worker from starting QUEUE's jobs; they stay available until `resume`."""
    respond(
        plain_app(database(ctx)),
        as_json,
        lambda app: app.pause_queue(queue, reason=reason),
        lambda paused: Text(
            f"queue {queue!r} paused: no worker starts its jobs until "
            f"`sweepq queues resume {queue}`"
            if paused
            else f"queue {queue!r} was paused already (its first pause stands)"
        ),
    )


@queues.command()
def resume(
    ctx: typer.Context,
    queue: QueueArgument,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Let workers start QUEUE's jobs again (they are woken at once)."""
    respond(
        plain_app(database(ctx)),
        as_json,
        lambda app: app.resume_queue(queue),
        lambda resumed: Text(
            f"queue {queue!r} resumed" if resumed else f"queue {queue!r} was not paused"
        ),
    )


def queues_table(found: Sequence[QueueState]) -> RenderableType:
    """One row per queue: its live jobs, and since when and why it is paused."""
    if not found:
        return Text("no queue has live jobs or a pause", style="dim")
    table = Table(title="queues", title_justify="left")
    table.add_column("queue", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("due", justify="right")
    table.add_column("later", justify="right")
    table.add_column("running", justify="right")
    table.add_column("oldest due", justify="right")
    table.add_column("paused since / why", overflow="fold")
    for q in found:
        oldest = "" if q.oldest_due_seconds is None else format_duration(q.oldest_due_seconds)
        pause = q.pause
        table.add_row(
            q.queue,
            Text("paused", style="bold yellow") if pause else Text("active", style="green"),
            f"{q.due:,}",
            f"{q.scheduled:,}",
            f"{q.running:,}",
            oldest,
            "" if pause is None else " ".join(filter(None, [when(pause.paused_at), pause.reason])),
        )
    return table
