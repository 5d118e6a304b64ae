"""The pytest plugin: `sweepq_dsn` and `sweepq_app` for your own test suite.

pytest loads it wherever sweepq is installed (the `pytest11` entry point); name your App in the
pytest configuration:

    [tool.pytest.ini_options]
    sweepq_app = "shop.tasks:app"
    asyncio_mode = "auto"

`sweepq_app` is then your App on a fresh, migrated schema, open for the test and dropped after it
(define a `sweepq_target_app` fixture instead of the setting to build the App yourself). It runs
on pytest-asyncio (`pip install 'sweepq[testing]'`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator

import pytest

from ..core.errors import ConfigurationError
from ..loading import load_app
from ..sweeps.app import App
from . import isolated
from .database import NoDatabaseError, find_database


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "sweepq_app",
        "The App the sweepq_app fixture uses, as module:attribute (e.g. shop.tasks:app).",
        default="",
    )


@pytest.fixture(scope="session")
def sweepq_dsn() -> Iterator[str]:
    """A PostgreSQL for the session: `SWEEPQ_TEST_DSN` / `DATABASE_URL`, a server on
    127.0.0.1:5432, a container (testcontainers) when Docker answers, or the embedded one. None
    of them fails the test: a skipped test proves nothing."""
    with contextlib.ExitStack() as stack:
        try:
            dsn, source = find_database(stack)
        except NoDatabaseError as exc:
            pytest.fail(str(exc), pytrace=False)
        os.environ.setdefault("SWEEPQ_TEST_DSN_SOURCE", source)
        yield dsn


@pytest.fixture
def sweepq_target_app(request: pytest.FixtureRequest) -> App:
    """Your App, from the `sweepq_app` setting; override this fixture to build it yourself."""
    spec = str(request.config.getini("sweepq_app") or "")
    if not spec:
        pytest.fail(
            "sweepq_app: name your App in the pytest configuration (sweepq_app = "
            '"module:attribute" under [tool.pytest.ini_options]), or define a '
            "sweepq_target_app fixture that returns it",
            pytrace=False,
        )
    try:
        return load_app(spec)
    except ConfigurationError as exc:
        pytest.fail(f"sweepq_app = {spec!r}: {exc}", pytrace=False)


async def _sweepq_app(sweepq_target_app: App, sweepq_dsn: str) -> AsyncIterator[App]:
    """Your App on a fresh migrated schema, open for the test; the schema is dropped after."""
    async with isolated(sweepq_target_app, sweepq_dsn) as app:
        yield app


try:
    import pytest_asyncio
except ImportError:  # the plugin loads in every suite; only this fixture needs pytest-asyncio

    @pytest.fixture(name="sweepq_app")
    def _needs_pytest_asyncio() -> App:
        """Your App on a fresh migrated schema (needs pytest-asyncio)."""
        pytest.fail(
            "the sweepq_app fixture runs on pytest-asyncio: pip install 'sweepq[testing]'",
            pytrace=False,
        )

else:
    sweepq_app = pytest_asyncio.fixture(_sweepq_app, name="sweepq_app")
