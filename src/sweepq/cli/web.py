"""`sweepq web`: serve the web dashboard (the `web` extra), found through its entry point."""

from __future__ import annotations

from typing import Annotated

import typer

from sweepq.core.errors import ConfigurationError

from . import plugins
from .common import fail
from .database import DsnOption, SchemaOption, database


def web(
    ctx: typer.Context,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="Address to listen on; anything but loopback needs SWEEPQ_WEB_TOKEN set.",
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port.")] = 8080,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Show everything, change nothing.")
    ] = False,
    base_path: Annotated[
        str,
        typer.Option("--base-path", metavar="PATH", help="Path served under, behind a proxy."),
    ] = "/",
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Serve the web dashboard: jobs, sweeps, keys, cron and queues, with actions (Ctrl-C ends).

    Users sign in with the token of SWEEPQ_WEB_TOKEN when it is set; without it the dashboard
    listens on loopback only."""
    db = database(ctx)
    try:
        serve = plugins.web_server()
    except ImportError as exc:
        fail(f"sweepq web needs the web extra ({exc}): pip install 'sweepq[web]'")
    except ConfigurationError as exc:
        fail(str(exc))
    try:
        serve(
            db.dsn.value,
            host=host,
            port=port,
            schema=db.schema.value,
            read_only=read_only,
            base_path=base_path,
        )
    except (ConfigurationError, ValueError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
