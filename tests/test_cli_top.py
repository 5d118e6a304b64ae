"""`sweepq top`: the figures of a frame, the rate between two frames, estimates past the read
limit, the screen at 100 columns, the command against a live schema, and the cost of a frame on
a table of finished jobs (read from plans and from the transaction's own statistics, not from
timings)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import asyncpg
import msgspec
import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

import sweepq
from factories import count_jobs, create_items
from sweepq.cli import cli
from sweepq.cli.top import watch
from sweepq.cli.top_frame import Frame, QueueLine, queue_lines, read_frame
from sweepq.cli.top_render import top_view
from sweepq.core.admin import KeyLoad, QueueFinished, QueueLive, WorkerConnections, key_load
from sweepq.core.ident import ident
from sweepq.sweeps.app import App
from sweepq.testing import drain
from waiting import wait_until

AT = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
NO_DATABASE = "postgresql://x@127.0.0.1:1/x"  # nothing listens there

_runner_lock = anyio.Lock()


async def invoke(args: Sequence[str], *, env: Mapping[str, str | None] | None = None) -> Result:
    """Run `sweepq ARGS` in a thread (the command runs its own event loop), 100 columns wide."""
    base: dict[str, str | None] = {
        "SWEEPQ_DSN": None,
        "DATABASE_URL": None,
        "SWEEPQ_SCHEMA": None,
        "COLUMNS": "100",
    }
    runner = CliRunner(env={**base, **(env or {})})
    async with _runner_lock:
        return await anyio.to_thread.run_sync(lambda: runner.invoke(cli, list(args)))


def db(app: sweepq.App) -> list[str]:
    return ["--dsn", app.dsn, "--schema", app.schema]


def cells(text: str, first: str) -> list[str]:
    """The cells of the table row that starts with `first` (cells are two spaces apart)."""
    for line in text.splitlines():
        found = re.split(r"\s{2,}", line.strip())
        if found[0] == first:
            return found
    raise AssertionError(f"no row {first!r} in:\n{text}")


def text_of(frame: Frame, *, trouble: str | None = None, width: int = 100) -> str:
    console = Console(record=True, width=width)
    console.print(top_view(frame, trouble=trouble))
    return console.export_text()


def a_frame(**changes: Any) -> Frame:
    fields: dict[str, Any] = {
        "schema": "sweepq",
        "at": AT,
        "since": None,
        "jobs_estimate": 1_000_000,
        "queues": [],
        "runs": [],
        "more_runs": False,
        "keys": [],
        "workers": [],
        "leader": None,
        "finished_read": 0,
        "finished_read_limit": 10_000,
        "finished_read_since": None,
    }
    fields.update(changes)
    return Frame(**fields)


def by_queue(lines: Sequence[QueueLine]) -> dict[str, QueueLine]:
    return {q.queue: q for q in lines}


# figures ------------------------------------------------------------------------------------


def test_the_rate_is_the_jobs_finished_between_two_frames_over_the_time_between_them() -> None:
    live = [QueueLive("mail", 4, 2, 1, 12.5)]
    finished = [QueueFinished("default", 2, 30, 10, 40, AT - timedelta(minutes=50), None)]

    first = by_queue(queue_lines(live, finished, at=AT, since=None, limit=10_000))
    assert first["default"].rate is None  # the first frame has nothing to count from
    assert first["mail"] == QueueLine(
        queue="mail", due=4, scheduled=2, running=1, failed_last_hour=0,
        failed_last_hour_is_estimate=False, completed_last_minute=0,
        completed_last_minute_is_estimate=False, rate=None, rate_is_estimate=False,
        oldest_due_seconds=12.5,
    )  # fmt: skip

    since = AT - timedelta(seconds=2)
    later = by_queue(queue_lines(live, finished, at=AT, since=since, limit=10_000))
    default = later["default"]
    assert (default.rate, default.rate_is_estimate) == (5.0, False)  # 10 jobs in 2 s
    assert (default.failed_last_hour, default.completed_last_minute) == (2, 30)
    assert not default.failed_last_hour_is_estimate
    assert not default.completed_last_minute_is_estimate
    assert later["mail"].rate == 0.0


def test_windows_the_read_limit_cut_short_are_estimated_from_the_part_read() -> None:
    # There was more than the limit (99 jobs) to read, and the newest 100 finished in the last
    # 30 s: the minute and the hour were read only in part, the 2 s since the last frame in full.
    hour_ago = AT - timedelta(hours=1)  # jobs finished all hour long
    finished = [
        QueueFinished("a", 3, 40, 8, 60, AT - timedelta(seconds=30), hour_ago),
        QueueFinished("b", 0, 10, 2, 40, AT - timedelta(seconds=20), hour_ago),
    ]
    lines = by_queue(queue_lines([], finished, at=AT, since=AT - timedelta(seconds=2), limit=99))
    a = lines["a"]
    assert (a.failed_last_hour, a.failed_last_hour_is_estimate) == (360, True)  # 3 * 3600/30
    assert (a.completed_last_minute, a.completed_last_minute_is_estimate) == (80, True)
    assert (a.rate, a.rate_is_estimate) == (4.0, False)
    assert (lines["b"].failed_last_hour, lines["b"].failed_last_hour_is_estimate) == (0, True)

    # Since a previous frame 60 s ago, older than what was read: the rate of the part read.
    slow = by_queue(queue_lines([], finished, at=AT, since=AT - timedelta(minutes=1), limit=99))
    assert (slow["a"].rate, slow["a"].rate_is_estimate) == (8 / 30, True)

    # The first job of the hour finished 40 s ago: only those 40 s are scaled up to.
    quiet = [msgspec.structs.replace(f, first_in_hour=AT - timedelta(seconds=40)) for f in finished]
    after = by_queue(queue_lines([], quiet, at=AT, since=None, limit=99))["a"]
    assert (after.failed_last_hour, after.failed_last_hour_is_estimate) == (4, True)  # 3 * 40/30
    assert (after.completed_last_minute, after.completed_last_minute_is_estimate) == (53, True)

    # Up to the limit, nothing is an estimate, whatever the ages.
    exact = by_queue(queue_lines([], finished, at=AT, since=None, limit=100))
    assert not exact["a"].failed_last_hour_is_estimate
    assert exact["a"].failed_last_hour == 3


# the screen ---------------------------------------------------------------------------------


def stripe(**changes: Any) -> KeyLoad:
    return key_load(**{"key": "stripe", "max_running": 2, "running": 2, "running_jobs": 2,
                       "due": 40, "scheduled": 3, **changes})  # fmt: skip


def test_the_screen_marks_estimates_and_unknown_rates_and_fits_100_columns() -> None:
    lines = queue_lines(
        [QueueLive("mail", 1_204, 30, 8, 95.0), QueueLive("q" * 60, 1, 0, 0, 1.0)],
        [QueueFinished("mail", 3, 40, 8, 100, AT - timedelta(seconds=30), AT - timedelta(hours=1))],
        at=AT,
        since=AT - timedelta(seconds=2),
        limit=99,
    )
    worker = WorkerConnections("host-" + "x" * 44, 3, 125.0, 8)
    frame = a_frame(
        queues=lines,
        since=AT - timedelta(seconds=2),
        keys=[stripe(), stripe(key="k" * 70, max_running=None, due=0, running=0)],
        workers=[worker],
        finished_read=100,
        finished_read_limit=100,
        finished_read_since=AT - timedelta(seconds=30),
    )
    text = text_of(frame)
    assert all(len(line) <= 100 for line in text.splitlines()), text
    assert cells(text, "mail") == ["mail", "1,204", "30", "8", "~360", "~80", "4.0", "2m"]
    assert cells(text, "stripe") == ["stripe", "2/2", "40", "3", "full"]
    assert cells(text, worker.worker_id) == [worker.worker_id, "3", "2m", "8"]
    assert "every 2s  jobs ~1,000,000" in text
    assert "~ estimated from the newest 100 finished jobs (the last 30s)" in text
    assert "maintenance leader: none" in text
    assert "no active sweep runs" in text

    first = text_of(a_frame(queues=queue_lines([QueueLive("mail", 1, 0, 0, 1.0)], [], at=AT,
                                               since=None, limit=100)))  # fmt: skip
    assert cells(first, "mail")[6] == "?"
    assert "estimated" not in first


def test_a_frame_that_could_not_be_refreshed_says_so_above_the_last_figures() -> None:
    text = text_of(a_frame(), trouble="09:00:04: reading failed (OSError: refused)")
    assert text.splitlines()[1] == "09:00:04: reading failed (OSError: refused)"


class Stop(Exception):
    """Ends a watch in a test."""


async def test_watching_shows_the_last_frame_with_the_error_while_the_database_is_away() -> None:
    steps: list[Frame | Exception] = [
        a_frame(), OSError("connection refused"), a_frame(at=AT + timedelta(1)), Stop()
    ]  # fmt: skip
    frames = iter(steps)
    seen: list[tuple[datetime, str | None]] = []
    previous: list[Frame | None] = []

    async def read(app: App, last: Frame | None) -> Frame:
        previous.append(last)
        step = next(frames)
        if isinstance(step, BaseException):
            raise step
        return step

    def show(frame: Frame, trouble: str | None) -> None:
        seen.append((frame.at, trouble))

    with pytest.raises(Stop):
        await watch(App("postgresql://x/y"), show, interval=0.01, once=False, read=read)
    assert [at for at, _ in seen] == [AT, AT, AT + timedelta(1)]
    assert seen[0][1] is None
    assert "reading failed (OSError: connection refused)" in (seen[1][1] or "")
    assert "figures of" in (seen[1][1] or "")
    assert seen[2][1] is None
    # After the failure, the rate still counts from the last frame read.
    assert [p is None for p in previous] == [True, False, False, False]

    failing = iter([OSError("refused")])

    async def unreachable(app: App, last: Frame | None) -> Frame:
        raise next(failing)

    with pytest.raises(OSError, match="refused"):  # no frame yet: the command ends with it
        await watch(App("postgresql://x/y"), show, interval=0.01, once=False, read=unreachable)


# the command --------------------------------------------------------------------------------


class Touch(sweepq.TableSweep):
    name = "touch"
    key = ("id",)
    queue = "sweeps"

    async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
        return None


async def start_touch(app: App, items: int) -> int:
    await create_items(app, items)
    app.register_sweep(type("Touch", (Touch,), {"table": f"{app.schema}.items"}))
    return (await app.start_sweep("touch")).run_id


async def leader_of(app: App) -> str | None:
    found: str | None = await app.pool.fetchval(
        f"SELECT worker_id FROM {ident(app.schema)}.leaders WHERE role = 'maintenance'"
    )
    return found


@contextlib.asynccontextmanager
async def busy(app: App) -> AsyncIterator[tuple[sweepq.Worker, int]]:
    """Jobs in several queues and states, a full concurrency key, an active sweep run, and a
    live worker holding one job of the key, as the maintenance leader; the run's id."""

    @app.task(name="ok")
    async def ok(ctx: sweepq.Context) -> None:
        return None

    @app.task(name="boom", max_attempts=1)
    async def boom(ctx: sweepq.Context) -> None:
        raise RuntimeError("boom")

    gate = anyio.Event()

    @app.task(name="pay", queue="payments")
    async def pay(ctx: sweepq.Context) -> None:
        await gate.wait()

    for _ in range(3):
        await app.enqueue("ok")
    for _ in range(2):
        await app.enqueue("boom")
    assert await drain(app, queues=["default"]) == {"completed": 3, "failed": 2}
    for n in range(6):
        await app.enqueue("ok", queue="mail", delay=3600 if n >= 4 else 0)
    await app.set_concurrency_limit("stripe", 1)
    for _ in range(5):
        await app.enqueue("pay", concurrency_key="stripe")
    run_id = await start_touch(app, 200)

    worker = sweepq.Worker(
        app, queues=["payments"], concurrency=2, poll_seconds=0.1, maintenance_seconds=0.2,
        leader_ttl_seconds=2.0,
    )  # fmt: skip
    async with worker, anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await wait_until(lambda: _is(count_jobs(app, "running"), 1), what="a job runs", timeout=30)
        await wait_until(lambda: _is(leader_of(app), worker.id), what="it leads", timeout=30)
        try:
            yield worker, run_id
        finally:
            gate.set()
            worker.stop()


