"""The parts of Django's tasks framework (`django.tasks`, Django 6 and later) sweepq uses.

Imported from here only, so that a Django without the framework fails with one clear message.
"""

from __future__ import annotations

try:
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError as exc:  # Django < 6 (and Django 6 needs Python >= 3.12)
    import django

    raise ImportError(
        "sweepq.contrib.django is a backend for Django's tasks framework (django.tasks), which "
        f"Django 6.0 introduced; this is Django {django.get_version()}. Install Django 6 (it "
        "needs Python 3.12 or later): pip install 'sweepq[django]'"
    ) from exc

__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
