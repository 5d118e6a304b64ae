"""A trigger that enqueues a job when a row changes: a parcel that ships gets its email."""

from __future__ import annotations

import asyncio
import os
import sys

import sweepq


def trigger_sql(schema: str, enqueue: str) -> str:
    """SQL for a migration of yours. {enqueue} is sweepq.enqueue in the default schema (here
    the example's schema holds the function and the table)."""
    return f"""
    CREATE TABLE IF NOT EXISTS "{schema}".parcels (
        id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        status text NOT NULL DEFAULT 'new'
    );

    CREATE OR REPLACE FUNCTION "{schema}".parcels_enqueue_shipped() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        -- In the transaction of the UPDATE: no email for a shipment that rolls back.
        PERFORM {enqueue}(
            'send_shipping_email',
            jsonb_build_object('parcel_id', NEW.id),
            -- At most one email per parcel, however often it is marked shipped.
            jsonb_build_object('queue', 'email', 'idempotency_key', 'shipped:' || NEW.id));
        RETURN NULL;  -- an AFTER trigger's result is ignored
    END
    $$;

    CREATE OR REPLACE TRIGGER parcels_shipped
        AFTER INSERT OR UPDATE OF status ON "{schema}".parcels
        FOR EACH ROW
        WHEN (NEW.status = 'shipped')
        EXECUTE FUNCTION "{schema}".parcels_enqueue_shipped();
    """


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    emailed: list[int] = []

    @app.task(name="send_shipping_email", queue="email")
    async def send_shipping_email(ctx: sweepq.Context, parcel_id: int) -> None:
        emailed.append(parcel_id)

    async with app:
        await app.migrate()
        await app.pool.execute(trigger_sql(schema, app.enqueue_function))
        parcels = f'"{schema}".parcels'
        parcel_id = await app.pool.fetchval(f"INSERT INTO {parcels} DEFAULT VALUES RETURNING id")

        async with app.pool.acquire() as conn:
            try:
                async with conn.transaction():
                    await conn.execute(
                        f"UPDATE {parcels} SET status = 'shipped' WHERE id = $1", parcel_id
                    )
                    raise RuntimeError("the carrier refused the parcel")
            except RuntimeError:
                pass  # rolled back: the parcel is not shipped, and no job exists

        await app.pool.execute(f"UPDATE {parcels} SET status = 'shipped' WHERE id = $1", parcel_id)
        await app.pool.execute(f"UPDATE {parcels} SET status = 'shipped' WHERE id = $1", parcel_id)

        async with sweepq.Worker(app, queues=["email"], concurrency=2) as worker:
            await worker.run_until_idle()
        assert emailed == [parcel_id]  # one email, for the update that committed


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
