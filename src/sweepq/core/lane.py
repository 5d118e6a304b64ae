"""The lane: one pooled connection an App keeps for its own short statements.

Taking a connection from asyncpg's pool and giving it back costs about as much client CPU as
the statement it runs (a task is created to release it, whatever the reset). A call that finds
the lane free runs on it instead; a call that finds it busy takes a connection from the pool, as
before. The lane holds no session state between calls (sweepq's statements leave none), and a
call that ends in an exception gives the connection back to the pool, which resets or replaces
it: its state is unknown (cancelled mid-statement, or the connection lost).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

Proxy: TypeAlias = "PoolConnectionProxy[asyncpg.Record]"


class Lane:
    """One connection of `pool`, lent to one caller at a time."""

    def __init__(self, pool: asyncpg.Pool[asyncpg.Record]) -> None:
        self._pool = pool
        self._conn: Proxy | None = None
        self._busy = False
        self._closed = False

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Proxy]:
        """The lane's connection if it is free, else one of the pool's for the block."""
        if self._busy or self._closed:
            async with self._pool.acquire() as acquired:
                yield acquired
            return
        self._busy = True
        try:
            conn = self._conn
            if conn is None or not _usable(conn):
                await self._drop()
                conn = self._conn = await self._pool.acquire()
            try:
                yield conn
            except BaseException:
                await self._drop()
                raise
            if conn.is_in_transaction() or self._closed:  # never in one after our statements
                await self._drop()
        finally:
            self._busy = False

    async def close(self) -> None:
        """Give the connection back to the pool (before the pool closes); a call using it
        keeps it to its end, and gives it back then (the pool's close waits for that)."""
        self._closed = True
        if not self._busy:
            await self._drop()

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(asyncpg.InterfaceError):  # the pool took it back already
                await self._pool.release(conn)


def _usable(conn: Proxy) -> bool:
    """Whether the connection is open and still lent to us (the pool takes back a connection
    that was lost)."""
    try:
        return not conn.is_closed()
    except asyncpg.InterfaceError:
        return False
