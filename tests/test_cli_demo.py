"""`sweepq demo --dsn` on the test server: it walks its table and prints the summary."""

from __future__ import annotations

import re
import uuid

import anyio
import asyncpg
from typer.testing import CliRunner

import sweepq
from sweepq.cli import cli

SUMMARY = re.compile(
    r"^demo: 2,000 rows in (\d+\.\d) s, ([\d,]+) items/s, 0 failures$", re.MULTILINE
)


async def test_the_demo_walks_every_row_of_its_table_and_prints_a_summary(dsn: str) -> None:
    schema = f"t_demo_{uuid.uuid4().hex[:10]}"
    runner = CliRunner(env={"COLUMNS": "120"})
    args = ["demo", "--dsn", dsn, "--schema", schema, "--rows", "2000"]
    try:
        result = await anyio.to_thread.run_sync(lambda: runner.invoke(cli, args))
        assert result.exit_code == 0, result.output
        assert SUMMARY.search(result.stdout), result.stdout
        assert "only" not in result.stdout  # no "only N of M rows were checked"
        conn = await asyncpg.connect(dsn)
        try:
            unchecked = await conn.fetchval(
                f'SELECT count(*) FROM "{schema}".demo_rows WHERE checksum IS NULL'
            )
            total = await conn.fetchval(f'SELECT count(*) FROM "{schema}".demo_rows')
        finally:
            await conn.close()
        assert (total, unchecked) == (2000, 0)
    finally:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
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
