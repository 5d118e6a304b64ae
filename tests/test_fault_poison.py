"""Poison jobs: no job can end its worker.

A handler that raises `SystemExit`, calls `sys.exit()`, raises `KeyboardInterrupt` or a
cancellation of its own fails its execution like any exception, recorded with its class and
traceback, and the `sweepq worker` process carries on; stored args nested too deep to decode fail
`invalid_args`. A job that kills its worker outright (`os._exit`, the OOM killer) is rescued with
a crash counted, runs alone among the next worker's suspects, and fails `worker_died` at its
second death, while the jobs that ran beside it are untouched.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

import sweepq
from cli_runner import invoke
from sweepq.core.ident import ident
from sweepq.core.queries import Executor
from waiting import wait_until
from worker_cli import finish, start_worker_cli

pytestmark = [pytest.mark.fault, pytest.mark.committed]

HERE = Path(__file__).parent

POISON_MODULE = """
import asyncio
import sys
from typing import Any

import sweepq

app = sweepq.App(schema={schema!r})
fast = sweepq.RetryPolicy(backoff=lambda attempt, error: 0.05)


@app.task(name="system_exit", max_attempts=2, retry=fast)
async def system_exit(ctx: sweepq.Context) -> None:
    raise SystemExit(3)


@app.task(name="sys_exit_in_thread", max_attempts=2, retry=fast)
def sys_exit_in_thread(ctx: sweepq.Context) -> None:
    sys.exit()


@app.task(name="keyboard_interrupt", max_attempts=2, retry=fast)
async def keyboard_interrupt(ctx: sweepq.Context) -> None:
    raise KeyboardInterrupt


@app.task(name="keyboard_interrupt_in_thread", max_attempts=2, retry=fast)
def keyboard_interrupt_in_thread(ctx: sweepq.Context) -> None:
    raise KeyboardInterrupt


@app.task(name="own_cancellation", max_attempts=2, retry=fast)
async def own_cancellation(ctx: sweepq.Context) -> None:
    raise asyncio.CancelledError("the handler's own")


@app.task(name="deep", max_attempts=2, retry=fast)
async def deep(ctx: sweepq.Context, value: Any) -> None:
    return None


@app.task(name="good")
async def good(ctx: sweepq.Context, n: int) -> int:
    return n
"""

# What each poison task raises, as its error records it.
RAISED = {
    "system_exit": "SystemExit: 3",
    "sys_exit_in_thread": "SystemExit",
    "keyboard_interrupt": "KeyboardInterrupt",
    "keyboard_interrupt_in_thread": "KeyboardInterrupt",
    "own_cancellation": "CancelledError: the handler's own",
}
GOOD = 40


def jobs_table(app: sweepq.App) -> str:
    return f"{ident(app.schema)}.jobs"


async def insert_raw(app: sweepq.App, task: str, args_json: str) -> int:
    """A job written straight into the table, as an older version or a privileged role could
    have (every enqueue path refuses such args now)."""
    return int(
        await app.pool.fetchval(
            f"INSERT INTO {jobs_table(app)} (task, queue, args, max_attempts)"
            " VALUES ($1, 'default', $2::json, 2) RETURNING id",
            task,
            args_json,
        )
    )


async def test_a_handler_that_raises_system_exit_or_keyboard_interrupt_never_ends_its_worker(
    app: sweepq.App, tmp_path: Path
) -> None:
    poison = {}
    for task in RAISED:
        poison[task] = int(
            await app.pool.fetchval(
                f"SELECT job_id FROM {ident(app.schema)}.enqueue($1, '{{}}', "
                "'{\"max_attempts\": 2}')",
                task,
            )
        )
    deep = await insert_raw(app, "deep", '{"value": ' + "[" * 3_000 + "]" * 3_000 + "}")
    good = [
        int(
            await app.pool.fetchval(
                f"SELECT job_id FROM {ident(app.schema)}.enqueue('good', $1::jsonb)",
                msgspec.json.encode({"n": n}).decode(),
            )
        )
        for n in range(GOOD)
    ]
    proc, _ = start_worker_cli(
        app, tmp_path, POISON_MODULE, "--max-concurrency", "4", SWEEPQ_POLL_SECONDS="0.05"
    )
    try:
        await wait_until(lambda: all_ended(app, proc), timeout=60, what="every job ended")
        # Every poison job spent its two attempts in this one worker, which is still alive.
        assert proc.poll() is None, await finish(proc)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = await finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert f"it processed {len(RAISED) * 2 + 1 + GOOD} jobs" in stdout, stdout

    for task, raised in RAISED.items():
        job = await app.get_job(poison[task])
        assert job is not None
        assert (job.state, job.failure_reason, job.attempt) == (
            sweepq.JobState.FAILED,
            "max_attempts_exceeded",
            2,
        ), task
        assert [e.kind for e in job.errors] == ["exception", "exception"], task
        for error in job.errors:
            # The class and the traceback, as for any exception.
            assert error.error.startswith("Traceback (most recent call last)"), error.error
            assert error.error.rstrip().endswith(raised), error.error
    deep_job = await app.get_job(deep)
    assert deep_job is not None
    assert (deep_job.state, deep_job.failure_reason, deep_job.attempt) == (
        sweepq.JobState.FAILED,
        "invalid_args",
        1,
    )
    assert "nested too deep to decode" in deep_job.errors[-1].error
    results = [await app.get_job(job_id) for job_id in good]
    assert [(j.state, j.result) for j in results if j is not None] == [
        (sweepq.JobState.COMPLETED, n) for n in range(GOOD)
    ]


async def test_a_job_nested_too_deep_to_decode_reads_back_with_its_args_marked_unreadable(
    app: sweepq.App,
) -> None:
    job_id = await insert_raw(app, "deep", '{"value": ' + "[" * 3_000 + "]" * 3_000 + "}")
    job = await app.get_job(job_id)
    assert job is not None
    assert job.args == {}
    assert job.unreadable is not None
    assert "args" in job.unreadable
    assert "nested too deep" in job.unreadable
    # And so does the command line, in a listing and in the job's own view.
    for command in (["jobs", "show", str(job_id)], ["jobs", "list"]):
        result = await invoke([*command, "--dsn", app.dsn, "--schema", app.schema])
        assert result.exit_code == 0, result.output
        assert "Traceback" not in result.output
    shown = await invoke(["jobs", "show", str(job_id), "--dsn", app.dsn, "--schema", app.schema])
    assert "nested too deep to decode" in " ".join(shown.output.split())


# Jobs that kill their worker ----------------------------------------------------------------


def start_worker(app: sweepq.App) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "poison_worker_proc.py"), app.dsn, app.schema],
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def ready(proc: subprocess.Popen[str]) -> str:
    """The worker's id, once it runs."""
    assert proc.stdout is not None
    line = await anyio.to_thread.run_sync(proc.stdout.readline)
    assert line.startswith("ready "), (line, await finish(proc))
    return line.split()[1]


