"""When the database goes away: which errors mean it, and saying so once.

A restart, a failover or a network cut shows up as a burst of connection errors in every loop of
a worker. `Outage` turns that burst into one WARNING when the database goes away and one INFO
line when it answers again; the loops retry quietly in between. asyncpg's own report of each
failed reconnection (with a traceback) is folded into those lines too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from .errors import DatabaseUnavailableError

logger = logging.getLogger("sweepq.worker")

# Failures after which the same call may succeed: the connection was lost or reset, the server
# is restarting, or the transaction lost a race. InternalClientError is how asyncpg reports a
# pooled connection that broke mid-operation; its pool must then be refreshed.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
)

# The server went away: the connection was lost, or the server is shutting down or starting up.
# An execution that fails with one of these is not the handler's fault.
CONNECTION_LOSS: tuple[type[BaseException], ...] = (
    DatabaseUnavailableError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
)


def is_connection_loss(exc: BaseException) -> bool:
    """Whether `exc` (or every exception of a group) says the database went away.

    Besides the errors that say so by their type, a connection error (`OSError`: refused,
    reset, timed out) or a broken connection's state counts when the driver raised it: a
    handler's own network calls (an HTTP API refusing connections) fail as usual.
    """
    if isinstance(exc, BaseExceptionGroup):
        return all(is_connection_loss(e) for e in exc.exceptions)
    if isinstance(exc, CONNECTION_LOSS):
        return True
    return isinstance(exc, OSError | asyncpg.exceptions.InternalClientError) and _from_driver(exc)


def _from_driver(exc: BaseException) -> bool:
    """Whether `exc` was raised from within asyncpg (a frame of its traceback is asyncpg's)."""
    tb = exc.__traceback__
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if isinstance(module, str) and module.split(".")[0] == "asyncpg":
            return True
        tb = tb.tb_next
    return False


@asynccontextmanager
async def unavailable_as_error(where: str) -> AsyncIterator[None]:
    """Raise `DatabaseUnavailableError` for connection-level failures inside the block."""
    try:
        yield
    except DatabaseUnavailableError:
        raise
    except TRANSIENT_ERRORS as exc:
        if isinstance(exc, asyncpg.PostgresError) and not isinstance(exc, CONNECTION_LOSS):
            raise  # a lost race (serialization, deadlock): the caller's to retry
        raise DatabaseUnavailableError(where, exc) from exc


class Outage:
    """The state of one process's connection to the database, logged on change only."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.since: float | None = None

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException) -> None:
        if self.since is None:
            self.since = time.monotonic()
            logger.warning(
                "the database at %s is unavailable (%s); retrying until it is back "
                "(jobs keep their leases meanwhile)",
                self.where,
                str(exc).strip() or type(exc).__name__,
            )
        else:
            logger.debug("the database is still unavailable: %s", exc)

    def ok(self) -> None:
        if self.since is not None:
            logger.info(
                "the database at %s is back after %.1f s", self.where, time.monotonic() - self.since
            )
            self.since = None


class _QuietPoolReconnects(logging.Filter):
    """Drops asyncpg's traceback for each failed reconnection of a pool: `Outage` reports it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Failed to restore the pool connection floor")


def quiet_pool_reconnects() -> None:
    """Install the filter on asyncpg's pool logger (once)."""
    pool_logger = logging.getLogger("asyncpg.pool")
    if not any(isinstance(f, _QuietPoolReconnects) for f in pool_logger.filters):
        pool_logger.addFilter(_QuietPoolReconnects())