async def _is(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def test_top_once_shows_queues_runs_keys_workers_and_the_leader(app: App) -> None:
    async with busy(app) as (worker, run_id):
        result = await invoke(["top", "--once", *db(app)])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert all(len(line) <= 100 for line in text.splitlines()), text
    assert text.startswith(f"sweepq top  schema {app.schema}  ")

    assert cells(text, "queue") == [
        "queue", "due", "scheduled", "running", "failed 1h", "completed 1m", "rate/s",
        "oldest due",
    ]  # fmt: skip
    assert cells(text, "default") == ["default", "0", "0", "0", "2", "3", "?"]
    mail = cells(text, "mail")
    assert mail[:7] == ["mail", "4", "2", "0", "0", "0", "?"]
    assert re.fullmatch(r"\d+s", mail[7])  # the oldest due job's age
    assert cells(text, "payments")[:7] == ["payments", "4", "0", "1", "0", "0", "?"]
    assert cells(text, "sweeps")[:4] == ["sweeps", "1", "0", "0"]  # the run's first link

    assert f"#{run_id} touch" in text
    assert "0/200" in text
    assert cells(text, "stripe") == ["stripe", "1/1", "4", "0", "full"]

    row = cells(text, worker.id[:49])
    assert 2 <= int(row[1]) <= 4  # its pool (2 to 3) and its listening connection
    assert re.fullmatch(r"\d+s", row[2])
    assert row[3] == "1"  # the job of `stripe` it runs
    assert f"maintenance leader: {worker.id}, elected " in " ".join(text.split())
    assert "estimated" not in text


async def test_top_json_has_the_same_figures(app: App) -> None:
    async with busy(app) as (worker, run_id):
        result = await invoke(["top", "--once", "--json", *db(app)])
    assert result.exit_code == 0, result.output
    frame = msgspec.json.decode(result.stdout, type=Frame)
    assert frame.schema == app.schema
    queues = by_queue(frame.queues)
    assert set(queues) == {"default", "mail", "payments", "sweeps"}
    default = queues["default"]
    assert (default.failed_last_hour, default.completed_last_minute, default.rate) == (2, 3, None)
    assert (queues["mail"].due, queues["mail"].scheduled) == (4, 2)
    assert (queues["payments"].due, queues["payments"].running) == (4, 1)
    assert [(r.id, r.sweep, r.state) for r in frame.runs] == [(run_id, "touch", "running")]
    assert [(k.key, k.max_running, k.running, k.due, k.binding) for k in frame.keys] == [
        ("stripe", 1, 1, 4, True)
    ]
    mine = [w for w in frame.workers if w.worker_id == worker.id[:49]]
    assert [w.running for w in mine] == [1]
    assert frame.leader is not None
    assert frame.leader.worker_id == worker.id
    assert frame.jobs_estimate is None or frame.jobs_estimate >= 0
    assert (frame.finished_read, frame.finished_read_since) == (5, None)


async def test_the_rate_counts_the_jobs_finished_since_the_previous_frame(app: App) -> None:
    @app.task(name="ok", queue="fast")
    async def ok(ctx: sweepq.Context) -> None:
        return None

    first = await read_frame(app)
    for _ in range(4):
        await app.enqueue("ok")
    await drain(app, queues=["fast"])
    second = await read_frame(app, first)

    fast = by_queue(second.queues)["fast"]
    seconds = (second.at - first.at).total_seconds()
    assert fast.rate == pytest.approx(4 / seconds)
    assert not fast.rate_is_estimate
    assert fast.completed_last_minute == 4
    assert second.since == first.at


async def test_a_frame_past_its_read_limit_flags_the_figures_it_estimates(app: App) -> None:
    @app.task(name="ok", queue="fast")
    async def ok(ctx: sweepq.Context) -> None:
        return None

    for _ in range(6):
        await app.enqueue("ok")
    await drain(app, queues=["fast"])

    frame = await read_frame(app, finished_limit=4)

    assert frame.finished_read == 4
    assert frame.finished_read_since is not None
    fast = by_queue(frame.queues)["fast"]
    assert fast.completed_last_minute_is_estimate
    assert fast.failed_last_hour_is_estimate
    assert fast.completed_last_minute >= 4
    exact = by_queue((await read_frame(app, finished_limit=6)).queues)["fast"]
    assert (exact.completed_last_minute, exact.completed_last_minute_is_estimate) == (6, False)


async def test_an_unreachable_database_ends_top_with_one_line() -> None:
    for args in (["top", "--once"], ["top", "--once", "--json"]):
        result = await invoke([*args, "--dsn", NO_DATABASE])
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("error: ")
        assert "cannot reach PostgreSQL" in lines[0]
    refused = await invoke(["top", "--once", "--interval", "0"])
    assert refused.exit_code == 2


# the cost of a frame ------------------------------------------------------------------------

OLD_FINISHED = 100_000
SEED = """
INSERT INTO {schema}.jobs (task, queue, state, attempt, max_attempts, run_at, created_at,
                           attempted_at, finished_at, failure_reason)
SELECT 'old', 'q' || (i % 3), 'completed', 1, 1, f - interval '1 s', f - interval '2 s', f, f,
       NULL
FROM generate_series(1, $1::int) AS i,
     LATERAL (SELECT now() - interval '2 days' - i * interval '1 s' AS f) AS t
"""
RECENT = """
INSERT INTO {schema}.jobs (task, queue, state, attempt, max_attempts, run_at, finished_at,
                           failure_reason, concurrency_key, worker_id, lease_expires_at)
SELECT 'new', 'q1', s::{schema}.job_state, 1, 1, now() - interval '5 s',
       CASE WHEN s IN ('completed', 'failed') THEN now() - i * interval '10 s' END,
       CASE WHEN s = 'failed' THEN 'error' END,
       CASE WHEN i % 2 = 0 THEN 'k' || i END,
       CASE WHEN s = 'running' THEN 'w' END,
       CASE WHEN s = 'running' THEN now() + interval '1 minute' END
FROM unnest(ARRAY['completed', 'failed', 'available', 'running']) AS s,
     generate_series(1, 5) AS i
"""
PARAMS = {
    "top_jobs_estimate": "('{schema}')",
    "top_job_live": "",
    "top_job_finished": "(now() - interval '2 s', 10000)",
    "top_concurrency_key_busiest": "(10)",
    "top_worker_list": "",
    "top_leader": "",
}
VISITED_MOST = 100  # rows of `jobs` any one statement may visit: the 20 recent ones, and slack


@pytest.fixture
async def finished_history(app: App) -> App:
    """100,000 jobs completed two days ago, and five jobs per state of the last minutes."""
    schema = ident(app.schema)
    await app.pool.execute(SEED.format(schema=schema), OLD_FINISHED)
    await app.pool.execute(RECENT.format(schema=schema))
    await app.pool.execute(f"ANALYZE {schema}.jobs")
    await start_touch(app, 50)
    return app


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


def jobs_rows_visited(node: dict[str, Any]) -> int:
    """Rows a scan of `jobs` read: those it returned, and those its filters threw away."""
    returned = node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
    thrown = node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)
    return int(returned + thrown)


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize("statement", sorted(PARAMS))
async def test_no_statement_of_a_frame_reads_the_finished_jobs_outside_its_windows(
    finished_history: App, statement: str, plan_cache_mode: str
) -> None:
    app = finished_history
    conn = await asyncpg.connect(app.dsn)
    try:
        await conn.execute(f"SET plan_cache_mode = {plan_cache_mode}")
        await conn.execute(f"PREPARE top_statement AS {app.queries.sql[statement]}")
        args = PARAMS[statement].format(schema=app.schema)  # t_<hex>: safe as a literal
        explain = f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE top_statement{args}"
        plan = msgspec.json.decode((await conn.fetchval(explain)).encode())[0]["Plan"]
    finally:
        await conn.close()
    scans = [n for n in plan_nodes(plan) if n.get("Relation Name") == "jobs"]
    kinds = {n["Node Type"] for n in scans}
    assert "Seq Scan" not in kinds, msgspec.json.encode(plan).decode()
    for scan in scans:
        assert scan.get("Index Name") or scan["Node Type"] == "Bitmap Heap Scan", scan
        assert jobs_rows_visited(scan) <= VISITED_MOST, msgspec.json.encode(scan).decode()


