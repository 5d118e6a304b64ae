"""The worker App of a Django project, with Django set up for it: `sweepq worker --django`.

The command line finds `project_app` through its `django` entry point (group `sweepq.cli`), so
that it never imports this integration. Django is set up from DJANGO_SETTINGS_MODULE, with the
current directory put on sys.path first, as `manage.py` runs from the project's folder; under
`manage.py sweepq_worker` it is set up already, and setting it up again changes nothing. Nothing
of Django is imported before the settings module is known to be named.
"""

from __future__ import annotations

import os
import sys

from sweepq.core.errors import ConfigurationError, SweepqError
from sweepq.sweeps.app import App


def project_app(alias: str) -> App:
    """`worker_app(alias)` of the project DJANGO_SETTINGS_MODULE names, Django set up first.

    Raises:
        ConfigurationError: no settings module, no Django 6, settings that fail to load, or a
            `TASKS[alias]` that is not a SweepqBackend; the message says which, for `--django`.
    """
    _setup()
    try:
        from django.core.exceptions import ImproperlyConfigured

        from .worker import worker_app
    except ImportError as exc:
        raise ConfigurationError(f"--django: {exc}") from None
    try:
        return worker_app(alias)
    except (SweepqError, ImproperlyConfigured) as exc:
        raise ConfigurationError(f"--django: {exc}") from None


def _setup() -> None:
    name = os.environ.get("DJANGO_SETTINGS_MODULE", "").strip()
    if not name:
        raise ConfigurationError(
            "--django needs DJANGO_SETTINGS_MODULE (e.g. mysite.settings), or run the worker "
            "with `python manage.py sweepq_worker` from the project's folder"
        )
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        import django
    except ImportError:
        raise ConfigurationError(
            "--django needs Django 6 or later: pip install 'sweepq[django]'"
        ) from None
    try:
        django.setup()
    except Exception as exc:  # the project's settings or apps: say what, without a traceback
        raise ConfigurationError(
            f"--django: setting Django up with DJANGO_SETTINGS_MODULE={name!r} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from None
