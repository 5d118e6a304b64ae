"""`sweepq jobs list|show|retry|cancel|enqueue` against the real database."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest

import sweepq
from cli_runner import app_module, db_args, invoke, one_line_error, worked
from factories import count_rows


async def test_jobs_list_shows_jobs_newest_first_and_filters_them(app: sweepq.App) -> None:
    ids = await worked(app)
    listed = await invoke(["jobs", "list", *db_args(app)])
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout
    for state, job_id in ids.items():
        assert f"{job_id}" in lines
        assert state in lines
    assert lines.index(str(ids["available"])) < lines.index(str(ids["completed"]))

    failed = await invoke(["jobs", "list", *db_args(app), "--state", "failed", "--json"])
    rows = msgspec.json.decode(failed.stdout)
    assert [(r["id"], r["state"], r["failure_reason"]) for r in rows] == [
        (ids["failed"], "failed", "max_attempts_exceeded")
    ]
    by_task = msgspec.json.decode(
        (await invoke(["jobs", "list", *db_args(app), "--task", "ok", "--json"])).stdout
    )
    assert {r["id"] for r in by_task} == {ids["completed"], ids["available"]}


async def test_jobs_list_pages_by_keyset_with_before(app: sweepq.App) -> None:
    @app.task(name="ok")
    async def ok(ctx: sweepq.Context, n: int) -> None:
        return None

    made = await app.enqueue_many([sweepq.JobSpec(ok, {"n": i}) for i in range(5)])
    ids = sorted((r.job_id for r in made), reverse=True)
    first = await invoke(["jobs", "list", *db_args(app), "--limit", "2"])
    assert f"next page: --before {ids[1]}" in first.stdout
    seen: list[int] = []
    before: list[str] = []
    for _ in range(4):
        page = msgspec.json.decode(
            (
                await invoke(["jobs", "list", *db_args(app), "--limit", "2", "--json", *before])
            ).stdout
        )
        if not page:
            break
        seen.extend(r["id"] for r in page)
        before = ["--before", str(page[-1]["id"])]
    assert seen == ids


async def test_jobs_list_at_80_columns_keeps_ids_task_names_and_states_whole(
    app: sweepq.App,
) -> None:
    task = "sweepq.sweep.backfill-customer-avatars.leaf"  # 43 characters, as a sweep's leaves

    @app.task(name=task, max_attempts=1)
    async def leaf(ctx: sweepq.Context, n: int) -> None:
        raise RuntimeError("the partner API refused the request: 403 Forbidden, check the token")

    failed = await app.enqueue(leaf, {"n": 1}, concurrency_key="stripe-account-12345")
    async with sweepq.Worker(app) as worker:
        await worker.run_until_idle()
    waiting = await app.enqueue(leaf, {"n": 2})

    listed = await invoke(["jobs", "list", *db_args(app)], env={"COLUMNS": "80"})
    assert listed.exit_code == 0, listed.output
    lines = [line.rstrip() for line in listed.stdout.splitlines()]
    assert max(map(len, lines)) <= 80, listed.stdout
    rows = {line.split()[0]: line.split() for line in lines if line[:4].strip().isdigit()}
    assert rows[str(waiting.job_id)][1:] == ["available", "0/1", rows[str(waiting.job_id)][3], task]
    assert rows[str(failed.job_id)][1] == "failed"
    assert rows[str(failed.job_id)][-1] == task
    # Its note goes on the lines under its task name, wrapped between words.
    row = next(i for i, line in enumerate(lines) if line.split()[:1] == [str(failed.job_id)])
    after = lines[row:]
    note = " ".join(" ".join(after[1:]).split())
    assert note.startswith(
        "max_attempts_exceeded RuntimeError: the partner API refused the request: 403 Forbidden, "
        "check the token key=stripe-account-12345"
    ), note


async def test_jobs_show_prints_a_job_with_its_errors_and_as_json(app: sweepq.App) -> None:
    ids = await worked(app)
    shown = await invoke(["jobs", "show", str(ids["failed"]), *db_args(app)])
    assert shown.exit_code == 0, shown.output
    assert "max_attempts_exceeded" in shown.stdout
    assert "RuntimeError: it broke" in shown.stdout
    assert '{"n":2}' in shown.stdout

    raw = await invoke(["jobs", "show", str(ids["failed"]), *db_args(app), "--json"])
    job = msgspec.json.decode(raw.stdout, type=sweepq.Job)
    assert (job.id, job.state, job.args) == (ids["failed"], sweepq.JobState.FAILED, {"n": 2})

    missing = await invoke(["jobs", "show", "999999999", *db_args(app)])
    assert "no job 999999999" in one_line_error(missing)


async def test_jobs_retry_and_cancel_change_the_job_and_refuse_what_cannot_be_done(
    app: sweepq.App,
) -> None:
    ids = await worked(app)
    retried = await invoke(["jobs", "retry", str(ids["failed"]), *db_args(app)])
    assert retried.exit_code == 0, retried.output
    assert "available" in retried.stdout
    job = await app.get_job(ids["failed"])
    assert job is not None
    assert job.state is sweepq.JobState.AVAILABLE

    cancelled = await invoke(["jobs", "cancel", str(ids["available"]), *db_args(app), "--json"])
    assert msgspec.json.decode(cancelled.stdout)["state"] == "cancelled"
    job = await app.get_job(ids["available"])
    assert job is not None
    assert job.state is sweepq.JobState.CANCELLED

    refused = await invoke(["jobs", "cancel", str(ids["completed"]), *db_args(app)])
    assert "only available or running jobs can be cancelled" in one_line_error(refused)
    job = await app.get_job(ids["completed"])
    assert job is not None
    assert job.state is sweepq.JobState.COMPLETED


GREET_APP = """
import sweepq

