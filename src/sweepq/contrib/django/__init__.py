"""sweepq for Django: a backend for Django's tasks framework (`django.tasks`, Django 6+), its
workers, and sweepq's options and results for Django tasks. Needs `pip install 'sweepq[django]'`.

    INSTALLED_APPS = [..., "sweepq.contrib.django"]
    TASKS = {"default": {"BACKEND": "sweepq.contrib.django.SweepqBackend"}}

- `SweepqBackend`: enqueue in the caller's transaction, read results from any process;
- `job_options` (one enqueue) and `job_defaults` (every job of a task): sweepq's job options;
- `wait_for` / `await_for`: wait for a task result to finish, woken by LISTEN/NOTIFY;
- `worker_app`: the sweepq App the workers run (`manage.py sweepq_worker` builds it).

The names are imported on first use, so that the settings module can name the backend and the
helpers can be imported before Django is set up. The guide is "Using sweepq from Django".
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import SweepqBackend, await_for, wait_for
    from .options import job_defaults, job_options
    from .worker import worker_app

__all__ = ["SweepqBackend", "await_for", "job_defaults", "job_options", "wait_for", "worker_app"]

_HOMES = {
    "SweepqBackend": "backend",
    "await_for": "backend",
    "wait_for": "backend",
    "job_defaults": "options",
    "job_options": "options",
    "worker_app": "worker",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
