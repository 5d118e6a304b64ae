"""Pacing a sweep on the database's health: ready-made checks, and one of your own."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta
from typing import Any

import asyncpg

import sweepq
import sweepq.throttle
from sweepq.throttle import Wait


def connections_in_use(max_fraction: float) -> sweepq.throttle.Check:
    """A check of your own: wait while more than `max_fraction` of max_connections are used."""

    async def check(conn: asyncpg.Connection[Any]) -> timedelta | None:
        row = await conn.fetchrow(
            "SELECT count(*) AS used, current_setting('max_connections')::int AS most"
            " FROM pg_stat_activity WHERE backend_type = 'client backend'"
        )
        assert row is not None
        return timedelta(seconds=10) if row["used"] > max_fraction * row["most"] else None

    check.__qualname__ = f"connections_in_use({max_fraction:g})"  # its name in the run's status
    return check


# --8<-- [start:recipe]
class RecomputeBalances(sweepq.Sweep):
    name = "recompute-balances"
    # Checked before each page fans out; the first that asks for a wait postpones it.
    throttle = (
        sweepq.throttle.replica_lag(5),  # a replica replays more than 5 s behind
        sweepq.throttle.long_transactions(300),  # a transaction open for 5 minutes
    )
    # --8<-- [end:recipe]

    async def page(
        self, conn: asyncpg.Connection[Any], after: tuple[int] | None, limit: int
    ) -> list[int]:
        rows = await conn.fetch(
            f"SELECT id FROM {self.table} WHERE id > $1 ORDER BY id LIMIT $2",
            after[0] if after else 0,
            limit,
        )
        return [row["id"] for row in rows]

    def key(self, item: int) -> tuple[int]:
        return (item,)

    async def handle(self, ctx: sweepq.Context, item: int) -> None:
        await ctx.app.pool.execute(f"UPDATE {self.table} SET balance = 0 WHERE id = $1", item)

    @property
    def table(self) -> str:
        assert self.app is not None
        return f'"{self.app.schema}".accounts'  # the example keeps it next to sweepq's tables


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    app.register_sweep(RecomputeBalances)
    accounts = f'"{schema}".accounts'
    replica, transactions = RecomputeBalances.throttle
    dead = sweepq.throttle.dead_tuples(f"{schema}.accounts", 0.25)  # a quarter of it dead

    async with app:
        await app.migrate()
        async with app.pool.acquire() as conn:
            # A table of 20,000 accounts, three quarters of them deleted since.
            await conn.execute(
                f"""DROP TABLE IF EXISTS {accounts};
                    CREATE TABLE {accounts} (id bigint PRIMARY KEY, balance bigint);
                    INSERT INTO {accounts} SELECT i, 0 FROM generate_series(1, 20000) AS i;
                    DELETE FROM {accounts} WHERE id <= 15000"""
            )
            # Sessions report their changes to the statistics about once a second: now.
            await conn.execute("SELECT pg_stat_force_next_flush()")

            # Each check is a call on a connection: a Wait (a timedelta with a reason), or None.
            assert repr(replica) == "replica_lag(max_seconds=5)"  # how a run's status names it
            assert repr(transactions) == "long_transactions(max_seconds=300)"
            assert await replica(conn) is None  # this server streams to no replica
            waited = await dead(conn)
            assert isinstance(waited, timedelta)
            assert waited == timedelta(seconds=5)
            assert waited.reason == f"dead tuples of {schema}.accounts 75 % > 25 %"
            print(f"throttled: {waited.reason} (for {waited.total_seconds():g} s)")

            # VACUUM removes the dead rows, and the same check lets the sweep go. (Rows that a
            # transaction older than the DELETE may still see stay until it ends: the reason
            # for long_transactions.)
            async with asyncio.timeout(30):
                while await dead(conn) is not None:
                    await conn.execute(f"VACUUM {accounts}")

            # Your own check: never above max_connections; always above none of them.
            assert await connections_in_use(1.0)(conn) is None
            assert await connections_in_use(0.0)(conn) == timedelta(seconds=10)
            # The checks in order, as a link calls them: the first wait asked for is what the
            # run's status shows; a plain timedelta's reason is the check's name.
            first = await sweepq.throttle.first_wait(conn, [replica, dead, connections_in_use(0)])
            assert isinstance(first, Wait)
            assert first.reason == "connections_in_use(0)"
            print(f"throttled: {first.reason} (for {first.total_seconds():g} s)")

            # A transaction left open in another session: long_transactions names it.
            async with app.pool.acquire() as other, other.transaction():
                await other.execute("SELECT txid_current()")
                await asyncio.sleep(0.2)
                open_too_long = await sweepq.throttle.long_transactions(0.1)(conn)
                assert open_too_long is not None
                print(f"throttled: {open_too_long.reason}")


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
