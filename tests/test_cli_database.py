"""The database a command works on: its DSN and schema, where they came from, and a password that
is never printed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import msgspec
import typer
from typer.testing import CliRunner

import sweepq
from cli_runner import app_module, db_args, invoke, one_line_error
from sweepq.cli.database import DatabaseSettings, DsnOption, SchemaOption, database

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
