"""`sweepq sweep ...`: the views rendered to text, and the commands against real runs."""

from __future__ import annotations

import signal
import sys
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from rich.console import Console, RenderableType
from typer.testing import CliRunner, Result

import sweepq
from factories import count_rows, create_items
from sweep_worker_proc import items_sweep, run_until_ended
from sweepq.cli import cli, sweep_render
from sweepq.cli.sweep import parse_params
from sweepq.sweeps.runs import SweepRun, SweepState
from waiting import wait_until

_runner_lock = anyio.Lock()


async def invoke(args: Sequence[str], *, env: Mapping[str, str | None] | None = None) -> Result:
    base: dict[str, str | None] = {"SWEEPQ_DSN": None, "DATABASE_URL": None, "COLUMNS": "120"}
    runner = CliRunner(env={**base, **(env or {})})
    async with _runner_lock:
        return await anyio.to_thread.run_sync(lambda: runner.invoke(cli, list(args)))


def text_of(renderable: RenderableType, width: int = 120) -> str:
    console = Console(record=True, width=width)
    console.print(renderable)
    return console.export_text()


def lines_of(renderable: RenderableType, width: int) -> list[str]:
    """The renderable at `width` columns, its lines with their trailing blanks dropped; none is
    wider than `width`."""
    lines = [line.rstrip() for line in text_of(renderable, width).splitlines()]
    assert max(map(len, lines)) <= width, "\n".join(lines)
    return lines


def a_run(**changes: Any) -> SweepRun:
    fields: dict[str, Any] = {
        "id": 7,
        "sweep": "backfill-avatars",
        "params": {"tenant": 3},
        "state": SweepState.RUNNING,
        "draining": False,
        "walked": False,
        "cursor": [4500],
        "links": 9,
        "max_links": 1000,
        "enqueued": 5000,
        "completed": 4497,
        "failed": 3,
        "cancelled": 0,
        "outstanding": 500,
        "waiting": 0,
        "estimated_total": 10_000,
        "total": 10_000,
        "total_is_estimate": True,
        "percent": 45.0,
        "started_at": datetime(2026, 11, 29, 9, 0, tzinfo=UTC),
        "finished_at": None,
        "updated_at": datetime(2026, 11, 29, 9, 0, 4, tzinfo=UTC),
        "elapsed_seconds": 3.6,
        "failure": None,
        "ends": 0,
        "rate": 1250.0,
        "eta_seconds": 4.0,
    }
    fields.update(changes)
    return SweepRun(**fields)


# views --------------------------------------------------------------------------------------


def test_the_live_view_shows_progress_rate_eta_failures_link_and_cursor() -> None:
    text = text_of(sweep_render.sweep_progress([a_run()]))
    assert "#7 backfill-avatars" in text
    assert "4,497/~10,000  45%" in text
    assert "1,250 items/s" in text
    assert "eta 4s" in text
    assert "failed 3" in text
    assert "link 10" in text  # nine committed, the tenth at work
    assert "cursor [4500]" in text
    assert 'params {"tenant":3}' in text


def test_the_live_view_shows_an_exact_total_once_draining_and_the_failure_of_a_run() -> None:
    draining = a_run(
        draining=True, total=5000, total_is_estimate=False, percent=90.0, eta_seconds=0.4
    )
    failed = a_run(
        id=8,
        state=SweepState.FAILED,
        failed=101,
        completed=2000,
        total=2101,
        total_is_estimate=False,
        percent=95.1,
        failure="101 items failed, over max_failures=100",
        eta_seconds=0.0,
        ends=1,
    )
    unknown = a_run(
        id=9, total=None, estimated_total=None, percent=None, eta_seconds=None, cursor=None
    )
    text = text_of(sweep_render.sweep_progress([draining, failed, unknown]))
    assert "4,497/5,000  90%" in text
    assert "2,000/2,101  95%  failed" in text
    assert "101 items failed, over max_failures=100" in text
    assert "4,497/5,000+" in text  # no estimate: done of enqueued so far
    assert "eta ?" in text
    assert "cursor start" in text
    assert text_of(sweep_render.sweep_progress([])).strip() == "no active sweep runs"


