"""`sweepq migrate` and `sweepq prune` against the real database."""

from __future__ import annotations

import uuid
from datetime import timedelta

import msgspec
import pytest

import sweepq
from cli_runner import db_args, invoke, one_line_error, worked
from factories import backdate_jobs, drop_schema, schema_exists


async def test_migrate_dry_run_lists_pending_migrations_and_creates_nothing(
    app: sweepq.App,
) -> None:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    args = ["migrate", "--dsn", app.dsn, "--schema", schema]
    try:
        dry = await invoke([*args, "--dry-run"])
        assert dry.exit_code == 0, dry.output
        assert "core/0001_initial" in dry.stdout
        assert "pending" in dry.stdout
        assert not await schema_exists(app, schema)

        applied = await invoke(args)
        assert applied.exit_code == 0, applied.output
        assert "applied now" in applied.stdout

        again = await invoke([*args, "--json"])
        report = msgspec.json.decode(again.stdout)
        assert report["applied_now"] == []
        assert "core/0001_initial" in report["applied"]
        nothing = await invoke([*args, "--dry-run"])
        assert "nothing pending: up to date" in nothing.stdout
    finally:
        await drop_schema(app.pool, schema)


@pytest.mark.parametrize("text", ["7", "7x", "-1d", "d", "1d2h", "", "seven days"])
async def test_prune_refuses_a_bad_duration_with_the_accepted_forms(text: str) -> None:
    result = await invoke(["prune", "--older-than", text, "--dsn", "postgresql://x@127.0.0.1:1/x"])
    line = one_line_error(result)
    assert "is not a duration" in line
    assert "30s, 15m, 12h, 7d, 2w" in line


async def test_prune_removes_old_terminal_jobs_and_prints_counts_per_table(
    app: sweepq.App,
) -> None:
    ids = await worked(app)
    await backdate_jobs(app, timedelta(days=10), "finished_at")
    kept = await invoke(["prune", "--older-than", "2w", *db_args(app), "--json"])
    assert msgspec.json.decode(kept.stdout)["jobs"] == 0

    result = await invoke(["prune", "--older-than", "7d", *db_args(app)])
    assert result.exit_code == 0, result.output
    assert "jobs" in result.stdout
    assert " 2 " in result.stdout
    assert await app.get_job(ids["completed"]) is None
    assert await app.get_job(ids["failed"]) is None
    assert await app.get_job(ids["available"]) is not None