app = sweepq.App(schema={schema!r})


@app.task(name="greet")
async def greet(ctx: sweepq.Context, name: str, times: int = 1) -> None:
    return None
"""


async def test_jobs_enqueue_checks_args_reads_options_and_says_what_happened(
    app: sweepq.App, app_dir: Path
) -> None:
    spec = app_module(app_dir, GREET_APP.format(schema=app.schema)) + ":app"
    base = ["jobs", "enqueue", "greet", "--app", spec, *db_args(app)]
    options = [
        "-o",
        "queue=mail",
        "-o",
        "delay=30s",
        "-o",
        "idempotency_key=k1",
        "-o",
        "priority=3",
    ]
    first = await invoke([*base, "--args", '{"name": "ada", "times": 2}', *options])
    assert first.exit_code == 0, first.output
    found = re.search(r"enqueued job (\d+) of task 'greet'", first.stdout)
    assert found, first.stdout
    job = await app.get_job(int(found[1]))
    assert job is not None
    assert (job.args, job.queue, job.priority) == ({"name": "ada", "times": 2}, "mail", 3)
    assert timedelta(seconds=25) < job.run_at - job.created_at <= timedelta(seconds=31)

    again = await invoke([*base, "--args", '{"name": "ada"}', "-o", "idempotency_key=k1", "--json"])
    assert msgspec.json.decode(again.stdout) == {"job_id": job.id, "outcome": "existing_active"}

    for args, says in (
        (["--args", '{"nom": "ada"}'], "greet"),
        (["--args", "[1]"], "--args must be a JSON object"),
        (["--args", "{nope"], "--args is not valid JSON"),
        (["--args", "{}", "-o", "colour=red"], "unknown job option(s) 'colour'"),
        (["--args", '{"name": "x"}', "-o", "delay=soon"], "delay 'soon' is not a duration"),
        (["--args", '{"name": "x"}', "-o", "priority=high"], "priority='high' is not valid"),
    ):
        assert says in one_line_error(await invoke([*base, *args])), args
    assert await count_rows(app, "jobs") == 1


DEEP = "[" * 5000 + "]" * 5000  # far deeper than a decoder's recursion reaches


ONE_TOO_DEEP = "[" * 64 + "]" * 64  # 65 levels inside {"name": ...}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--args", '{"name": "\ud800"}'], "--args holds NUL or characters that are not valid "
         "UTF-8 (a lone surrogate, as undecodable bytes of a command line become); pass UTF-8"),
        (["--args", f'{{"name": {DEEP}}}'], "--args: JSON nested more than 64 levels deep (the "
         "most sweepq stores); flatten the value, or store it elsewhere and pass a reference"),
        (["--args", f'{{"name": {ONE_TOO_DEEP}}}'], "--args: JSON nested more than 64 levels"),
        (["--args", DEEP], "--args: JSON nested more than 64 levels deep"),
        (["--args", '{"name": "x"}', "-o", f"idempotency_key={DEEP}"], "idempotency_key must be "
         "a non-empty string of at most 512 characters"),
        (["--args", '{"name": "x"}', "-o", "idempotency_key=k\ud800"], "idempotency_key cannot "
         "hold NUL ('\\x00') or lone surrogate characters"),
        (["--args", '{"name": "x"}', "-o", "group=g\ud800"], "group cannot hold NUL"),
    ],
)  # fmt: skip
async def test_jobs_enqueue_refuses_text_that_cannot_be_stored_and_writes_nothing(
    app: sweepq.App, app_dir: Path, args: list[str], needle: str
) -> None:
    spec = app_module(app_dir, GREET_APP.format(schema=app.schema)) + ":app"
    result = await invoke(["jobs", "enqueue", "greet", "--app", spec, *db_args(app), *args])
    line = one_line_error(result)
    assert needle in line
    assert len(line) < 400  # the value is shortened, not printed whole
    assert await count_rows(app, "jobs") == 0
