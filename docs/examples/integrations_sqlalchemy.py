"""SQLAlchemy 2 (psycopg driver): enqueue through the SQL function in the session's transaction."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from sqlalchemy import create_engine, make_url, text
from sqlalchemy.orm import Session

import sweepq


def enqueue(session: Session, function: str, task: str, args: Any, **options: Any) -> Any:
    """Enqueue on the session's connection, in its transaction; the (job_id, outcome) row."""
    statement = text(
        f"SELECT job_id, outcome FROM {function}(:task, CAST(:args AS jsonb),"
        " CAST(:options AS jsonb))"
    )
    params = {"task": task, "args": json.dumps(args), "options": json.dumps(options)}
    return session.execute(statement, params).one()


def place_order(url: str, schema: str, function: str, total_cents: int) -> tuple[int, int]:
    """Your application's code: one transaction for the order and its receipt."""
    engine = create_engine(make_url(url).set(drivername="postgresql+psycopg"))
    try:
        with Session(engine) as session, session.begin():  # commits at the end, or rolls back
            order_id: int = session.execute(
                text(f'INSERT INTO "{schema}".purchases (total_cents) VALUES (:t) RETURNING id'),
                {"t": total_cents},
            ).scalar_one()
            job = enqueue(session, function, "send_receipt", {"order_id": order_id})
            assert job.outcome == "created"
        return order_id, job.job_id
    finally:
        engine.dispose()


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    receipts: list[int] = []

    @app.task(name="send_receipt")
    async def send_receipt(ctx: sweepq.Context, order_id: int) -> None:
        receipts.append(order_id)

    async with app:
        await app.migrate()
        await app.pool.execute(
            f'CREATE TABLE IF NOT EXISTS "{schema}".purchases ('
            " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, total_cents bigint NOT NULL)"
        )
        # SQLAlchemy is synchronous here, as in most applications: run it off the event loop.
        order_id, job_id = await asyncio.to_thread(
            place_order, dsn, schema, app.enqueue_function, 4_200
        )
        async with sweepq.Worker(app, queues=["default"], concurrency=2) as worker:
            await worker.run_until_idle()
        job = await app.get_job(job_id)
        assert job is not None
        assert job.state is sweepq.JobState.COMPLETED
        assert receipts == [order_id]


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
