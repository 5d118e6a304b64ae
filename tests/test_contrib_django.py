"""sweepq.contrib.django, the parts that need no `django.tasks`: its settings, the DSN it builds
from Django's DATABASES, sweepq's job options for Django tasks, how jobs read as task results,
and the refusals of `sweepq worker --django`. The backend itself runs under Django 6 in
tests/django_project (Python 3.12), which CI runs with sweepq's wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import django
import msgspec
import psycopg
import pytest
from django.core.exceptions import ImproperlyConfigured

import sweepq
import sweepq.contrib.django
from sweepq.contrib.django.management.commands.sweepq_worker import _without_manage_options
from sweepq.contrib.django.mapping import STATUS, exception_path, task_errors, worker_ids
from sweepq.contrib.django.options import (
    check_job_options,
    current_job_options,
    job_defaults,
    job_options,
    merged,
    task_job_options,
)
from sweepq.contrib.django.settings import database_dsn, read_settings
from sweepq.contrib.django.statements import backend_statements, django_placeholders
from sweepq.core.decision import describe
from sweepq.core.dsn import check_dsn, redact
from sweepq.core.jobs import Job, JobError

HAS_TASKS = django.VERSION >= (6,)


# settings ---------------------------------------------------------------------------------------


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


# the statements the backend runs on Django's connection ---------------------------------------


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


# job options ------------------------------------------------------------------------------------


def test_job_options_are_checked_and_converted_for_the_sql_function() -> None:
    checked = check_job_options(
        {"deadline": timedelta(minutes=2), "timeout": 30, "concurrency_key": "smtp", "group": None},
        "here",
    )
    assert checked == {"deadline": 120.0, "timeout": 30.0, "concurrency_key": "smtp", "group": None}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"priority": 5}, r"^here: priority is the Django task's to set, with @task\(priority"),
        ({"run_at": datetime.now(UTC)}, r"run_at is the Django task's to set, with task.using\("),
        ({"delay": 5}, r"delay is the Django task's to set, with task.using\(run_after"),
        ({"max_attempts": 0}, r"^here: max_attempts must be an int in 1\.\.1000000"),
        ({"deadline": -1}, "^here: deadline must be a timedelta or a finite number of seconds"),
        ({"idempotency_key": ""}, "^here: idempotency_key must be a non-empty string"),
        ({"concurrency_key": "a\x00b"}, "cannot hold NUL"),
    ],
)
def test_a_job_option_that_cannot_be_honoured_is_refused_where_it_is_given(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(sweepq.InvalidJobOptionError, match=message):
        check_job_options(options, "here")


def test_job_options_blocks_nest_and_end_with_their_block() -> None:
    assert current_job_options() == {}
    with job_options(max_attempts=2, group="outer"):
        with job_options(group="inner", idempotency_key="k"):
            assert current_job_options() == {
                "max_attempts": 2,
                "group": "inner",
                "idempotency_key": "k",
            }
        assert current_job_options() == {"max_attempts": 2, "group": "outer"}
    assert current_job_options() == {}


def test_a_bad_option_fails_at_the_job_options_call_before_its_block() -> None:
    with pytest.raises(sweepq.InvalidJobOptionError, match=r"^job_options\(\): unknown job option"):
        job_options(retries=3)


def test_job_defaults_mark_the_function_and_merge_by_level() -> None:
    @job_defaults(max_attempts=10, concurrency_key="stripe")
    def charge(order_id: int) -> None: ...

    assert task_job_options(charge) == {"max_attempts": 10, "concurrency_key": "stripe"}
    backend = {"max_attempts": 3, "deadline": 60.0}
    with job_options(concurrency_key="stripe:eu", identity_key="order:1", unique_for=600):
        options = merged(backend, task_job_options(charge), current_job_options())
    assert options == {
        "max_attempts": 10, "deadline": 60.0, "concurrency_key": "stripe:eu",
        "identity_key": "order:1", "unique_for": 600.0,
    }  # fmt: skip
    with pytest.raises(sweepq.InvalidJobOptionError, match="2,048 bytes"):
        merged({"idempotency_scope": "\N{GRINNING FACE}" * 512, "idempotency_key": "k"})


def test_job_defaults_above_the_task_decorator_is_refused() -> None:
    class FrozenTask:  # like django.tasks.Task: a frozen dataclass with slots
        __slots__ = ()

        def __call__(self) -> None: ...

    with pytest.raises(TypeError, match="goes under @task, on the function itself"):
        job_defaults(max_attempts=2)(FrozenTask())


# jobs as task results ---------------------------------------------------------------------------


def job(state: str, *, attempt: int = 1, worker_id: str | None = None, errors: Any = ()) -> Job:
    now = datetime.now(UTC)
    return Job(
        id=sweepq.JobId(1), task="t.x", queue="default", priority=0,
        state=sweepq.JobState(state), args={}, attempt=attempt, max_attempts=3, snoozes=0,
        errors=list(errors), run_at=now, created_at=now, attempted_at=now, finished_at=None,
        deadline_at=None, failure_reason=None, worker_id=worker_id, lease_expires_at=None,
        idempotency_scope="", idempotency_key=None, identity_key=None, concurrency_key=None,
        group=None,
    )  # fmt: skip


def test_every_job_state_has_a_task_result_status() -> None:
    assert set(STATUS) == set(sweepq.JobState)
    assert {s: STATUS[s] for s in sweepq.JobState} == {
        sweepq.JobState.AVAILABLE: "READY",
        sweepq.JobState.RUNNING: "RUNNING",
        sweepq.JobState.COMPLETED: "SUCCESSFUL",
        sweepq.JobState.FAILED: "FAILED",
        sweepq.JobState.CANCELLED: "FAILED",
    }


class PaymentDeclined(Exception):
    pass


def raised(exc: BaseException) -> str:
    try:
        raise exc
    except BaseException as caught:
        return describe(caught)


@pytest.mark.parametrize(
    ("kind", "error", "path"),
    [
        ("exception", raised(ValueError("bad")), "builtins.ValueError"),
        ("exception", raised(PaymentDeclined("no")), f"{__name__}.PaymentDeclined"),
        ("exception", raised(KeyError("k")), "builtins.KeyError"),
        ("exception", "Traceback...\n  File x\nLocalThing: odd", "__main__.LocalThing"),
        ("exception", "", "builtins.Exception"),
        ("retry_after", "retry after 30s", "sweepq.RetryAfter"),
        ("cancelled", "customer left", "sweepq.Cancel"),
        ("timeout", "the handler ran past its timeout of 5 s", "builtins.TimeoutError"),
        ("lease_expired", "lease held by worker w expired", "builtins.TimeoutError"),
        ("worker_died", "worker w died while running it", "builtins.SystemError"),
        ("unknown_task", "no handler for task 't'", "builtins.LookupError"),
        ("error", "the stored args do not fit", "builtins.TypeError"),
        ("interrupted", "the worker stopped", None),
        ("database_unavailable", raised(ConnectionError("gone")), None),
    ],
)
def test_each_error_kind_reads_as_an_exception_class_or_is_not_the_tasks(
    kind: str, error: str, path: str | None
) -> None:
    assert exception_path(JobError(1, "2026-01-01T00:00:00Z", kind, error)) == path


def test_a_jobs_errors_and_attempts_read_as_the_frameworks() -> None:
    errors = [
        JobError(1, "t", "exception", raised(ValueError("one"))),
        JobError(2, "t", "interrupted", "stopped"),
        JobError(2, "t", "exception", raised(ValueError("two"))),
    ]
    failed = job("failed", attempt=2, errors=errors)
    assert [p for p, _ in task_errors(failed)] == ["builtins.ValueError"] * 2
    assert worker_ids(failed) == ["", ""]
    assert worker_ids(job("running", attempt=3, worker_id="host:1:ab")) == ["", "", "host:1:ab"]
    assert worker_ids(job("available", attempt=0)) == []


# the package without django.tasks -------------------------------------------------------------


def test_the_package_and_its_helpers_import_without_setting_django_up() -> None:
    assert set(sweepq.contrib.django.__all__) == {
        "SweepqBackend", "await_for", "job_defaults", "job_options", "wait_for", "worker_app",
    }  # fmt: skip
    assert sweepq.contrib.django.job_options is job_options
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        sweepq.contrib.django.nope  # noqa: B018  # the lookup is the test


def test_the_backend_needs_django_6_and_says_so_under_an_older_one() -> None:
    if HAS_TASKS:  # the main suite runs on Python 3.11, where Django stops at 5.2
        assert sweepq.contrib.django.SweepqBackend.supports_get_result
        return
    with pytest.raises(ImportError) as caught:
        sweepq.contrib.django.SweepqBackend  # noqa: B018  # the import is the test
    message = str(caught.value)
    assert "Django 6.0" in message
    assert f"this is Django {django.get_version()}" in message
    assert "pip install 'sweepq[django]'" in message


def test_manage_py_options_are_not_passed_on_to_the_worker() -> None:
    args = ["--settings", "mysite.settings", "--queue", "a", "--pythonpath=/x", "-c", "4"]
    assert _without_manage_options(args) == ["--queue", "a", "-c", "4"]


# sweepq worker --django -----------------------------------------------------------------------


def worker(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, **env}
    for name in ("SWEEPQ_APP", "DJANGO_SETTINGS_MODULE"):
        if name not in env:
            environ.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "sweepq.cli", "worker", *args],
        cwd=cwd, env=environ, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_django_worker_needs_the_settings_module(tmp_path: Path) -> None:
    run = worker("--django", cwd=tmp_path)
    assert run.returncode == 2
    assert "--django needs DJANGO_SETTINGS_MODULE (e.g. mysite.settings)" in run.stderr
    assert "manage.py sweepq_worker" in run.stderr


def test_the_django_worker_takes_no_app(tmp_path: Path) -> None:
    run = worker("--django", "shop.tasks:app", cwd=tmp_path)
    assert run.returncode == 2
    assert "--django runs the tasks of Django's TASKS setting: give no APP with it" in run.stderr
    run = worker("--django", cwd=tmp_path, SWEEPQ_APP="shop.tasks:app")
    assert "give no SWEEPQ_APP with it" in run.stderr


def test_settings_that_fail_to_load_are_named(tmp_path: Path) -> None:
    (tmp_path / "broken_settings.py").write_text("raise RuntimeError('no secret key')\n")
    run = worker("--django", cwd=tmp_path, DJANGO_SETTINGS_MODULE="broken_settings")
    assert run.returncode == 2
    assert (
        "DJANGO_SETTINGS_MODULE='broken_settings' failed: RuntimeError: no secret key" in run.stderr
    )
    assert "Traceback" not in run.stderr


def test_the_django_worker_needs_a_sweepq_backend_of_django_6(tmp_path: Path) -> None:
    (tmp_path / "site_settings.py").write_text(
        textwrap.dedent(
            """
            SECRET_KEY = "x"
            INSTALLED_APPS = []
            DATABASES = {}
            """
        )
    )
    run = worker("--django", cwd=tmp_path, DJANGO_SETTINGS_MODULE="site_settings")
    assert run.returncode == 2
    if HAS_TASKS:  # TASKS is Django's default: its ImmediateBackend
        assert "not sweepq.contrib.django.SweepqBackend" in run.stderr
    else:
        assert "sweepq.contrib.django is a backend for Django's tasks framework" in run.stderr
