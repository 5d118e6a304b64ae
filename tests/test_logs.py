"""What a worker logs about failures: a WARNING per retry, an ERROR with the exception (exc_info)
for a job that fails for good, with their facts as fields; and the JSON format a collector
reads."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import msgspec
import pytest

import sweepq
from factories import create_items
from sweep_worker_proc import items_sweep
from sweepq.core.logs import JsonFormatter
from sweepq.testing import drain
from waiting import wait_until
from worker_cli import start_worker_cli


def fields(record: logging.LogRecord, *names: str) -> dict[str, object]:
    return {name: getattr(record, name, None) for name in names}


async def test_a_retried_failure_warns_and_a_final_one_is_an_error_with_its_traceback(
    app: sweepq.App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(name="charge", max_attempts=2)
    async def charge(ctx: sweepq.Context, order: int) -> None:
        raise ConnectionError(f"card processor refused order {order}")

    job = await app.enqueue(charge, {"order": 7})
    with caplog.at_level(logging.DEBUG, logger="sweepq.worker"):
        assert await drain(app) == {"retry": 1, "failed": 1}
    records = [r for r in caplog.records if getattr(r, "job_id", None) == job.job_id]
    retry, failed = records

    assert retry.levelno == logging.WARNING
    assert fields(retry, "task", "attempt", "max_attempts", "outcome", "error") == {
        "task": "charge",
        "attempt": 1,
        "max_attempts": 2,
        "outcome": "retry",
        "error": "ConnectionError: card processor refused order 7",
    }
    assert isinstance(getattr(retry, "next_run_at", None), str)
    assert retry.getMessage().startswith(
        f"job {job.job_id} (charge) failed, attempt 1/2; retrying in "
    )

    assert failed.levelno == logging.ERROR
    assert fields(failed, "attempt", "outcome", "failure_reason") == {
        "attempt": 2,
        "outcome": "failed",
        "failure_reason": "max_attempts_exceeded",
    }
    message = failed.getMessage()
    assert message == (
        f"job {job.job_id} (charge) failed for good (max_attempts_exceeded, attempt 2/2): "
        "ConnectionError: card processor refused order 7"
    )
    # The exception itself rides in exc_info, where handlers that report exceptions (Sentry's
    # logging integration, structlog) look for it; formatters print its traceback.
    assert failed.exc_info is not None
    kind, raised, traceback = failed.exc_info
    assert kind is ConnectionError
    assert str(raised) == "card processor refused order 7"
    assert traceback is not None
    printed = logging.Formatter().format(failed)
    assert "Traceback (most recent call last)" in printed
    assert "ConnectionError: card processor refused order 7" in printed
    entry = msgspec.json.decode(JsonFormatter().format(failed))
    assert "ConnectionError: card processor refused order 7" in entry["traceback"]


async def test_a_completed_job_is_logged_at_debug_only(
    app: sweepq.App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(name="noop")
    async def noop(ctx: sweepq.Context) -> None:
        return None

    await app.enqueue(noop)
    with caplog.at_level(logging.INFO, logger="sweepq.worker"):
        await drain(app)
    assert not [r for r in caplog.records if getattr(r, "outcome", None)]
    with caplog.at_level(logging.DEBUG, logger="sweepq.worker"):
        await app.enqueue(noop)
        await drain(app)
    (done,) = [r for r in caplog.records if getattr(r, "outcome", None)]
    assert (done.levelno, getattr(done, "outcome", None)) == (logging.DEBUG, "completed")


def test_the_json_format_writes_one_object_with_the_record_fields() -> None:
    record = logging.LogRecord(
        "sweepq.worker", logging.WARNING, __file__, 1, "job %s failed", (5,), None
    )
    record.job_id = 5
    record.outcome = "retry"
    line = JsonFormatter().format(record)
    entry = msgspec.json.decode(line)
    assert entry["message"] == "job 5 failed"
    assert (entry["level"], entry["logger"]) == ("WARNING", "sweepq.worker")
    assert (entry["job_id"], entry["outcome"]) == (5, "retry")
    assert entry["time"].endswith("+00:00")
    try:
        raise ValueError("bad")
    except ValueError:
        record.exc_info = sys.exc_info()
    assert "ValueError: bad" in msgspec.json.decode(JsonFormatter().format(record))["traceback"]


APP_MODULE = """
import sweepq

app = sweepq.App(schema={schema!r})


@app.task(name="flaky", max_attempts=3)
async def flaky(ctx: sweepq.Context) -> None:
    raise RuntimeError("upstream timed out")
