"""The statements the backend runs on Django's own connection: the core's, in Django's style."""

from __future__ import annotations

import msgspec
import psycopg
import pytest

import sweepq
import sweepq.contrib.django
from sweepq.contrib.django.statements import backend_statements, django_placeholders
from sweepq.core.jobs import Job


def test_a_core_statement_takes_djangos_placeholders_with_its_percent_signs_kept() -> None:
    sql = "-- 100% of them\nSELECT $1 || '%', $2"
    assert django_placeholders(sql) == "-- 100%% of them\nSELECT %s || '%%', %s"
    with pytest.raises(ValueError, match=r"once each and in order; this one uses \[2, 1\]"):
        django_placeholders("SELECT $2, $1")
    with pytest.raises(ValueError, match=r"uses \[1, 1\]"):
        django_placeholders("SELECT $1 WHERE $1 > 0")


async def test_the_backend_reads_a_job_with_the_cores_statement_on_a_django_style_cursor(
    app: sweepq.App,
) -> None:
    @app.task(name="orders.tasks.send")
    async def send(ctx: sweepq.Context, to: str) -> None: ...

    statements = backend_statements(app.schema)
    assert set(statements) == {"django_task_enqueue", "job_get_json"}
    enqueued = await app.enqueue(send, {"to": "ada@example.com"})
    # Django's psycopg cursor formats its parameters on the client, as ClientCursor does.
    async with await psycopg.AsyncConnection.connect(app.dsn) as conn:
        cursor = psycopg.AsyncClientCursor(conn)
        await cursor.execute(statements["job_get_json"], [enqueued.job_id])
        (text,) = await cursor.fetchone() or (None,)
        await cursor.execute(statements["job_get_json"], [enqueued.job_id + 1000])
        assert await cursor.fetchone() is None
    assert isinstance(text, str)
    assert msgspec.json.decode(text, type=Job) == await app.get_job(enqueued.job_id)