def test_the_runs_table_and_the_detail_show_the_counters() -> None:
    table = text_of(sweep_render.sweep_runs_table([a_run(), a_run(id=6, state=SweepState.PAUSED)]))
    assert "backfill-avatars" in table
    assert "4,497/~10,000  45%" in table
    assert "paused" in table
    retrying = text_of(sweep_render.sweep_runs_table([a_run(waiting=7, draining=True)]))
    assert "7 retrying" in retrying
    failed = a_run(state=SweepState.FAILED, cancelled=73)
    cancelled = text_of(sweep_render.sweep_runs_table([failed]))
    assert "73 cancelled" in cancelled
    assert "cancelled 73" in text_of(sweep_render.sweep_progress([a_run(cancelled=73)]))
    assert "draining" in retrying
    detail = text_of(sweep_render.sweep_detail(a_run()))
    for needle in ("enqueued     5,000", "outstanding  500", "9 of at most 1,000", "[4500]"):
        assert needle in detail


def test_at_80_columns_the_views_of_runs_keep_ids_names_and_states_whole() -> None:
    failed = a_run(id=12, state=SweepState.FAILED, cancelled=73)
    table = lines_of(sweep_render.sweep_runs_table([a_run(), failed]), 80)
    assert table[0].split() == ["run", "sweep", "state", "done", "failed", "left", "eta"]
    rows = [line.split() for line in table[2:] if line[:5].strip().isdigit()]
    assert [row[:5] for row in rows] == [
        ["7", "backfill-avatars", "running", "4,497/~10,000", "45%"],
        ["12", "backfill-avatars", "failed", "4,497/~10,000", "45%"],
    ]
    # A longer name: fewer columns, and the figures wrap before any name or state is cut.
    long_name = a_run(
        id=1234, sweep="backfill-customer-avatars-eu-west", worker_wait_seconds=60.0,
        queue_served=False,
    )  # fmt: skip
    for width in (80, 60):
        text = "\n".join(lines_of(sweep_render.sweep_runs_table([a_run(), long_name]), width))
        assert "1234  backfill-customer-avatars-eu-west  running" in text
        assert "no worker" in text
        assert "…" not in text
    at_80 = lines_of(sweep_render.sweep_runs_table([a_run(), long_name]), 80)
    assert at_80[0].split() == ["run", "sweep", "state", "done", "failed"]

    progress = "\n".join(lines_of(sweep_render.sweep_progress([a_run(), long_name]), 80))
    assert "#1234 backfill-customer-avatars-eu-west  running" in progress  # the bar goes below
    assert "4,497/~10,000  45%  running" in progress  # a shorter name keeps it on its line
    assert "no worker is serving queue 'default'" in progress
    detail = "\n".join(lines_of(sweep_render.sweep_detail(long_name), 80))
    assert "sweep        backfill-customer-avatars-eu-west" in detail


def test_params_are_json_when_they_parse_and_text_otherwise() -> None:
    given = ["n=7", "flag=true", "name=alice", "ids=[1,2]", "empty=", "note=[not json", "x={"]
    assert parse_params(given) == {
        "n": 7,
        "flag": True,
        "name": "alice",
        "ids": [1, 2],
        "empty": "",
        "note": "[not json",
        "x": "{",
    }


# commands -----------------------------------------------------------------------------------

APP_MODULE = """
import sweepq

app = sweepq.App(schema={schema!r})


@app.register_sweep
class Touch(sweepq.TableSweep):
    name = "touch"
    table = {table!r}
    key = ("id",)
    page_size = 50
    window = 100

    async def handle(self, ctx, item):
        return None
"""


class Touch(sweepq.TableSweep):
    name = "touch"
    key = ("id",)
    page_size = 50
    window = 100

    async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
        return None


