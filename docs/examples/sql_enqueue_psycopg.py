"""Enqueue from psycopg 3 through the SQL function, in the transaction of your own writes."""

from __future__ import annotations

import asyncio
import os
import sys

import psycopg
from psycopg.types.json import Jsonb

import sweepq


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    receipts: list[int] = []

    @app.task(name="send_receipt", queue="email")
    async def send_receipt(ctx: sweepq.Context, order_id: int) -> None:
        receipts.append(order_id)

    async with app:
        await app.migrate()  # creates the tables and the function "<schema>".enqueue
    enqueue = app.enqueue_function  # '"sweepq".enqueue' in the default schema
    orders = f'"{schema}".shop_orders'

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {orders} ("
            " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, total_cents bigint NOT NULL)"
        )

        # The order and its job commit together, or neither does.
        async with conn.transaction():
            cursor = await conn.execute(
                f"INSERT INTO {orders} (total_cents) VALUES (%s) RETURNING id", (4_200,)
            )
            order = await cursor.fetchone()
            assert order is not None
            order_id = order[0]
            args = Jsonb({"order_id": order_id})  # the handler's arguments
            # The function cannot see the task's queue="email": pass it.
            options = Jsonb({"queue": "email", "idempotency_key": f"receipt:{order_id}"})
            cursor = await conn.execute(
                f"SELECT job_id, outcome FROM {enqueue}(%s, %s, %s)",
                ("send_receipt", args, options),
            )
            enqueued = await cursor.fetchone()
        assert enqueued is not None
        job_id, outcome = enqueued
        assert outcome == "created"

        # The same key again: no second job; the result names the first one.
        cursor = await conn.execute(
            f"SELECT job_id, outcome FROM {enqueue}(%s, %s, %s)", ("send_receipt", args, options)
        )
        assert await cursor.fetchone() == (job_id, "existing_active")

        # Bad input raises SQLSTATE 22SQ1 (a DataError) naming the option; nothing is written.
        refused: psycopg.DataError | None = None
        try:
            async with conn.transaction():
                await conn.execute(
                    f"SELECT * FROM {enqueue}(%s, %s, %s)",
                    ("send_receipt", Jsonb({"order_id": order_id}), Jsonb({"delay": -5})),
                )
        except psycopg.DataError as exc:
            refused = exc
        assert refused is not None
        assert refused.sqlstate == "22SQ1"
        print(refused.diag.message_primary)  # sweepq: delay must be a number of seconds ...

    async with app, sweepq.Worker(app, queues=["email"], concurrency=2) as worker:
        await worker.run_until_idle()
        job = await app.get_job(job_id)
        assert job is not None
        assert job.state is sweepq.JobState.COMPLETED
        assert receipts == [order_id]


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
