"""`sweepq doctor`: oversubscribed keys, lapsed leases and unpruned history, as text and JSON."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest

import sweepq
from cli_runner import db_args, invoke, worked
from factories import backdate_jobs, expire_lease
from statements import claim, make_due


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
    assert result.exit_code == 0, result.output
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
    assert text.exit_code == 0, text.output
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