@pytest.fixture
async def sweep_app(
    app: sweepq.App, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[sweepq.App, str]:
    """The test app with a `touch` sweep over 200 rows, and the same app as an APP module."""
    table = f"{app.schema}.items"
    await create_items(app, 200)
    app.register_sweep(type("Touch", (Touch,), {"table": table}))
    module = f"cli_sweep_app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(APP_MODULE.format(schema=app.schema, table=table))
    monkeypatch.chdir(tmp_path)
    return app, f"{module}:app"


def db(app: sweepq.App) -> list[str]:
    return ["--dsn", app.dsn, "--schema", app.schema]


async def test_sweep_start_pause_resume_cancel_steer_one_run(
    sweep_app: tuple[sweepq.App, str],
) -> None:
    app, spec = sweep_app
    started = await invoke(["sweep", "start", "touch", "--app", spec, "-p", "n=1", *db(app)])
    assert started.exit_code == 0, started.output
    run_id = (await app.list_sweep_runs())[0].id
    assert f"started run {run_id} of sweep 'touch'" in started.stdout

    again = await invoke(
        ["sweep", "start", "touch", "--app", spec, "-p", "n=1", *db(app), "--json"]
    )
    assert msgspec.json.decode(again.stdout) == {"run_id": run_id, "outcome": "already_running"}

    listed = msgspec.json.decode((await invoke(["sweep", "status", *db(app), "--json"])).stdout)
    assert [(r["id"], r["state"], r["params"]) for r in listed] == [(run_id, "running", {"n": 1})]

    # Steering needs the DSN alone: the run records where its links go.
    for verb, state in (
        ("pause", "paused"),
        ("resume", "running"),
        ("pause", "paused"),
        ("cancel", "cancelled"),
    ):
        result = await invoke(["sweep", verb, str(run_id), *db(app)])
        assert result.exit_code == 0, result.output
        assert f"run {run_id} of sweep 'touch' is {state}" in result.stdout
        found = await app.sweep_status(run_id)
        assert found is not None
        assert found.state == state

    refused = await invoke(["sweep", "pause", str(run_id), *db(app)])
    assert refused.exit_code == 2
    assert f"run {run_id} is cancelled; it cannot be paused" in refused.stderr

    detail = await invoke(["sweep", "status", str(run_id), *db(app)])
    assert "cancelled" in detail.stdout


async def test_sweep_status_watch_follows_a_run_until_it_completes(
    sweep_app: tuple[sweepq.App, str],
) -> None:
    app, _ = sweep_app
    started = await app.start_sweep("touch")
    async with (
        sweepq.Worker(app, concurrency=8, poll_seconds=0.1) as worker,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run)
        with anyio.fail_after(60):
            watched = await invoke(["sweep", "status", str(started.run_id), "--watch", *db(app)])
        worker.stop()
    assert watched.exit_code == 0, watched.output
    assert "200/200  100%  completed" in watched.stdout
    assert "failed 0" in watched.stdout


async def test_sweep_status_watch_exits_with_1_when_a_run_failed_or_was_cancelled(
    app: sweepq.App,
) -> None:
    await create_items(app, 40, failing=range(1, 11))
    app.register_sweep(
        items_sweep(app.schema, page_size=20, window=20, max_failures=3, max_attempts=1)
    )
    failed = await run_until_ended(app, (await app.start_sweep("items")).run_id)
    assert failed.state is SweepState.FAILED
    watched = await invoke(["sweep", "status", str(failed.id), "--watch", *db(app)])
    assert watched.exit_code == 1, watched.output
    assert "failed" in watched.stdout

    cancelled = await app.start_sweep("items", {"again": True})
    await app.cancel_sweep(cancelled.run_id)
    watched = await invoke(["sweep", "status", str(cancelled.run_id), "--watch", *db(app)])
    assert watched.exit_code == 1, watched.output
    # Without RUN: the runs active when it starts, none here.
    assert (await invoke(["sweep", "status", "--watch", *db(app)])).exit_code == 0


async def test_sweep_status_watch_left_with_ctrl_c_exits_with_130(
    sweep_app: tuple[sweepq.App, str],
) -> None:
    app, _ = sweep_app
    started = await app.start_sweep("touch")  # no worker: it stays running
    watch = ["sweep", "status", str(started.run_id), "--watch", *db(app)]
    proc = await anyio.open_process([sys.executable, "-m", "sweepq.cli", *watch])

    readers: set[int] = set()

    async def watching() -> bool:
        """Whether a connection that read the run has gone idle: a read has ended, so a view
        is drawn (off a terminal, it is printed when the watch ends)."""
        assert proc.returncode is None
        rows = await app.pool.fetch(
            "SELECT pid, state, strpos(query, $1) > 0 AS reads FROM pg_stat_activity"
            " WHERE application_name = 'sweepq' AND pid <> pg_backend_pid()",
            app.schema,
        )
        readers.update(r["pid"] for r in rows if r["reads"])
        return any(r["pid"] in readers and r["state"] == "idle" for r in rows)

    async with proc:
        try:
            await wait_until(watching, timeout=30, what="the watch reads the run")
            proc.send_signal(signal.SIGINT)
            with anyio.fail_after(30):
                code = await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
        assert proc.stdout is not None
        out = b"".join([chunk async for chunk in proc.stdout]).decode()
    assert code == 130, out
    assert "running" in out  # the last view it drew


async def test_sweep_retry_failed_says_what_it_runs_again_in_its_help() -> None:
    shown = await invoke(["sweep", "retry-failed", "--help"])
    assert shown.exit_code == 0, shown.output
    said = " ".join(shown.stdout.replace("│", " ").split())
    assert "Run the failed and cancelled items of run RUN again (after a fix)" in said
    assert "Run run" not in said


async def test_sweep_commands_refuse_what_cannot_be_done_with_one_line(
    sweep_app: tuple[sweepq.App, str],
) -> None:
    app, spec = sweep_app
    cases = [
        (["sweep", "status", "987654", *db(app)], "no sweep run 987654"),
        (["sweep", "status", "--watch", "--json", *db(app)], "--watch and --json"),
        (["sweep", "start", "touch", "--app", spec, "-p", "oops", *db(app)], "is not key=value"),
        (["sweep", "start", "nope", "--app", spec, *db(app)], "no sweep named 'nope'"),
    ]
    for args, needle in cases:
        result = await invoke(args)
        assert result.exit_code == 2, (args, result.output)
        assert needle in result.stderr, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1


async def test_sweep_start_refuses_params_that_cannot_be_stored_and_starts_no_run(
    sweep_app: tuple[sweepq.App, str],
) -> None:
    app, spec = sweep_app
    deep = "[" * 5000 + "]" * 5000  # far deeper than a decoder's recursion reaches
    cases = [
        (f"ids={deep}", "--param ids: JSON nested more than 64 levels deep (the most sweepq "
         "stores); flatten the value, or store it elsewhere and pass a reference"),
        ("ids=" + "[" * 65 + "]" * 65, "--param ids: JSON nested more than 64 levels deep"),
        ("name=al\ud800ice", "--param name holds NUL or characters that are not valid UTF-8"),
        ('name="al\ud800ice"', "--param name holds NUL or characters that are not valid UTF-8"),
        ("na\ud800me=1", "a --param key cannot hold NUL ('\\x00') or lone surrogate"),
    ]  # fmt: skip
    for param, needle in cases:
        result = await invoke(["sweep", "start", "touch", "--app", spec, "-p", param, *db(app)])
        assert result.exit_code == 2, (param[:20], result.output)
        assert "Traceback" not in result.output
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("error: ")
        assert needle in line, line
    assert await app.list_sweep_runs() == []
    assert await count_rows(app, "jobs") == 0


async def test_dsn_on_the_command_line_outranks_the_apps_own_dsn(
    sweep_app: tuple[sweepq.App, str], tmp_path: Path
) -> None:
    app, spec = sweep_app
    module = spec.split(":")[0]
    source = (tmp_path / f"{module}.py").read_text()
    # The module's App now names a database that does not exist; --dsn must win over it.
    (tmp_path / f"{module}_own.py").write_text(
        source.replace(
            "sweepq.App(schema=", "sweepq.App('postgresql://nobody@127.0.0.1:1/nowhere', schema="
        )
    )
    started = await invoke(["sweep", "start", "touch", "--app", f"{module}_own:app", *db(app)])
    assert started.exit_code == 0, started.output
    assert [r.sweep for r in await app.list_sweep_runs()] == ["touch"]
