"""A sweep: walk every row of a table by keyset pages, one job per row, until the end."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
from typing import Any

import asyncpg

import sweepq

USERS = 2_000


async def run_to_the_end(app: sweepq.App, worker: sweepq.Worker, run_id: int) -> sweepq.SweepRun:
    """Work until the run has ended (a link that waited long hands its slot back, briefly)."""
    async with asyncio.timeout(60):
        while True:
            await worker.run_until_idle()
            run = await app.sweep_status(run_id)
            assert run is not None
            if run.ended:
                return run
            await asyncio.sleep(0.05)


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    users = f'"{schema}".users'  # the example keeps its table next to sweepq's; yours is anywhere

    @app.register_sweep
    class BackfillAvatars(sweepq.Sweep):
        name = "backfill-avatars"
        page_size = 500  # items read per link
        window = 5_000  # most leaf jobs of one run outstanding at once
        max_failure_rate = 0.2  # the walk stops once more than 20 % of recent items fail

        async def page(
            self, conn: asyncpg.Connection[Any], after: tuple[int] | None, limit: int
        ) -> list[dict[str, Any]]:
            # Keyset paging: the rows after the cursor, in key order, at most `limit` of them.
            # Never OFFSET: a link costs the same at row 10 and at row 10 million.
            rows = await conn.fetch(
                f"SELECT id, email FROM {users} WHERE id > $1 ORDER BY id LIMIT $2",
                after[0] if after else 0,
                limit,
            )
            return [dict(row) for row in rows]  # items are job arguments: JSON values

        def key(self, item: dict[str, Any]) -> tuple[int]:
            return (item["id"],)  # the cursor: strictly increasing, never written by handle()

        async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
            digest = hashlib.sha256(item["email"].encode()).hexdigest()
            await ctx.app.pool.execute(
                f"UPDATE {users} SET avatar_url = $2 WHERE id = $1",
                item["id"],
                f"https://avatars.example.com/{digest}.png",
            )

    async with app:
        await app.migrate()  # creates the sweep tables too
        await app.pool.execute(
            f"""CREATE TABLE IF NOT EXISTS {users} (
                    id bigint PRIMARY KEY, email text NOT NULL, avatar_url text);
                INSERT INTO {users} (id, email)
                SELECT i, 'user' || i || '@example.com' FROM generate_series(1, {USERS}) AS i
                ON CONFLICT (id) DO NOTHING"""
        )

        async with sweepq.Worker(app, concurrency=20) as worker:
            started = await app.start_sweep("backfill-avatars")
            assert started.outcome == "started"
            run = await run_to_the_end(app, worker, started.run_id)

        assert run.state is sweepq.SweepState.COMPLETED
        assert (run.enqueued, run.completed, run.failed) == (USERS, USERS, 0)
        assert run.links == USERS // 500 + 1  # four full pages, then one that finds no more
        assert run.cursor == [USERS]
        missing = await app.pool.fetchval(f"SELECT count(*) FROM {users} WHERE avatar_url IS NULL")
        assert missing == 0
        print(f"run {run.id}: {run.completed} users in {run.elapsed_seconds:.1f}s, {run.state}")


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
