"""The command line in-process (typer's CliRunner) against the real database.

Commands run their own event loop, so they are invoked from a thread while the test's loop holds
the `app` fixture used to set up and check the data.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path

import anyio
import msgspec
import pytest
import typer
from typer.testing import CliRunner, Result

import sweepq
from factories import backdate_jobs, count_rows, drop_schema, expire_lease, schema_exists
from statements import claim, make_due
from sweepq.cli import cli
from sweepq.cli.common import CommandError, run
from sweepq.cli.database import DatabaseSettings, DsnOption, SchemaOption, database
from sweepq.cli.durations import parse_duration

_runner_lock = anyio.Lock()


async def invoke(args: Sequence[str], *, env: Mapping[str, str | None] | None = None) -> Result:
    """Run `sweepq ARGS` in a thread (the command runs its own event loop)."""
    # No DSN or schema from the environment unless a test says so.
    base: dict[str, str | None] = {
        "SWEEPQ_DSN": None,
        "DATABASE_URL": None,
        "SWEEPQ_SCHEMA": None,
        "COLUMNS": "200",
    }
    runner = CliRunner(env={**base, **(env or {})})
    async with _runner_lock:  # the runner swaps sys.stdout: one at a time
        return await anyio.to_thread.run_sync(lambda: runner.invoke(cli, list(args)))


def db_args(app: sweepq.App) -> list[str]:
    return ["--dsn", app.dsn, "--schema", app.schema]


def one_line_error(result: Result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


# settings -----------------------------------------------------------------------------------

NO_DATABASE = (
    "postgresql://x@127.0.0.1:1/x"  # nothing listens there: a worker stops after its banner
)
BANNER_LINE = re.compile(r"^  (\S+) += (.*)  \((.+)\)$", re.MULTILINE)

_modules = itertools.count()
PLAIN_APP = "import sweepq\napp = sweepq.App()\n"


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory to write APP modules into (APP is imported from the cwd)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _module(folder: Path, body: str) -> str:
    name = f"cli_app_{uuid.uuid4().hex[:8]}_{next(_modules)}"
    (folder / f"{name}.py").write_text(body)
    return name


@pytest.fixture
def worker_app(app_dir: Path) -> str:
    """APP of an App with no DSN and no schema of its own."""
    return _module(app_dir, PLAIN_APP) + ":app"


def invoke_here(args: Sequence[str], env: Mapping[str, str | None] | None = None) -> Result:
    """Run `sweepq ARGS` in this thread, the main one: a worker installs signal handlers."""
    base = {
        "SWEEPQ_DSN": None,
        "DATABASE_URL": None,
        "SWEEPQ_SCHEMA": None,
        "SWEEPQ_APP": None,
        "COLUMNS": "200",
    }
    return CliRunner(env={**base, **(env or {})}).invoke(cli, list(args))


def banner(
    spec: str, *args: str, env: Mapping[str, str] | None = None
) -> dict[str, tuple[str, str]]:
    """The worker's start banner as name -> (value, source); its database cannot be reached."""
    result = invoke_here(["worker", spec, *args], env)
    assert "cannot reach PostgreSQL" in one_line_error(result)
    return {m[1]: (m[2], m[3]) for m in BANNER_LINE.finditer(result.stdout)}


def test_the_command_line_beats_the_environment_which_beats_the_default(worker_app: str) -> None:
    env = {"SWEEPQ_MAX_CONCURRENCY": "7", "SWEEPQ_QUEUES": "a, b", "SWEEPQ_LEASE_SECONDS": "12"}
    given = banner(worker_app, "-q", "c", "--max-concurrency", "3", "--dsn", NO_DATABASE, env=env)
    assert given["concurrency"] == ("3", "--max-concurrency")
    assert given["queues"] == ("c", "--queue")
    assert given["lease_seconds"] == ("12", "SWEEPQ_LEASE_SECONDS")
    assert given["poll_seconds"][1] == "default"

    from_env = banner(worker_app, "--dsn", NO_DATABASE, env=env)
    assert from_env["concurrency"] == ("7", "SWEEPQ_MAX_CONCURRENCY")
    assert from_env["queues"] == ("a, b", "SWEEPQ_QUEUES")

    defaults = banner(worker_app, "--dsn", NO_DATABASE)
    concurrency = sweepq.Worker(sweepq.App("postgresql://x/y")).concurrency
    assert defaults["concurrency"] == (str(concurrency), "default")
    assert defaults["queues"] == ("default", "default")


