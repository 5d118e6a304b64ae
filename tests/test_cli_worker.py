"""`sweepq worker APP` as a real process: settings banner, work, and a clean exit on SIGTERM,
also when its output has nowhere to go."""

from __future__ import annotations

import signal
from pathlib import Path
from subprocess import Popen

import anyio
import pytest

import sweepq
from waiting import wait_until
from worker_cli import close_output, finish, start_worker_cli, wait_for_exit

APP_MODULE = """
import sweepq

app = sweepq.App(schema={schema!r})


@app.task(name="touch")
async def touch(ctx: sweepq.Context, n: int) -> None:
    return None


@app.task(name="slow")
async def slow(ctx: sweepq.Context) -> None:
    import anyio

    await anyio.sleep(120)


@app.task(name="nap")
async def nap(ctx: sweepq.Context, seconds: float) -> None:
    import anyio

    await anyio.sleep(seconds)
    print("napped", seconds, flush=True)  # a handler's own output, maybe to a closed pipe
"""


def _start(app: sweepq.App, folder: Path, *args: str, **env: str) -> tuple[Popen[str], str]:
    return start_worker_cli(app, folder, APP_MODULE, *args, **env)


async def _until(app: sweepq.App, proc: Popen[str], sql: str) -> None:
    async def holds() -> bool:
        assert proc.poll() is None, proc.communicate()
        return bool(await app.pool.fetchval(sql.replace("{jobs}", f'"{app.schema}".jobs')))

    await wait_until(holds, timeout=30, what=sql)


async def _finish(proc: Popen[str]) -> tuple[str, str]:
    return await finish(proc)


async def test_the_worker_prints_its_settings_works_jobs_and_exits_cleanly_on_sigterm(
    app: sweepq.App, tmp_path: Path
) -> None:
    @app.task(name="touch")
    async def touch(ctx: sweepq.Context, n: int) -> None:
        return None

    await app.enqueue_many([sweepq.JobSpec(touch, {"n": i}) for i in range(30)])
    proc, module = _start(
        app,
        tmp_path,
        *("--max-concurrency", "3", "--grace-seconds", "1"),
        SWEEPQ_POLL_SECONDS="0.2",
        SWEEPQ_MAX_CONCURRENCY="99",
    )
    try:
        await _until(app, proc, "SELECT count(*) = 30 FROM {jobs} WHERE state = 'completed'")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = await _finish(proc)
    assert proc.returncode == 0, err
    assert f"app              = {module}:app  (APP)" in out
    assert f"schema           = {app.schema}  (APP)" in out
    assert "database         = " in out
    assert "(SWEEPQ_DSN)" in out
    assert "concurrency      = 3  (--max-concurrency)" in out
    assert "poll_seconds     = 0.2  (SWEEPQ_POLL_SECONDS)" in out
    assert "prune_every      = 1h  (default)" in out
    assert "lease_seconds    = 30  (default)" in out
    assert "grace_seconds    = 1  (--grace-seconds)" in out
    assert "SIGTERM: stopping" in out
    assert "it processed 30 jobs" in out


async def test_a_second_sigterm_hands_a_running_job_back_without_waiting_for_the_grace(
    app: sweepq.App, tmp_path: Path
) -> None:
    @app.task(name="slow")
    async def slow(ctx: sweepq.Context) -> None:
        return None

    job = await app.enqueue(slow)
    proc, _ = _start(app, tmp_path, "--grace-seconds", "600", "--poll-seconds", "0.2")
    try:
        await _until(app, proc, "SELECT count(*) = 1 FROM {jobs} WHERE state = 'running'")
        proc.send_signal(signal.SIGTERM)
        await anyio.sleep(0.2)
        assert proc.poll() is None  # the first signal waits for the job (grace of 600 s)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = await _finish(proc)
    assert proc.returncode == 0, err
    assert "SIGTERM again: stopping now" in out
    handed_back = await app.get_job(job.job_id)
    assert handed_back is not None
    assert handed_back.state is sweepq.JobState.AVAILABLE
    assert handed_back.attempt == 0


@pytest.mark.parametrize("closed", [("stdout",), ("stdout", "stderr")])
@pytest.mark.parametrize(
    ("seconds", "grace", "ends"),
    [(1.0, "30", "completed"), (120.0, "0.5", "handed back")],
)
async def test_a_worker_whose_output_pipe_closed_still_stops_gracefully_on_sigint(
    app: sweepq.App,
    tmp_path: Path,
    closed: tuple[str, ...],
    seconds: float,
    grace: str,
    ends: str,
) -> None:
    # `sweepq worker ... | tee log` and Ctrl-C: tee exits first, and every line the worker writes
    # after that (its stop message, a log line) meets a pipe that nobody reads.
    @app.task(name="nap")
    async def nap(ctx: sweepq.Context, seconds: float) -> None:
        return None

    jobs = [await app.enqueue(nap, {"seconds": seconds}) for _ in range(3)]
    proc, _ = _start(app, tmp_path, "--grace-seconds", grace, "--poll-seconds", "0.2")
    try:
        await _until(app, proc, "SELECT count(*) = 3 FROM {jobs} WHERE state = 'running'")
        close_output(proc, *closed)
        proc.send_signal(signal.SIGINT)
        err = await wait_for_exit(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    for enqueued in jobs:
        job = await app.get_job(enqueued.job_id)
        assert job is not None
        if ends == "completed":
            assert (job.state, job.attempt, job.errors) == (sweepq.JobState.COMPLETED, 1, [])
        else:  # the grace ran out: stopped and handed back, no attempt charged
            assert (job.state, job.attempt) == (sweepq.JobState.AVAILABLE, 0)
            assert [e.kind for e in job.errors] == ["interrupted"]
