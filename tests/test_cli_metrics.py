"""`sweepq worker --metrics-port`: the worker serves its metrics to Prometheus over HTTP (the
endpoint of `sweepq.contrib.prometheus`), from a port that is checked, or names the extra to
install.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import urllib.request
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import anyio
from prometheus_client.parser import text_string_to_metric_families

import sweepq
import sweepq.throttle
from waiting import wait_until
from worker_cli import finish, start_worker_cli

APP_MODULE = """
import sweepq

app = sweepq.App(schema={schema!r})


@app.task(name="touch")
async def touch(ctx: sweepq.Context, n: int) -> None:
    return None


@app.task(name="explode", max_attempts=1)
async def explode(ctx: sweepq.Context) -> None:
    raise RuntimeError("boom")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_worker(app: sweepq.App, folder: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    proc, _ = start_worker_cli(app, folder, APP_MODULE, *args, SWEEPQ_POLL_SECONDS="0.1", **env)
    return proc


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The endpoint's samples: {(name, labels without the scope's): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            ours = frozenset((k, v) for k, v in s.labels.items() if not k.startswith("otel_"))
            found[(s.name, ours)] = s.value
    return found


def labels(**values: str) -> frozenset[tuple[str, str]]:
    return frozenset(values.items())


def executions_of(task: str, outcome: str) -> tuple[str, frozenset[tuple[str, str]]]:
    """The endpoint's counter of `task`'s executions in the default queue with `outcome`."""
    return (
        "sweepq_job_executions_total",
        labels(sweepq_task=task, messaging_destination_name="default", sweepq_outcome=outcome),
    )


async def scrape_until(
    port: int, proc: subprocess.Popen[str], wanted: Sequence[tuple[str, frozenset[tuple[str, str]]]]
) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Scrape until every wanted sample is there (the server starts, the sampler reads)."""
    found: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}

    async def all_there() -> bool:
        nonlocal found
        assert proc.poll() is None, proc.communicate()
        try:
            found = await anyio.to_thread.run_sync(scrape, port)
        except OSError:
            found = {}
        return all(w in found for w in wanted)

    await wait_until(all_there, timeout=30, what=f"samples {wanted}", every=0.1)
    return found


async def test_the_worker_serves_its_metrics_to_prometheus_over_http(
    app: sweepq.App, tmp_path: Path
) -> None:
    @app.task(name="touch")
    async def touch(ctx: sweepq.Context, n: int) -> None:
        return None

    @app.task(name="explode", max_attempts=1)
    async def explode(ctx: sweepq.Context) -> None:
        return None

    await app.enqueue(touch, {"n": 0}, queue="later", delay=timedelta(hours=1))
    await app.enqueue_many([sweepq.JobSpec(touch, {"n": n}) for n in range(4)])
    await app.enqueue(explode)
    port = free_port()
    proc = start_worker(app, tmp_path, "--metrics-port", str(port))
    try:
        completed = executions_of("touch", "completed")
        failed = executions_of("explode", "failed")
        scheduled = ("sweepq_queue_scheduled", labels(messaging_destination_name="later"))
        found = await scrape_until(port, proc, [completed, failed, scheduled])

        async def all_counted() -> bool:  # the last outcomes are counted as they are decided
            nonlocal found
            found = await anyio.to_thread.run_sync(scrape, port)
            return found[completed] >= 4 and found[failed] >= 1

        await wait_until(all_counted, timeout=30, what="every execution counted", every=0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = await finish(proc)
    assert proc.returncode == 0, err
    assert (found[completed], found[failed], found[scheduled]) == (4, 1, 1)
    touch_count = ("sweepq_job_duration_seconds_count", labels(sweepq_task="touch"))
    assert found[touch_count] == 4
    waits = ("sweepq_job_wait_time_seconds_count", labels(messaging_destination_name="default"))
    assert found[waits] == 5
    names = {name for name, _ in found}
    assert {
        "sweepq_queue_depth",
        "sweepq_queue_running",
        "sweepq_queue_oldest_age_seconds",
    } <= names
    assert f"metrics_port     = http://0.0.0.0:{port}/metrics  (--metrics-port)" in out


async def test_the_metrics_port_comes_from_its_variable_and_is_checked(
    app: sweepq.App, tmp_path: Path
) -> None:
    proc = start_worker(app, tmp_path, SWEEPQ_METRICS_PORT="70000")
    _, err = await finish(proc)
    assert proc.returncode == 2
    assert (
        "error: metrics_port must be from 1 to 65535, got 70000 (from SWEEPQ_METRICS_PORT)" in err
    )
    proc = start_worker(app, tmp_path, "--metrics-port", "http")
    _, err = await finish(proc)
    assert proc.returncode == 2
    assert "error: --metrics-port 'http' is not valid: expected a port number" in err


async def test_the_metrics_port_without_the_otel_extra_names_the_extra_to_install(
    app: sweepq.App, tmp_path: Path
) -> None:
    # The worker's folder comes first on its sys.path: this stands in for a missing package.
    (tmp_path / "prometheus_client.py").write_text(
        "raise ImportError(\"No module named 'prometheus_client'\")\n"
    )
    proc = start_worker(app, tmp_path, "--metrics-port", str(free_port()))
    _, err = await finish(proc)
    assert proc.returncode == 2
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert line.startswith("error: --metrics-port needs the otel extra")
    assert line.endswith("pip install 'sweepq[otel]'")
