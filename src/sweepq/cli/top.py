"""`sweepq top`: a live overview of the queues, refreshed every few seconds until Ctrl-C."""

from __future__ import annotations

import os
import signal
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated

import anyio
import typer
from rich.console import Console, RenderableType
from rich.control import Control
from rich.live import Live

from sweepq.core.outage import TRANSIENT_ERRORS
from sweepq.sweeps.app import App

from .common import opened, print_json, run, stdout
from .database import DsnOption, SchemaOption, database, plain_app
from .top_frame import Frame, read_frame
from .top_render import Fit, top_view

Show = Callable[[Frame, str | None], None]
"""Shows a frame, with why it is not fresh (None: it is)."""

Read = Callable[[App, Frame | None], Awaitable[Frame]]


def top(
    ctx: typer.Context,
    interval: Annotated[
        float,
        typer.Option(
            "--interval", min=0.5, max=3600, metavar="SECONDS", help="Seconds between frames."
        ),
    ] = 2.0,
    once: Annotated[
        bool, typer.Option("--once", help="Print one frame and exit (its rate is `?`).")
    ] = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print each frame's figures as one line of JSON."),
    ] = False,
) -> None:
    """A live overview: queues (due, scheduled, running, failed, completed, rate), active sweep
    runs, the busiest concurrency keys, workers and the maintenance leader (Ctrl-C ends)."""
    app = plain_app(database(ctx))
    console = stdout()

    async def go() -> None:
        async with opened(app):
            if as_json:
                await watch(app, _json, interval=interval, once=once)
            elif once or not console.is_terminal:
                await watch(app, _printer(console, once), interval=interval, once=once)
            else:
                with Live(console=console, screen=True, auto_refresh=False) as live:
                    screen = TopScreen(live)
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(redraw_on_resize, screen)
                        await watch(app, screen.show, interval=interval, once=once)
                        tg.cancel_scope.cancel()

    try:
        run(go)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None  # Ctrl-C is how top is left


async def watch(
    app: App, show: Show, *, interval: float, once: bool, read: Read = read_frame
) -> Frame:
    """Read and show a frame every `interval` seconds (one with `once`); return the last read.

    A failure to read the first frame ends the command with its error. Later, a failure the
    database may recover from (a restart, a dropped connection) shows the last frame with the
    error, and the next round tries again.
    """
    previous: Frame | None = None
    while True:
        try:
            frame = await read(app, previous)
        except TRANSIENT_ERRORS as exc:
            if previous is None or once:
                raise
            show(previous, _trouble(previous, exc, interval))
        else:
            show(frame, None)
            if once:
                return frame
            previous = frame
        await anyio.sleep(interval)


def _trouble(last: Frame, exc: BaseException, interval: float) -> str:
    error = " ".join(f"{type(exc).__name__}: {exc}".split())
    now = datetime.now().astimezone().strftime("%H:%M:%S")
    shown = last.at.astimezone().strftime("%H:%M:%S")
    return f"{now}: reading failed ({error}); figures of {shown}, retrying every {interval:g}s"


def _json(frame: Frame, trouble: str | None) -> None:
    if trouble is None:  # a stale frame was printed already
        print_json(frame)


def _printer(console: Console, once: bool) -> Show:
    """Print each frame (not on a terminal: a log of frames, a blank line between them)."""

    def show(frame: Frame, trouble: str | None) -> None:
        console.print(top_view(frame, trouble=trouble))
        if not once:
            console.print()

    return show


class TopScreen:
    """The frames on a terminal: each drawn on the alternate screen from its top-left corner, at
    the terminal's size of the moment and cut to its height, so that nothing of an earlier
    frame is left above or beside it, whatever the terminal's size was then."""

    def __init__(self, live: Live) -> None:
        self.live = live
        self.view: RenderableType | None = None

    def show(self, frame: Frame, trouble: str | None) -> None:
        self.view = top_view(frame, trouble=trouble)
        self.draw()

    def draw(self, *, clear: bool = False) -> None:
        """Draw the last frame again at the terminal's size (after a resize: on a clean
        screen, `clear`)."""
        if self.view is None:
            return
        console = self.live.console
        follow_terminal(console)
        if clear:
            console.control(Control.clear(), Control.home())
        self.live.update(Fit(self.view), refresh=True)


def follow_terminal(console: Console) -> None:
    """Size `console` as its terminal is now (COLUMNS and LINES, read once at start, would
    keep a resized terminal at its old size)."""
    try:
        size = os.get_terminal_size(console.file.fileno())
    except (AttributeError, ValueError, OSError):
        return  # not a terminal's file: keep the console's size
    console.size = (size.columns, size.lines)


async def redraw_on_resize(screen: TopScreen) -> None:
    """Redraw the frame on screen as soon as the terminal is resized, not at the next frame."""
    resized = getattr(signal, "SIGWINCH", None)
    if resized is None:
        return  # no such signal here (Windows): the next frame is drawn at the new size
    with anyio.open_signal_receiver(resized) as signals:
        async for _ in signals:
            screen.draw(clear=True)
