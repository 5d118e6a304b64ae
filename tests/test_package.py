"""The package's conventions: one version, `python -m sweepq`, its license, SWEEPQ_SCHEMA."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sweepq
from sweepq.cli import cli

ROOT = Path(__file__).resolve().parent.parent


def test_the_version_has_one_source_and_the_cli_prints_it() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert sweepq.__version__ == importlib.metadata.version("sweepq") == declared
    result = CliRunner().invoke(cli, ["--version"])
    assert (result.exit_code, result.stdout) == (0, f"sweepq {declared}\n")


def test_python_dash_m_sweepq_is_the_command() -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "sweepq", "--version"], capture_output=True, text=True, check=True
    )
    assert ran.stdout == f"sweepq {sweepq.__version__}\n"


def test_the_license_is_declared_in_spdx_and_shipped() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert "Typing :: Typed" in project["classifiers"]
    # Each runtime dependency has an upper bound: a next major version cannot break installs.
    assert all("<" in requirement for requirement in project["dependencies"])


def test_an_app_reads_its_schema_from_sweepq_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEEPQ_SCHEMA", " shop ")
    assert sweepq.App().schema == "shop"
    assert sweepq.App(schema="billing").schema == "billing"  # given in code, it wins
    monkeypatch.setenv("SWEEPQ_SCHEMA", "no such; schema")
    with pytest.raises(sweepq.InvalidIdentifierError, match="from SWEEPQ_SCHEMA"):
        sweepq.App()
    monkeypatch.delenv("SWEEPQ_SCHEMA")
    assert sweepq.App().schema == "sweepq"


async def test_an_unmigrated_schema_is_a_clear_error_naming_the_fix(dsn: str) -> None:
    async with sweepq.App(dsn, schema="t_never_migrated") as app:

        @app.task(name="noop")
        async def noop(ctx: sweepq.Context) -> None:
            return None

        with pytest.raises(sweepq.SchemaNotMigratedError) as raised:
            await app.enqueue(noop)
        message = str(raised.value)
        assert "schema 't_never_migrated' at " in message
        assert "is not migrated" in message
        assert "run `sweepq migrate --schema t_never_migrated`" in message
        with pytest.raises(sweepq.SchemaNotMigratedError, match="is not migrated"):
            async with sweepq.Worker(app):
                pass


async def test_a_schema_behind_the_code_is_named_with_its_pending_migrations(
    app: sweepq.App,
) -> None:
    await app.check_migrated()  # up to date: nothing to say
    await app.pool.execute(
        f'DELETE FROM "{app.schema}".schema_migrations WHERE component = $1 AND version = $2',
        "sweeps",
        3,
    )
    with pytest.raises(sweepq.SchemaNotMigratedError) as raised:
        await app.check_migrated()
    assert "is behind this version of sweepq (1 migration(s) pending: sweeps/0003_progress)" in str(
        raised.value
    )
    assert raised.value.pending == ["sweeps/0003_progress"]
