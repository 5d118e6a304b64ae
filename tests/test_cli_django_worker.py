"""The refusals of `sweepq worker --django`, as a process: what it needs, and what it takes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import django

HAS_TASKS = django.VERSION >= (6,)


def worker(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, **env}
    for name in ("SWEEPQ_APP", "DJANGO_SETTINGS_MODULE"):
        if name not in env:
            environ.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "sweepq.cli", "worker", *args],
        cwd=cwd, env=environ, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_django_worker_needs_the_settings_module(tmp_path: Path) -> None:
    run = worker("--django", cwd=tmp_path)
    assert run.returncode == 2
    assert "--django needs DJANGO_SETTINGS_MODULE (e.g. mysite.settings)" in run.stderr
    assert "manage.py sweepq_worker" in run.stderr


def test_the_django_worker_takes_no_app(tmp_path: Path) -> None:
    run = worker("--django", "shop.tasks:app", cwd=tmp_path)
    assert run.returncode == 2
    assert "--django runs the tasks of Django's TASKS setting: give no APP with it" in run.stderr
    run = worker("--django", cwd=tmp_path, SWEEPQ_APP="shop.tasks:app")
    assert "give no SWEEPQ_APP with it" in run.stderr


def test_settings_that_fail_to_load_are_named(tmp_path: Path) -> None:
    (tmp_path / "broken_settings.py").write_text("raise RuntimeError('no secret key')\n")
    run = worker("--django", cwd=tmp_path, DJANGO_SETTINGS_MODULE="broken_settings")
    assert run.returncode == 2
    assert (
        "DJANGO_SETTINGS_MODULE='broken_settings' failed: RuntimeError: no secret key" in run.stderr
    )
    assert "Traceback" not in run.stderr


def test_the_django_worker_needs_a_sweepq_backend_of_django_6(tmp_path: Path) -> None:
    (tmp_path / "site_settings.py").write_text(
        textwrap.dedent(
            """
            SECRET_KEY = "x"
            INSTALLED_APPS = []
            DATABASES = {}
            """
        )
    )
    run = worker("--django", cwd=tmp_path, DJANGO_SETTINGS_MODULE="site_settings")
    assert run.returncode == 2
    if HAS_TASKS:  # TASKS is Django's default: its ImmediateBackend
        assert "not sweepq.contrib.django.SweepqBackend" in run.stderr
    else:
        assert "sweepq.contrib.django is a backend for Django's tasks framework" in run.stderr
