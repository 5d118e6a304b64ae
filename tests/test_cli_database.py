"""The database a command works on: its DSN and schema, where they came from, and a password that
is never printed.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from pathlib import Path

import msgspec
import pytest
import typer
from typer.testing import CliRunner

import sweepq
from cli_runner import app_module, banner, db_args, invoke, one_line_error
from sweepq.cli.database import DatabaseSettings, DsnOption, SchemaOption, database
from sweepq.core.dsn import check_dsn, redact
from sweepq.core.errors import ConfigurationError

_probe = typer.Typer()


@_probe.command()
def _show_database(ctx: typer.Context, dsn: DsnOption = None, schema: SchemaOption = None) -> None:
    typer.echo(msgspec.json.encode(database(ctx)).decode())


def resolved_database(*args: str, env: Mapping[str, str]) -> DatabaseSettings:
    """What a command without APP resolves from ARGS and the environment `env` alone."""
    base = {"SWEEPQ_DSN": None, "DATABASE_URL": None, "SWEEPQ_SCHEMA": None}
    result = CliRunner(env={**base, **env}).invoke(_probe, list(args))
    assert result.exit_code == 0, result.output
    return msgspec.json.decode(result.stdout, type=DatabaseSettings)


def test_the_database_comes_from_dsn_then_sweepq_dsn_then_database_url() -> None:
    env = {"SWEEPQ_DSN": "postgresql://a/a", "DATABASE_URL": "postgresql://b/b"}
    assert resolved_database("--dsn", "postgresql://c/c", env=env).dsn.source == "--dsn"
    assert resolved_database(env=env).dsn.source == "SWEEPQ_DSN"
    only_url = resolved_database(env={"DATABASE_URL": "postgresql://b/b"})
    assert (only_url.dsn.value, only_url.dsn.source) == ("postgresql://b/b", "DATABASE_URL")
    assert (only_url.schema.value, only_url.schema.source) == ("sweepq", "default")
    named = resolved_database("--schema", "s1", env={**env, "SWEEPQ_SCHEMA": "s2"})
    assert (named.schema.value, named.schema.source) == ("s1", "--schema")
    from_env = resolved_database(env={**env, "SWEEPQ_SCHEMA": " s2 "})
    assert (from_env.schema.value, from_env.schema.source) == ("s2", "SWEEPQ_SCHEMA")
    missing = CliRunner(env={"SWEEPQ_DSN": None, "DATABASE_URL": None}).invoke(_probe, [])
    assert "--dsn" in one_line_error(missing)
    bad = CliRunner(env={"SWEEPQ_DSN": None}).invoke(_probe, ["--schema", "no such"], env=env)
    assert "schema name (from --schema) 'no such' is not valid" in one_line_error(bad)


async def test_a_schema_that_was_never_migrated_is_named_with_its_pending_migrations(
    dsn: str,
) -> None:
    reads = [
        ["jobs", "list"], ["jobs", "show", "1"], ["sweep", "status"], ["sweep", "status", "1"],
        ["sweep", "status", "--watch"], ["sweep", "failures", "1"], ["sweep", "pause", "1"],
        ["prune"],
    ]  # fmt: skip
    for args in reads:
        result = await invoke([*args, "--dsn", dsn, "--schema", "never_migrated_here"])
        line = one_line_error(result)
        assert "schema 'never_migrated_here' at " in line, args
        assert "is not migrated (" in line, args
        assert "run `sweepq migrate --schema never_migrated_here`" in line, args
        assert "does not exist" not in line, args


async def test_a_dsn_password_is_never_printed() -> None:
    dsn = "postgresql://someone:hunter2secret@127.0.0.1:1/nowhere"
    result = await invoke(["jobs", "list", "--dsn", dsn])
    line = one_line_error(result)
    assert "hunter2secret" not in result.output
    assert "cannot reach PostgreSQL" in line


async def test_an_app_with_another_schema_than_asked_is_refused(
    app_dir: Path, app: sweepq.App
) -> None:
    name = app_module(app_dir, "import sweepq\napp = sweepq.App(schema='elsewhere')\n")
    result = await invoke(["worker", f"{name}:app", *db_args(app)])
    line = one_line_error(result)
    assert f"--schema says schema '{app.schema}' but the App uses schema 'elsewhere'" in line


@pytest.mark.parametrize(
    ("keywords", "url"),
    [
        ("host=localhost port=5432 dbname=app user=me", "postgresql://me@localhost:5432/app"),
        (" host = localhost   dbname = app ", "postgresql://localhost/app"),
        ("host=db1,db2 port=5432,5433 dbname=app", "postgresql://db1:5432,db2:5433/app"),
        ("host=db1,db2 port=5433 dbname=app", "postgresql://db1:5433,db2:5433/app"),
        ("host=::1 dbname=app", "postgresql://[::1]/app"),
        ("hostaddr=10.0.0.5 dbname=app", "postgresql://10.0.0.5/app"),
        ("host=/var/run/postgresql dbname=app", "postgresql:///app?host=%2Fvar%2Frun%2Fpostgresql"),
        ("host=/tmp,db port=5432,5433 user=u", "postgresql://u@?host=%2Ftmp%2Cdb&port=5432%2C5433"),
        ("port=5433 dbname=app", "postgresql:///app?port=5433"),
        (r"user='my user' password='it\'s a \\ pass' dbname='my db/x?'",
         "postgresql://my%20user:it%27s%20a%20%5C%20pass@/my%20db%2Fx%3F"),
        (r"password=p@ss:w/rd\ x dbname=app", "postgresql://:p%40ss%3Aw%2Frd%20x@/app"),
        ("dbname=app sslmode=require application_name='nightly job'",
         "postgresql:///app?sslmode=require&application_name=nightly%20job"),
        ("dbname=app user='' host=", "postgresql:///app"),  # empty is unset, as in libpq
        ("dbname=first dbname=second", "postgresql:///second"),  # the last one counts
    ],
)  # fmt: skip
def test_a_key_value_connection_string_becomes_the_url_of_the_same_connection(
    keywords: str, url: str
) -> None:
    assert check_dsn(keywords) == url


def test_the_url_of_a_key_value_string_keeps_user_password_and_database_exactly() -> None:
    url = check_dsn(r"user='a b' password='p\'@:/?#%' dbname='shop é'")
    parts = urllib.parse.urlsplit(url)
    assert urllib.parse.unquote(parts.username or "") == "a b"
    assert urllib.parse.unquote(parts.password or "") == "p'@:/?#%"
    assert urllib.parse.unquote(parts.path[1:]) == "shop é"
    assert "p'@" not in redact(url)
    assert redact(r"host=db password='p\' w' user=u") == "host=db password=*** user=u"
    assert redact(r"password = p\ w user=u") == "password = *** user=u"


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("nonsense", "is neither a postgresql:// URL nor key=value pairs; write it as key=value"),
        ("   ", "is empty; write it as key=value pairs"),
        ("host=localhost dbname", "has a word with no '=' after it (after host=...)"),
        ("=app", "has a value with no key (at its start)"),
        ("host=db password='hunter2", "a quoted value of 'password' with no closing quote"),
        ("password = hunter2 secret", "a word with no '=' after it (after password=...)"),
        ("host=a,b port=1,2,3", "lists 2 host(s) and 3 ports: give one port for every host"),
        ("host=a hostaddr=10.0.0.5", "gives both host and hostaddr"),
        ("host=db port=http", "has a port that is not a number from 1 to 65535"),
        ("mysql://db/app", "is not a PostgreSQL URL"),
    ],
)
def test_a_dsn_that_is_neither_form_is_refused_saying_how_to_write_it(
    given: str, says: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        check_dsn(given, "--dsn")
    message = str(refused.value)
    assert message.startswith("--dsn ")
    assert says in message
    assert any(fix in message for fix in ("; write it as ", ": give one port", ": keep host"))
    assert "hunter2" not in message
    assert "secret" not in message


async def test_a_command_connects_with_a_key_value_dsn_and_never_prints_its_password(
    app: sweepq.App,
) -> None:
    parts = urllib.parse.urlsplit(app.dsn)
    keywords = (
        f"host={parts.hostname} port={parts.port or 5432} dbname='{parts.path[1:]}' "
        f"user='{parts.username or ''}' application_name='sweepq cli test'"
    )
    listed = await invoke(["jobs", "list", "--dsn", keywords, "--schema", app.schema])
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.strip() == "no jobs match"
    from_env = await invoke(
        ["sweep", "status", "--schema", app.schema], env={"SWEEPQ_DSN": keywords}
    )
    assert from_env.exit_code == 0, from_env.output

    hidden = "host=127.0.0.1 port=1 dbname=nowhere user=someone password='hunter2 secret'"
    line = one_line_error(await invoke(["jobs", "list", "--dsn", hidden]))
    assert "cannot reach PostgreSQL at postgresql://someone:***@127.0.0.1:1/nowhere" in line
    assert "hunter2" not in line


def test_the_worker_banner_shows_a_key_value_dsn_as_its_url_without_the_password(
    worker_app: str,
) -> None:
    given = "host=127.0.0.1 port=1 dbname=nowhere user=someone password='hunter2 secret'"
    for args, env in ((["--dsn", given], {}), ([], {"SWEEPQ_DSN": given})):
        shown = banner(worker_app, *args, env=env)
        source = "--dsn" if args else "SWEEPQ_DSN"
        assert shown["database"] == ("postgresql://someone:***@127.0.0.1:1/nowhere", source)
