"""Django: enqueue through the SQL function on Django's connection, inside transaction.atomic()."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from typing import Any

import django
from django.conf import settings
from django.db import connection, transaction
from psycopg.conninfo import conninfo_to_dict

import sweepq


def configure(dsn: str) -> None:
    """In a Django project this is settings.py's DATABASES; a script configures it itself."""
    if settings.configured:
        return
    params = conninfo_to_dict(dsn)
    settings.configure(
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",  # psycopg 3
                "NAME": params.get("dbname", ""),
                "USER": params.get("user", ""),
                "PASSWORD": params.get("password", ""),
                "HOST": params.get("host", ""),
                "PORT": params.get("port", ""),
            }
        }
    )
    django.setup()


def enqueue(function: str, task: str, args: Any, **options: Any) -> tuple[int, str]:
    """Enqueue on Django's connection, in its current transaction (atomic() or autocommit)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT job_id, outcome FROM {function}(%s, %s::jsonb, %s::jsonb)",
            [task, json.dumps(args), json.dumps(options)],
        )
        job_id, outcome = cursor.fetchone()
    return job_id, outcome


def sign_up(schema: str, function: str, email: str) -> tuple[int, int]:
    """A view's work: the user and the welcome email commit together, or neither does."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                f'INSERT INTO "{schema}".customer_accounts (email) VALUES (%s) RETURNING id',
                [email],
            )
            (user_id,) = cursor.fetchone()
        # No transaction.on_commit() needed: the job is a row of this same transaction.
        job_id, outcome = enqueue(function, "send_welcome_email", {"user_id": user_id})
        assert outcome == "created"
    return user_id, job_id


def run_django(dsn: str, schema: str, function: str) -> tuple[int, int]:
    configure(dsn)
    try:
        return sign_up(schema, function, f"{uuid.uuid4().hex[:8]}@example.com")
    finally:
        connection.close()  # this thread's connection


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    welcomed: list[int] = []

    @app.task(name="send_welcome_email")
    async def send_welcome_email(ctx: sweepq.Context, user_id: int) -> None:
        welcomed.append(user_id)

    async with app:
        await app.migrate()
        await app.pool.execute(
            f'CREATE TABLE IF NOT EXISTS "{schema}".customer_accounts ('
            " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text UNIQUE NOT NULL)"
        )
        # Django's ORM is synchronous and refuses to run on an event loop: give it a thread.
        user_id, job_id = await asyncio.to_thread(run_django, dsn, schema, app.enqueue_function)
        async with sweepq.Worker(app, queues=["default"], concurrency=2) as worker:
            await worker.run_until_idle()
        job = await app.get_job(job_id)
        assert job is not None
        assert job.state is sweepq.JobState.COMPLETED
        assert welcomed == [user_id]


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
