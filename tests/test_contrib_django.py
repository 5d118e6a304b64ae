"""sweepq.contrib.django without `django.tasks`: the package and its helpers import without Django
set up, the backend names the Django it needs, and `manage.py sweepq_worker` passes on only the
worker's options. The backend itself runs under Django 6 in tests/django_project (Python 3.12),
which CI runs with sweepq's wheel.
"""

from __future__ import annotations

import django
import pytest

import sweepq
import sweepq.contrib.django
from sweepq.contrib.django.management.commands.sweepq_worker import _without_manage_options
from sweepq.contrib.django.options import (
    job_options,
)

HAS_TASKS = django.VERSION >= (6,)


def test_the_package_and_its_helpers_import_without_setting_django_up() -> None:
    assert set(sweepq.contrib.django.__all__) == {
        "SweepqBackend", "await_for", "job_defaults", "job_options", "wait_for", "worker_app",
    }  # fmt: skip
    assert sweepq.contrib.django.job_options is job_options
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        sweepq.contrib.django.nope  # noqa: B018  # the lookup is the test


def test_the_backend_needs_django_6_and_says_so_under_an_older_one() -> None:
    if HAS_TASKS:  # the main suite runs on Python 3.11, where Django stops at 5.2
        assert sweepq.contrib.django.SweepqBackend.supports_get_result
        return
    with pytest.raises(ImportError) as caught:
        sweepq.contrib.django.SweepqBackend  # noqa: B018  # the import is the test
    message = str(caught.value)
    assert "Django 6.0" in message
    assert f"this is Django {django.get_version()}" in message
    assert "pip install 'sweepq[django]'" in message


def test_manage_py_options_are_not_passed_on_to_the_worker() -> None:
    args = ["--settings", "mysite.settings", "--queue", "a", "--pythonpath=/x", "-c", "4"]
    assert _without_manage_options(args) == ["--queue", "a", "-c", "4"]
