"""sweepq's testing kit in a Django project: the kit's fresh schema per test, in Django's test
database, with the tasks backend pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.tasks import task_backends

import sweepq
from sweepq.contrib.django import worker_app


@pytest.fixture(scope="session")
def sweepq_dsn(django_db_setup: None) -> str:
    """The kit's database: Django's test database, where the tasks are enqueued."""
    return task_backends["default"].dsn


@pytest.fixture
def sweepq_target_app() -> sweepq.App:
    """The App the kit isolates (`sweepq_app`): the one `manage.py sweepq_worker` runs."""
    return worker_app("default")


@pytest.fixture
def tasks_app(sweepq_app: sweepq.App, settings: Any) -> sweepq.App:
    """The kit's App on a fresh schema, and the tasks backend enqueueing into that schema
    (pytest-django's `settings` puts TASKS back after the test)."""
    backend = settings.TASKS["default"]
    options = {**backend.get("OPTIONS", {}), "SCHEMA": sweepq_app.schema}
    settings.TASKS = {**settings.TASKS, "default": {**backend, "OPTIONS": options}}
    return sweepq_app


@pytest.fixture(autouse=True)
async def close_async_connections() -> AsyncIterator[None]:
    """What Django does when a request ends, for async tests: close the database connections of
    the thread that runs their sync calls (`aenqueue`, `aget_result`, the async ORM)."""
    yield
    await sync_to_async(connections.close_all)()
