"""`sweepq demo`: on the test server (`--dsn`) and on the embedded PostgreSQL, it walks its
table, prints the summary, removes its data unless told to keep it, and two demos at once wait
for each other instead of breaking each other."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

import anyio
import asyncpg
from typer.testing import CliRunner

import sweepq
from factories import drop_schema
from sweepq.cli import cli

SUMMARY = re.compile(
    r"(?:^| )demo: 2,000 rows in (\d+\.\d) s, ([\d,]+) items/s, 0 failures(?:$| )", re.MULTILINE
)


async def test_the_demo_walks_every_row_of_its_table_and_prints_a_summary(dsn: str) -> None:
    schema = f"t_demo_{uuid.uuid4().hex[:10]}"
    runner = CliRunner(env={"COLUMNS": "120"})
    args = ["demo", "--dsn", dsn, "--schema", schema, "--rows", "2000", "--keep"]
    try:
        result = await anyio.to_thread.run_sync(lambda: runner.invoke(cli, args))
        assert result.exit_code == 0, result.output
        assert SUMMARY.search(result.stdout), result.stdout
        assert "only" not in result.stdout  # no "only N of M rows were checked"
        assert f"data: schema {schema} on " in result.stdout
        assert "kept (remove it: sweepq demo --clean" in result.stdout
        conn = await asyncpg.connect(dsn)
        try:
            unchecked = await conn.fetchval(
                f'SELECT count(*) FROM "{schema}".demo_rows WHERE checksum IS NULL'
            )
            total = await conn.fetchval(f'SELECT count(*) FROM "{schema}".demo_rows')
        finally:
            await conn.close()
        assert (total, unchecked) == (2000, 0)

        clean = ["demo", "--clean", "--dsn", dsn, "--schema", schema]
        cleaned = await anyio.to_thread.run_sync(lambda: runner.invoke(cli, clean))
        assert cleaned.exit_code == 0, cleaned.output
        assert f"dropped schema {schema}" in cleaned.stdout
        assert not await schema_exists(dsn, schema)
        again = await anyio.to_thread.run_sync(lambda: runner.invoke(cli, clean))
        assert f"no schema {schema}: nothing to remove" in again.stdout
    finally:
        conn = await asyncpg.connect(dsn)
        try:
            await drop_schema(conn, schema)
        finally:
            await conn.close()


async def test_the_demo_refuses_a_schema_that_is_not_its_own_and_leaves_it_alone(
    app: sweepq.App,
) -> None:
    @app.task(name="keep")
    async def keep(ctx: sweepq.Context) -> None:
        return None

    job = await app.enqueue(keep)
    runner = CliRunner(env={"COLUMNS": "120"})
    args = ["demo", "--dsn", app.dsn, "--schema", app.schema, "--rows", "10"]
    result = await anyio.to_thread.run_sync(lambda: runner.invoke(cli, args))
    assert result.exit_code == 2, result.output
    assert f"schema {app.schema!r} exists and is not a demo schema" in result.stderr
    assert await app.get_job(job.job_id) is not None


async def schema_exists(dsn: str, schema: str) -> bool:
    conn = await asyncpg.connect(dsn)
    try:
        return bool(
            await conn.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema)
        )
    finally:
        await conn.close()


def demo_processes(args: Sequence[str], env: dict[str, str], count: int = 2) -> list[str]:
    """Start `count` demos at once as separate processes; each one's output once all ended,
    its lines joined (the console wraps a long data path anywhere)."""
    started = [
        subprocess.Popen(
            [sys.executable, "-m", "sweepq.cli", "demo", *args],
            env={**os.environ, "COLUMNS": "120", **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(count)
    ]
    outputs = []
    for process in started:
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output
        outputs.append(" ".join(output.split()))
    return outputs


async def test_a_demo_on_a_dsn_drops_its_schema_and_a_second_one_at_once_waits(
    dsn: str,
) -> None:
    schema = f"t_demo_{uuid.uuid4().hex[:10]}"
    args = ["--dsn", dsn, "--schema", schema, "--rows", "2000"]
    outputs = await anyio.to_thread.run_sync(lambda: demo_processes(args, {}))
    for output in outputs:
        assert SUMMARY.search(output), output
        assert "dropped (pass --keep to keep it)" in output
    # The second waited for the first instead of dropping its schema under it.
    assert sum("another sweepq demo is running" in o for o in outputs) == 1, outputs
    assert not await schema_exists(dsn, schema)


def test_two_embedded_demos_share_one_server_and_remove_its_data_afterwards(
    tmp_path: Path,
) -> None:
    outputs = demo_processes(["--rows", "2000"], {"SWEEPQ_DATA_DIR": str(tmp_path)})
    for output in outputs:
        assert SUMMARY.search(output), output
    assert sum("another sweepq demo is running" in o for o in outputs) == 1, outputs
    # The last one to end stops the server and removes its folder; the other says so.
    assert any("removed (pass --keep to keep it)" in o for o in outputs), outputs
    assert not (tmp_path / "demo").exists()