def test_prune_settings_resolve_from_the_command_line_the_environment_or_the_default(
    worker_app: str,
) -> None:
    env = {"SWEEPQ_PRUNE_EVERY": "never", "SWEEPQ_PRUNE_OLDER_THAN": "2w"}
    db = ["--dsn", NO_DATABASE]
    from_env = banner(worker_app, *db, env=env)
    assert from_env["prune_every"] == ("never", "SWEEPQ_PRUNE_EVERY")
    assert from_env["prune_older_than"] == ("2w", "SWEEPQ_PRUNE_OLDER_THAN")
    given = banner(worker_app, *db, "--prune-every", "30m", "--prune-older-than", "1d", env=env)
    assert given["prune_every"] == ("30m", "--prune-every")
    assert given["prune_older_than"] == ("1d", "--prune-older-than")
    defaults = banner(worker_app, *db)
    assert defaults["prune_every"] == ("1h", "default")
    assert defaults["prune_older_than"] == ("1w", "default")  # 7 days
    sometimes = invoke_here(["worker", worker_app, *db, "--prune-every", "sometimes"])
    assert "--prune-every 'sometimes' is not valid" in one_line_error(sometimes)
    x = invoke_here(["worker", worker_app, *db], {"SWEEPQ_PRUNE_OLDER_THAN": "x"})
    assert "SWEEPQ_PRUNE_OLDER_THAN='x' is not" in one_line_error(x)


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"SWEEPQ_MAX_CONCURRENCY": "lots"}, "SWEEPQ_MAX_CONCURRENCY='lots' is not valid"),
        ({"SWEEPQ_MAX_CONCURRENCY": "0"}, "concurrency must be >= 1, got 0 (from SWEEPQ_MAX"),
        ({"SWEEPQ_POLL_SECONDS": "-1"}, "SWEEPQ_POLL_SECONDS='-1' is not valid: expected a fin"),
        ({"SWEEPQ_QUEUES": "ok, bad queue"}, "(from SWEEPQ_QUEUES)"),
        ({"SWEEPQ_QUEUES": " , "}, "SWEEPQ_QUEUES=',' is not valid: expected comma-separated"),
        ({"SWEEPQ_GRACE_SECONDS": "-1"}, "SWEEPQ_GRACE_SECONDS='-1' is not valid: expected a"),
        ({"SWEEPQ_GRACE_SECONDS": "nan"}, "SWEEPQ_GRACE_SECONDS='nan' is not valid: expected"),
    ],
)
def test_a_bad_setting_in_the_environment_is_refused_naming_its_variable(
    worker_app: str, env: dict[str, str], needle: str
) -> None:
    result = invoke_here(["worker", worker_app, "--dsn", NO_DATABASE], env)
    assert needle in one_line_error(result)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--max-concurrency", "lots"], "--max-concurrency 'lots' is not valid: expected a whole"),
        (["-c", "0"], "concurrency must be >= 1, got 0 (from --max-concurrency)"),
        (["--lease-seconds", "0"], "--lease-seconds '0' is not valid: expected a finite number"),
        (["-q", "ok", "-q", "bad queue"], "queue name 'bad queue' is not valid"),
    ],
)
def test_a_bad_setting_on_the_command_line_is_refused_naming_its_option(
    worker_app: str, args: list[str], needle: str
) -> None:
    result = invoke_here(["worker", worker_app, "--dsn", NO_DATABASE, *args])
    assert needle in one_line_error(result)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--grace-seconds", "nan"], "--grace-seconds 'nan' is not valid: expected a finite number "
         "of seconds, 0 or more, such as 30"),
        (["--grace-seconds", "inf"], "--grace-seconds 'inf' is not valid: expected a finite"),
        (["--lease-seconds", "inf"], "--lease-seconds 'inf' is not valid: expected a finite number "
         "of seconds above 0, such as 30"),
        (["--lease-seconds", "-inf"], "--lease-seconds '-inf' is not valid: expected a finite"),
        (["--lease-seconds", "nan"], "--lease-seconds 'nan' is not valid: expected a finite"),
        (["--poll-seconds", "nan"], "--poll-seconds 'nan' is not valid: expected a finite number "
         "of seconds above 0"),
        (["--poll-seconds", "0"], "--poll-seconds '0' is not valid: expected a finite number"),
        (["--prune-every", "0s"], "--prune-every '0s' is not valid: expected a duration above 0 "
         "such as 30m, 1h or 1d, or 'never' to not prune"),
        (["--prune-every", "0.0m"], "--prune-every '0.0m' is not valid: expected a duration abov"),
    ],
)  # fmt: skip
def test_a_worker_setting_that_is_not_a_finite_positive_number_is_refused_before_it_starts(
    worker_app: str, args: list[str], needle: str
) -> None:
    result = invoke_here(["worker", worker_app, "--dsn", NO_DATABASE, *args])
    assert needle in one_line_error(result)
    assert result.stdout == ""  # no banner: refused before the worker was built