"""


async def test_the_worker_command_logs_failures_as_json_lines(
    app: sweepq.App, tmp_path: Path
) -> None:
    @app.task(name="flaky", max_attempts=3)
    async def flaky(ctx: sweepq.Context) -> None:
        return None

    job = await app.enqueue(flaky)
    proc, _ = start_worker_cli(
        app, tmp_path, APP_MODULE, "--log-format", "json", SWEEPQ_POLL_SECONDS="0.1"
    )

    _, stderr = await stop_once_attempted(app, proc, job.job_id, signal.SIGTERM)
    entries = [msgspec.json.decode(line) for line in stderr.splitlines() if line.startswith("{")]
    (warning,) = [e for e in entries if e.get("job_id") == job.job_id]
    assert warning["level"] == "WARNING"
    assert (warning["outcome"], warning["attempt"], warning["max_attempts"]) == ("retry", 1, 3)
    assert warning["error"] == "RuntimeError: upstream timed out"
    # Every line of the log is JSON.
    assert all(line.startswith("{") for line in stderr.splitlines() if line.strip()), stderr


async def test_with_the_json_format_every_line_the_worker_writes_is_json(
    app: sweepq.App, tmp_path: Path
) -> None:
    @app.task(name="flaky", max_attempts=3)
    async def flaky(ctx: sweepq.Context) -> None:
        return None

    job = await app.enqueue(flaky)
    proc, module = start_worker_cli(
        app, tmp_path, APP_MODULE, "--log-format", "json", "--grace-seconds", "5",
        SWEEPQ_POLL_SECONDS="0.1",
    )  # fmt: skip

    stdout, stderr = await stop_once_attempted(app, proc, job.job_id, signal.SIGINT)
    assert proc.returncode == 0, stderr
    said = [msgspec.json.decode(line) for line in stdout.splitlines()]
    logged = [msgspec.json.decode(line) for line in stderr.splitlines()]
    banner, *stopping, stopped = said
    assert banner["message"].startswith("sweepq worker ")
    assert banner["settings"]["app"] == {"value": f"{module}:app", "source": "APP"}
    assert banner["settings"]["poll_seconds"] == {"value": "0.1", "source": "SWEEPQ_POLL_SECONDS"}
    assert [(e["signal"], e["message"][:16]) for e in stopping] == [("SIGINT", "SIGINT: stopping")]
    assert (stopped["processed"], stopped["level"], stopped["logger"]) == (1, "INFO", "sweepq.cli")
    assert any(e.get("job_id") == job.job_id for e in logged)


async def test_with_the_json_format_an_error_is_a_json_line_too(tmp_path: Path) -> None:
    proc = await anyio.run_process(
        [sys.executable, "-m", "sweepq.cli", "worker", "nowhere:app", "--log-format", "json"],
        cwd=tmp_path, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stdout == b""
    (error,) = [msgspec.json.decode(line) for line in proc.stderr.splitlines()]
    assert error["level"] == "ERROR"
    assert "nowhere" in error["message"]


async def test_sweep_runs_log_their_start_and_their_end_with_counts(
    app: sweepq.App, caplog: pytest.LogCaptureFixture
) -> None:
    await create_items(app, 12, failing=range(3, 4))
    app.register_sweep(items_sweep(app.schema, page_size=5, window=10, max_attempts=1))
    with caplog.at_level(logging.INFO, logger="sweepq.sweeps"):
        started = await app.start_sweep("items")
        await drain(app)
    runs = [r for r in caplog.records if getattr(r, "run_id", None) == started.run_id]
    start, end = runs
    assert start.getMessage() == f"sweep 'items' run {started.run_id} started (12 items)"
    # One item is undone: the run ends failed, logged as an error that says what to do.
    assert end.levelno == logging.ERROR
    assert end.getMessage() == (
        f"sweep 'items' run {started.run_id} failed: 11 completed, 1 failed, 0 cancelled (the "
        "walk reached the end, but of its 12 items 1 failed. Fix the cause (see `sweepq sweep "
        f"failures {started.run_id}`), then `sweepq sweep retry-failed {started.run_id}` runs "
        "them again)"
    )
    assert fields(end, "state", "completed", "failed") == {
        "state": "failed",
        "completed": 11,
        "failed": 1,
    }


async def stop_once_attempted(
    app: sweepq.App, proc: subprocess.Popen[str], job_id: int, sig: signal.Signals
) -> tuple[str, str]:
    """Send `sig` to the worker process once it has run job `job_id`; its stdout and stderr."""

    async def attempted() -> bool:
        assert proc.poll() is None
        found = await app.get_job(job_id)
        return found is not None and found.attempt >= 1

    try:
        await wait_until(attempted, timeout=30, what="the worker runs the job")
        proc.send_signal(sig)
        return await anyio.to_thread.run_sync(lambda: proc.communicate(timeout=30))
    finally:
        if proc.poll() is None:
            proc.kill()
