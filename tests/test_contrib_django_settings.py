"""A `SweepqBackend`'s settings (its `TASKS` entry), and the DSN of the Django database it
uses.
"""

from __future__ import annotations

import urllib.parse
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from django.core.exceptions import ImproperlyConfigured

from sweepq.contrib.django.settings import database_dsn, read_settings
from sweepq.core.dsn import check_dsn, redact


def test_a_backend_with_no_options_uses_the_default_database_and_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SWEEPQ_SCHEMA", raising=False)
    monkeypatch.delenv("SWEEPQ_RESULT_MAX_BYTES", raising=False)
    read = read_settings("default", {})
    assert (read.database, read.schema, read.dsn, read.result_max_bytes, read.job_options) == (
        "default", "sweepq", None, 65_536, {},
    )  # fmt: skip
    monkeypatch.setenv("SWEEPQ_SCHEMA", "jobs")
    assert read_settings("default", {}).schema == "jobs"


def test_a_backend_reads_every_option() -> None:
    read = read_settings(
        "tasks",
        {
            "DATABASE": "queue",
            "SCHEMA": "work",
            "DSN": "postgresql://worker@db/app",
            "RESULT_MAX_BYTES": 1000,
            "JOB_OPTIONS": {"max_attempts": 3, "deadline": timedelta(hours=1)},
        },
    )
    assert (read.alias, read.database, read.schema, read.dsn) == (
        "tasks", "queue", "work", "postgresql://worker@db/app",
    )  # fmt: skip
    assert (read.result_max_bytes, read.job_options) == (
        1000,
        {"max_attempts": 3, "deadline": 3600.0},
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"SCEHMA": "x"},
            r"TASKS\['default'\]\['OPTIONS'\] has unknown key\(s\) 'SCEHMA'; the keys",
        ),
        ({"SCHEMA": "no-dashes"}, r"\['SCHEMA'\] \(or SWEEPQ_SCHEMA\) 'no-dashes' is not valid"),
        ({"DATABASE": ""}, r"\['DATABASE'\] must name a DATABASES entry"),
        ({"DSN": "mysql://x"}, r"\['DSN'\]"),
        ({"RESULT_MAX_BYTES": 0}, "result_max_bytes must be a whole number"),
        ({"JOB_OPTIONS": {"queue": "x"}}, r"\['JOB_OPTIONS'\]: queue is the Django task's to set"),
        ({"JOB_OPTIONS": {"retries": 3}}, "unknown job option 'retries'; the options are"),
        ({"JOB_OPTIONS": {"unique_for": 60}}, "unique_for needs identity_key"),
        ({"JOB_OPTIONS": []}, r"\['JOB_OPTIONS'\] must be a dict of job options"),
    ],
)
def test_a_backend_option_that_cannot_work_is_refused_by_name(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        read_settings("default", options)


def django_database(**entry: Any) -> dict[str, Any]:
    return {"ENGINE": "django.db.backends.postgresql", "OPTIONS": {}, **entry}


@pytest.mark.parametrize(
    ("entry", "dsn"),
    [
        (
            {"NAME": "shop", "USER": "web", "HOST": "db", "PORT": 5433},
            "postgresql://web@db:5433/shop",
        ),
        ({"NAME": "shop"}, "postgresql:///shop"),
        (
            {"NAME": "shop", "USER": "web", "HOST": "/var/run/postgresql"},
            "postgresql://web@/shop?host=%2Fvar%2Frun%2Fpostgresql",
        ),
        ({"NAME": "shop", "HOST": "::1", "PORT": "5432"}, "postgresql://[::1]:5432/shop"),
        (
            {"NAME": "shop", "OPTIONS": {"sslmode": "require", "pool": True, "options": "-c x=1"}},
            "postgresql:///shop?sslmode=require",
        ),
    ],
)
def test_the_dsn_of_a_django_database_names_the_same_server(
    entry: dict[str, Any], dsn: str
) -> None:
    built = database_dsn("default", django_database(**entry))
    assert built == dsn
    check_dsn(built)


def test_a_password_is_quoted_in_the_dsn_and_hidden_when_shown() -> None:
    built = database_dsn("default", django_database(NAME="shop", USER="web", PASSWORD="p@ss:w/rd?"))
    assert urllib.parse.urlsplit(built).password == urllib.parse.quote("p@ss:w/rd?", safe="")
    assert urllib.parse.unquote(urllib.parse.urlsplit(built).password or "") == "p@ss:w/rd?"
    assert "p%40ss" not in redact(built)


async def test_the_dsn_of_a_django_database_connects(dsn: str) -> None:
    parts = urllib.parse.urlsplit(dsn)
    entry = django_database(
        NAME=parts.path.lstrip("/"), USER=parts.username or "", PASSWORD=parts.password or "",
        HOST=parts.hostname or "", PORT=parts.port or "",
    )  # fmt: skip
    conn = await asyncpg.connect(database_dsn("default", entry))
    try:
        assert await conn.fetchval("SELECT current_database()") == entry["NAME"]
    finally:
        await conn.close()


def test_a_database_that_is_not_postgresql_is_refused() -> None:
    with pytest.raises(ImproperlyConfigured, match="sweepq needs PostgreSQL, but DATABASES"):
        database_dsn("default", {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"})
