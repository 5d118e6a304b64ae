"""Wake-ups: LISTEN on the schema's channel so an idle worker starts a job within milliseconds.

Enqueue notifies the channel with the queue name of every due job it inserts (delivered at
commit). Notifications are a hint, not a guarantee: they are lost while the listening connection
is down, and a pooler in transaction mode drops them. The worker polls as well, so a lost
notification costs at most one poll interval.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

import anyio
import asyncpg

from .outage import CONNECTION_LOSS, Outage

logger = logging.getLogger("sweepq.worker")
_UNREACHABLE: tuple[type[BaseException], ...] = (OSError, asyncpg.InterfaceError, *CONNECTION_LOSS)


async def listen(
    dsn: str,
    channel: str,
    queues: Collection[str],
    wake: Callable[[], None],
    *,
    on_state: Callable[[bool], None] | None = None,
    on_control: Callable[[str], None] | None = None,
    retry_seconds: float = 1.0,
    application_name: str = "sweepq",
    outage: Outage | None = None,
) -> None:
    """Listen forever, calling `wake()` on each notification for one of `queues`; reconnects.

    A notification that starts with '!' (no queue name does: a pause or a resume) goes to
    `on_control` instead.

    Connection failures are reported to `outage` (once per outage) when given.
    """
    wanted = frozenset(queues)

    def received(_conn: Any, _pid: int, _channel: str, payload: object) -> None:
        if payload in wanted:
            wake()
        elif on_control is not None and isinstance(payload, str) and payload.startswith("!"):
            on_control(payload)

    while True:
        conn: asyncpg.Connection[asyncpg.Record] | None = None
        try:
            conn = await asyncpg.connect(
                dsn, server_settings={"application_name": application_name}
            )
            lost = anyio.Event()
            conn.add_termination_listener(lambda _c, lost=lost: lost.set())
            await conn.add_listener(channel, received)
            if outage is not None:
                outage.ok()
            if on_state is not None:
                on_state(True)
            # Jobs may have been enqueued while we were not listening.
            wake()
            await lost.wait()
            logger.info("the LISTEN connection closed; reconnecting (polling meanwhile)")
        except _UNREACHABLE as exc:
            if outage is None:
                logger.warning("cannot LISTEN for wake-ups (%s); polling until it works", exc)
            else:
                outage.failed(exc)
        except asyncpg.PostgresError as exc:
            logger.warning("cannot LISTEN for wake-ups (%s); polling until it works", exc)
        finally:
            if on_state is not None:
                on_state(False)
            if conn is not None and not conn.is_closed():
                conn.terminate()
        await anyio.sleep(retry_seconds)