@pytest.mark.parametrize(
    ("args", "env", "named", "value"),
    [
        (["--lease-seconds", "1e-9"], {}, "--lease-seconds", "1e-09"),
        (["--lease-seconds", "86401"], {}, "--lease-seconds", "86401"),
        ([], {"SWEEPQ_LEASE_SECONDS": "0.1"}, "SWEEPQ_LEASE_SECONDS", "0.1"),
        (["--poll-seconds", "1e-9"], {}, "--poll-seconds", "1e-09"),
        (["--grace-seconds", "90000"], {}, "--grace-seconds", "90000"),
        (["--prune-every", "0.5s"], {}, "--prune-every", ""),
    ],
)
def test_a_worker_setting_beyond_the_workers_bounds_is_refused_naming_its_option(
    worker_app: str, args: list[str], env: dict[str, str], named: str, value: str
) -> None:
    # The bounds are the Worker's own; the command line names where the value was given.
    result = invoke_here(["worker", worker_app, "--dsn", NO_DATABASE, *args], env)
    line = one_line_error(result)
    assert line.startswith(f"error: {named} must be "), line
    assert value in line
    assert result.stdout == ""  # refused before the banner, so before anything connects


def test_a_variable_set_to_blanks_counts_as_unset(worker_app: str) -> None:
    blank = {"SWEEPQ_MAX_CONCURRENCY": "  ", "SWEEPQ_QUEUES": " ", "SWEEPQ_SCHEMA": "  "}
    shown = banner(worker_app, "--dsn", NO_DATABASE, env=blank)
    assert shown["concurrency"][1] == "default"
    assert shown["queues"] == ("default", "default")
    assert shown["schema"] == ("sweepq", "APP")


def test_the_banner_says_whether_the_database_came_from_dsn_the_app_or_the_environment(
    app_dir: Path,
) -> None:
    own = "postgresql://own@127.0.0.1:1/own"
    spec = _module(app_dir, f"import sweepq\napp = sweepq.App({own!r})\n") + ":app"
    env = {"SWEEPQ_DSN": NO_DATABASE, "SWEEPQ_SCHEMA": "sweepq"}
    assert banner(spec, env=env)["database"] == (own, "APP")
    assert banner(spec, "--dsn", NO_DATABASE, env=env)["database"] == (NO_DATABASE, "--dsn")
    assert banner(spec, env=env)["schema"] == ("sweepq", "SWEEPQ_SCHEMA")
    plain = _module(app_dir, PLAIN_APP) + ":app"
    assert banner(plain, env={"DATABASE_URL": NO_DATABASE})["database"][1] == "DATABASE_URL"


def test_every_command_takes_the_app_as_app_or_from_sweepq_app(app_dir: Path) -> None:
    spec = _module(app_dir, PLAIN_APP) + ":app"
    by_position = banner(spec, "--dsn", NO_DATABASE)
    assert by_position["app"] == (spec, "APP")
    by_option = invoke_here(["worker", "--app", spec, "--dsn", NO_DATABASE])
    by_variable = invoke_here(["worker", "--dsn", NO_DATABASE], env={"SWEEPQ_APP": spec})
    for result, source in ((by_option, "--app"), (by_variable, "SWEEPQ_APP")):
        assert "cannot reach PostgreSQL" in one_line_error(result)
        shown = {m[1]: (m[2], m[3]) for m in BANNER_LINE.finditer(result.stdout)}
        assert shown["app"] == (spec, source)
    # sweep start reads the same option and variable.
    started = invoke_here(["sweep", "start", "x", "--dsn", NO_DATABASE], env={"SWEEPQ_APP": spec})
    assert "cannot reach PostgreSQL" in one_line_error(started)  # the App was found

    neither = invoke_here(["worker", "--dsn", NO_DATABASE])
    assert "name the App: --app module:attribute" in one_line_error(neither)
    assert "name the App: --app module:attribute" in one_line_error(
        invoke_here(["sweep", "start", "x", "--dsn", NO_DATABASE])
    )
    both = invoke_here(["worker", spec, "--app", "other:app", "--dsn", NO_DATABASE])
    assert f"APP {spec!r} and --app/SWEEPQ_APP 'other:app' differ" in one_line_error(both)


def test_an_app_built_without_a_schema_follows_sweepq_schema(worker_app: str) -> None:
    shown = banner(worker_app, "--dsn", NO_DATABASE, env={"SWEEPQ_SCHEMA": "shop"})
    assert shown["schema"] == ("shop", "SWEEPQ_SCHEMA")


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


# migrate ------------------------------------------------------------------------------------


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


# jobs ---------------------------------------------------------------------------------------


