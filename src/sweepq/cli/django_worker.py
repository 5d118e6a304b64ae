"""`sweepq worker --django`: the App of a Django project's SweepqBackend instead of an APP.

The App comes from the `django` entry point (`sweepq.cli.plugins`), which sets Django up from
DJANGO_SETTINGS_MODULE: the command line does not import `sweepq.contrib.django`.
`manage.py sweepq_worker` lands here with Django already set up.
"""

from __future__ import annotations

import typer

from sweepq.core.errors import ConfigurationError, SweepqError
from sweepq.sweeps.app import App

from . import plugins
from .common import fail
from .database import DatabaseSettings, app_settings


def django_app(ctx: typer.Context, alias: str) -> tuple[App, DatabaseSettings]:
    """The worker App of `TASKS[alias]`, and its database; any problem ends with one line."""
    try:
        app = plugins.django_app()(alias)
    except ConfigurationError as exc:  # its messages name --django and the fix
        fail(str(exc))
    except ImportError as exc:
        fail(f"--django: {exc}")
    try:
        return app, app_settings(ctx, app, own=f"TASKS[{alias!r}]")
    except SweepqError as exc:
        fail(f"--django: {exc}")
