"""`sweepq worker --django`: the App of a Django project's SweepqBackend instead of an APP.

Django is set up from DJANGO_SETTINGS_MODULE (the current directory is put on sys.path first, as
`manage.py` runs from the project's folder); `manage.py sweepq_worker` lands here with Django
already set up.
"""

from __future__ import annotations

import os
import sys

import typer

from sweepq.core.errors import SweepqError
from sweepq.sweeps.app import App

from .common import fail
from .database import DatabaseSettings, app_settings


def django_app(ctx: typer.Context, alias: str) -> tuple[App, DatabaseSettings]:
    """The worker App of `TASKS[alias]`, and its database; any problem ends with one line."""
    _setup()
    try:
        from django.core.exceptions import ImproperlyConfigured

        from sweepq.contrib.django.worker import worker_app
    except ImportError as exc:
        fail(f"--django: {exc}")
    try:
        app = worker_app(alias)
        return app, app_settings(ctx, app, own=f"TASKS[{alias!r}]")
    except (SweepqError, ImproperlyConfigured) as exc:
        fail(f"--django: {exc}")


def _setup() -> None:
    name = os.environ.get("DJANGO_SETTINGS_MODULE", "").strip()
    if not name:
        fail(
            "--django needs DJANGO_SETTINGS_MODULE (e.g. mysite.settings), or run the worker "
            "with `python manage.py sweepq_worker` from the project's folder"
        )
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        import django
    except ImportError:
        fail("--django needs Django 6 or later: pip install 'sweepq[django]'")
    try:
        django.setup()
    except Exception as exc:  # the project's settings or apps: say what, without a traceback
        fail(
            f"--django: setting Django up with DJANGO_SETTINGS_MODULE={name!r} failed: "
            f"{type(exc).__name__}: {exc}"
        )
