"""`sweepq doctor`: oversubscribed keys, lapsed leases and unpruned history, as text and JSON."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest

import sweepq
from cli_runner import db_args, invoke, worked
from factories import backdate_jobs, expire_lease
from statements import claim, make_due
from sweepq.core.ident import ident


async def test_doctor_reports_the_oversubscription_ratio_of_a_key(app: sweepq.App) -> None:
    @app.task(name="charge")
    async def charge(ctx: sweepq.Context, n: int) -> None:
        return None

    await app.set_concurrency_limit("stripe", 2)
    await app.set_concurrency_limit("email", 3)
    await app.enqueue_many(
        [sweepq.JobSpec(charge, {"n": i}, concurrency_key="stripe") for i in range(40)]
        + [sweepq.JobSpec(charge, {"n": i}, concurrency_key="email") for i in range(2)]
    )
    result = await invoke(["doctor", *db_args(app), "--json"])
    report = msgspec.json.decode(result.stdout)
    keys = {k["key"]: k for k in report["keys"]}
    assert keys["stripe"]["ratio"] == pytest.approx(20.0)
    assert keys["stripe"]["due"] == 40
    assert keys["email"]["ratio"] == pytest.approx(2 / 3)
    assert report["overall_ratio"] == pytest.approx(42 / 5)
    assert {t["name"] for t in report["tables"]} >= {"jobs", "concurrency_keys"}
    assert report["lapsed"]["jobs"] == 0
    assert "jit" in report["settings"]
    assert "max_connections" in report["settings"]
    assert any(
        f["topic"] == "concurrency key 'stripe'" and "20.0x oversubscribed" in f["message"]
        for f in report["findings"]
    )

    text = await invoke(["doctor", *db_args(app)])
    # 1 only where the server itself has a critical finding (autovacuum off, say).
    server_critical = any(f["severity"] == "critical" for f in report["findings"])
    assert text.exit_code == (1 if server_critical else 0), text.output
    assert report["findings"][0] == {
        "severity": "ok",
        "topic": "schema",
        "message": "migrated: every migration this sweepq knows is applied",
    }
    assert "20.00x" in text.stdout
    assert "8.40x" in text.stdout


async def test_doctor_reports_lapsed_leases_and_unpruned_history(app: sweepq.App) -> None:
    ids = await worked(app)
    await backdate_jobs(app, timedelta(days=30), "finished_at")
    # A job claimed by a worker that vanished: running, with a lease that lapsed a minute ago.
    await make_due(app, ids["available"])
    (gone,) = await claim(app, worker="gone")
    assert gone.id == ids["available"]
    await expire_lease(app, gone.id, ago=timedelta(minutes=1))
    report = msgspec.json.decode((await invoke(["doctor", *db_args(app), "--json"])).stdout)
    assert report["lapsed"]["jobs"] == 1
    assert report["lapsed"]["sample_ids"] == [ids["available"]]
    findings = {(f["topic"], f["severity"]) for f in report["findings"]}
    assert ("leases", "warning") in findings
    assert ("retention", "warning") in findings


async def test_doctor_exits_with_1_on_a_critical_finding(app: sweepq.App) -> None:
    @app.task(name="charge")
    async def charge(ctx: sweepq.Context) -> None:
        return None

    await app.set_concurrency_limit("stripe", 2)
    await app.enqueue(charge, concurrency_key="stripe")
    # The key's running counter says 2 while no job of it runs: admission would be wrong.
    await app.pool.execute(
        f"UPDATE {ident(app.schema)}.concurrency_keys SET running = 2 WHERE key = 'stripe'"
    )
    for args in ([], ["--json"]):
        result = await invoke(["doctor", *db_args(app), *args])
        assert result.exit_code == 1, result.output
    report = msgspec.json.decode(result.stdout)
    assert ("critical", "concurrency key 'stripe'") in {
        (f["severity"], f["topic"]) for f in report["findings"]
    }


async def test_doctor_reports_a_schema_that_is_not_migrated_as_its_first_finding(
    dsn: str,
) -> None:
    args = ["doctor", "--dsn", dsn, "--schema", "never_migrated_here"]
    result = await invoke([*args, "--json"])
    assert result.exit_code == 1, result.output
    report = msgspec.json.decode(result.stdout)
    first = report["findings"][0]
    assert (first["severity"], first["topic"]) == ("critical", "schema")
    assert "schema 'never_migrated_here'" in first["message"]
    assert "is not migrated" in first["message"]
    assert "run `sweepq migrate --schema never_migrated_here`" in first["message"]
    assert report["migrated"] is False
    assert "core/0001_initial" in report["pending_migrations"]
    assert {f["topic"] for f in report["findings"]} >= {"schema", "connections"}
    assert (report["keys"], report["states"]) == ([], [])

    text = await invoke(args)
    assert text.exit_code == 1, text.output
    assert text.stdout.splitlines()[4].split()[:4] == ["│", "critical", "│", "schema"]
    assert "does not exist" not in text.output