async def died(proc: subprocess.Popen[str]) -> int:
    code = await anyio.to_thread.run_sync(lambda: proc.wait(timeout=30))
    await finish(proc)
    return code


async def job_rows(app: sweepq.App, on: Executor | None = None) -> dict[str, Any]:
    rows = await (on or app.pool).fetch(
        f"SELECT task, state::text, failure_reason, crashes, attempt,"
        f" array(SELECT e ->> 'kind' FROM jsonb_array_elements(errors) AS e) AS kinds"
        f" FROM {jobs_table(app)} ORDER BY id"
    )
    return {r["task"] + (f"#{n}" if r["task"] == "bystander" else ""): tuple(r)[1:]
            for n, r in enumerate(rows)}  # fmt: skip


async def all_ended(app: sweepq.App, proc: subprocess.Popen[str]) -> bool:
    """Whether every job ended; fails at once if the worker `proc` died."""
    assert proc.poll() is None, await finish(proc)
    return not await app.pool.fetchval(
        f"SELECT count(*) FROM {jobs_table(app)} WHERE state IN ('available', 'running')"
    )


async def rescue_when_lapsed(app: sweepq.App, expected: int) -> None:
    """Rescue as the maintenance leader would, once the dead worker's leases lapse."""
    rescued = 0

    async def all_rescued() -> bool:
        nonlocal rescued
        rescued += await app.rescue_lapsed(grace_seconds=0)
        return rescued >= expected

    await wait_until(all_rescued, what=f"{expected} jobs rescued", every=0.1)
    assert rescued == expected


async def test_a_job_that_kills_its_worker_twice_fails_worker_died_and_its_neighbours_run(
    app: sweepq.App,
) -> None:
    await app.pool.execute(
        f"CREATE TABLE {ident(app.schema)}.started (job_id bigint NOT NULL,"
        " at timestamptz NOT NULL DEFAULT clock_timestamp())"
    )
    for _ in range(3):
        await app.pool.execute(
            f"SELECT {ident(app.schema)}.enqueue('bystander', '{{\"seconds\": 60}}')"
        )
    poison = int(
        await app.pool.fetchval(f"SELECT job_id FROM {ident(app.schema)}.enqueue('poison.exit')")
    )

    # The first death: the poison job and three others were running; each is a suspect now.
    first = start_worker(app)
    first_id = await ready(first)
    assert await died(first) == 17
    await rescue_when_lapsed(app, 4)
    rows = await app.pool.fetch(
        f"SELECT crashes, state::text, errors -> -1 ->> 'kind' AS kind,"
        f" errors -> -1 ->> 'error' AS error FROM {jobs_table(app)} ORDER BY id"
    )
    assert [(r["crashes"], r["state"], r["kind"]) for r in rows] == [
        (1, "available", "worker_died")
    ] * 4
    assert all(first_id in r["error"] for r in rows)

    # The second: a worker runs its suspects one at a time, beside jobs that are not suspects,
    # so only the poison job can be blamed for it; the job beside it gets one crash, no more.
    await app.pool.execute(f"SELECT {ident(app.schema)}.enqueue('beside_poison')")
    second = start_worker(app)
    await ready(second)
    assert await died(second) == 17
    await rescue_when_lapsed(app, 2)
    job = await app.get_job(poison)
    assert job is not None
    assert (job.state, job.failure_reason, job.crashes) == (
        sweepq.JobState.FAILED,
        "worker_died",
        2,
    )
    assert [e.kind for e in job.errors] == ["worker_died", "worker_died"]

    # Nothing more dies: the others run to the end in a third worker.
    third = start_worker(app)
    await ready(third)
    try:
        await wait_until(lambda: all_ended(app, third), timeout=30, what="every job ended")
        third.send_signal(signal.SIGTERM)
        assert await died(third) == 0
    finally:
        if third.poll() is None:
            third.kill()
    assert await job_rows(app) == {
        "bystander#0": ("completed", None, 0, 2, ["worker_died"]),
        "bystander#1": ("completed", None, 0, 2, ["worker_died"]),
        "bystander#2": ("completed", None, 0, 2, ["worker_died"]),
        "poison.exit": ("failed", "worker_died", 2, 2, ["worker_died", "worker_died"]),
        "beside_poison": ("completed", None, 0, 2, ["worker_died"]),
    }
    started = await app.pool.fetchval(f"SELECT count(*) FROM {ident(app.schema)}.started")
    assert started == 2  # the poison job ran twice, killing two workers, and never again