async def test_a_whole_frame_reads_jobs_through_indexes_and_only_a_few_rows(
    finished_history: App,
) -> None:
    app = finished_history
    # A connection of its own: the statistics below count what this session has not reported
    # yet, which is only the frames read here.
    conn = await asyncpg.connect(app.dsn)
    try:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            first = await read_frame(app, conn=conn)
            earlier = msgspec.structs.replace(first, at=first.at - timedelta(seconds=2))
            frame = await read_frame(app, earlier, conn=conn)
            stats = await conn.fetchrow(
                "SELECT seq_scan, seq_tup_read, idx_tup_fetch FROM pg_stat_xact_user_tables"
                " WHERE relid = $1::regclass",
                f"{ident(app.schema)}.jobs",
            )
    finally:
        await conn.close()
    assert stats is not None
    assert (stats["seq_scan"], stats["seq_tup_read"]) == (0, 0)
    assert stats["idx_tup_fetch"] <= 2 * VISITED_MOST  # two frames; none of the old jobs
    q1 = by_queue(frame.queues)["q1"]
    assert (q1.due, q1.running, q1.failed_last_hour, q1.completed_last_minute) == (5, 5, 5, 5)
    assert q1.rate == 0.0
    assert frame.finished_read == 10  # the recent ones; none of the 100,000 old ones
    assert [r.sweep for r in frame.runs] == ["touch"]