async def _worked(app: sweepq.App) -> dict[str, int]:
    """Three jobs: one completed, one failed, one still available (scheduled)."""

    @app.task(name="ok")
    async def ok(ctx: sweepq.Context, n: int) -> None:
        return None

    @app.task(name="boom", max_attempts=1)
    async def boom(ctx: sweepq.Context, n: int) -> None:
        raise RuntimeError("it broke")

    done = await app.enqueue(ok, {"n": 1})
    failed = await app.enqueue(boom, {"n": 2})
    later = await app.enqueue(ok, {"n": 3}, delay=timedelta(hours=1))
    async with sweepq.Worker(app, concurrency=2) as worker:
        await worker.run_until_idle()
    return {"completed": done.job_id, "failed": failed.job_id, "available": later.job_id}


async def test_jobs_list_shows_jobs_newest_first_and_filters_them(app: sweepq.App) -> None:
    ids = await _worked(app)
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


async def test_jobs_show_prints_a_job_with_its_errors_and_as_json(app: sweepq.App) -> None:
    ids = await _worked(app)
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
    ids = await _worked(app)
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


async def test_a_schema_that_was_never_migrated_gets_a_hint_to_migrate(app: sweepq.App) -> None:
    result = await invoke(["jobs", "list", "--dsn", app.dsn, "--schema", "never_migrated_here"])
    assert "sweepq migrate" in one_line_error(result)


async def test_a_dsn_password_is_never_printed() -> None:
    dsn = "postgresql://someone:hunter2secret@127.0.0.1:1/nowhere"
    result = await invoke(["jobs", "list", "--dsn", dsn])
    line = one_line_error(result)
    assert "hunter2secret" not in result.output
    assert "cannot reach PostgreSQL" in line


# prune --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("15m", timedelta(minutes=15)),
        ("12h", timedelta(hours=12)),
        ("7d", timedelta(days=7)),
        ("2w", timedelta(weeks=2)),
        ("1.5h", timedelta(minutes=90)),
        ("0s", timedelta(0)),
    ],
)
def test_durations_parse_with_one_unit(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["7", "7x", "-1d", "d", "1d2h", "", "seven days"])
async def test_prune_refuses_a_bad_duration_with_the_accepted_forms(text: str) -> None:
    result = await invoke(["prune", "--older-than", text, "--dsn", "postgresql://x@127.0.0.1:1/x"])
    line = one_line_error(result)
    assert "is not a duration" in line
    assert "30s, 15m, 12h, 7d, 2w" in line


async def test_prune_removes_old_terminal_jobs_and_prints_counts_per_table(
    app: sweepq.App,
) -> None:
    ids = await _worked(app)
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


# doctor -------------------------------------------------------------------------------------


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
    ids = await _worked(app)
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


# --app --------------------------------------------------------------------------------------


async def test_a_wrong_app_gets_an_error_naming_what_was_not_found(app_dir: Path) -> None:
    db = ["--dsn", "postgresql://x@127.0.0.1:1/x"]
    cases = {
        "no_such_module_here:app": "cannot import module 'no_such_module_here'",
        "justamodule": "APP must be module:attribute",
    }
    fine = _module(app_dir, "import sweepq\nmain_app = sweepq.App()\nnot_app = 3\n")
    cases[f"{fine}:app"] = f"module '{fine}' has no attribute 'app' (Apps it defines: main_app)"
    cases[f"{fine}:not_app"] = f"APP '{fine}:not_app' is a int, not a sweepq.App"
    broken = _module(app_dir, "import no_such_dependency_xyz\n")
    cases[f"{broken}:app"] = "failed: No module named 'no_such_dependency_xyz'"
    raising = _module(app_dir, "raise ValueError('bad config')\n")
    cases[f"{raising}:app"] = "raised ValueError: bad config"
    for spec, needle in cases.items():
        result = await invoke(["worker", spec, *db])
        assert needle in one_line_error(result), spec


async def test_an_app_with_another_schema_than_asked_is_refused(
    app_dir: Path, app: sweepq.App
) -> None:
    name = _module(app_dir, "import sweepq\napp = sweepq.App(schema='elsewhere')\n")
    result = await invoke(["worker", f"{name}:app", *db_args(app)])
    line = one_line_error(result)
    assert f"--schema says schema '{app.schema}' but the App uses schema 'elsewhere'" in line


def test_an_error_inside_a_task_group_ends_the_command_with_one_red_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def fails() -> None:
        raise CommandError("the thing is missing")

    async def command() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(fails)
            await anyio.sleep(5)

    with pytest.raises(typer.Exit) as ended:
        run(command)
    assert ended.value.exit_code == 2
    assert capsys.readouterr().err.strip() == "error: the thing is missing"


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
    spec = _module(app_dir, GREET_APP.format(schema=app.schema)) + ":app"
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
    spec = _module(app_dir, GREET_APP.format(schema=app.schema)) + ":app"
    result = await invoke(["jobs", "enqueue", "greet", "--app", spec, *db_args(app), *args])
    line = one_line_error(result)
    assert needle in line
    assert len(line) < 400  # the value is shortened, not printed whole
    assert await count_rows(app, "jobs") == 0
