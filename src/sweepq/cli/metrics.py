"""`sweepq worker --metrics-port`: the worker's metrics for Prometheus, through OpenTelemetry.

The endpoint serves what `sweepq.contrib.otel` reports (the `otel` extra): the observer's
metrics of this worker's executions and sweeps, and the queue sampler's gauges of the schema. It
is started by the `metrics` entry point (`sweepq.cli.plugins`): the CLI does not import contrib.
"""

from __future__ import annotations

from typing import Annotated

import typer

from sweepq.core.errors import ConfigurationError, SweepqError
from sweepq.sweeps.app import App

from . import plugins
from .common import fail
from .plugins import Sampler
from .settings import Parser, Resolved, env_option, resolve

ADDRESS = "0.0.0.0"  # every interface: a scraper reaches the worker from elsewhere
MetricsPort = Resolved[int | None]

MetricsPortOption = Annotated[
    str | None,
    env_option(
        "--metrics-port",
        envvar="SWEEPQ_METRICS_PORT",
        metavar="PORT",
        help="Serve Prometheus metrics at http://0.0.0.0:PORT/metrics, on every interface "
        "(needs the otel extra; default: SWEEPQ_METRICS_PORT, else none).",
    ),
]


def _port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise ConfigurationError(f"metrics_port must be from 1 to 65535, got {value}")
    return value


def metrics_port(ctx: typer.Context) -> MetricsPort:
    """The port to serve metrics on (None: none) and its source; a bad one ends the command."""
    try:
        return resolve(ctx, "metrics_port", Parser(_port, "a port number"), None)
    except SweepqError as exc:
        fail(str(exc))


def banner_line(port: MetricsPort) -> tuple[str, str, str]:
    shown = "off" if port.value is None else f"http://{ADDRESS}:{port.value}/metrics"
    return ("metrics_port", shown, port.source)


def serve_metrics(app: App, port: int) -> Sampler:
    """Report `app`'s events and queues to a Prometheus endpoint on `port` (the `metrics` entry
    point: `sweepq.contrib.prometheus.serve`).

    Returns the queue sampler that feeds the endpoint's queue gauges, to run beside the worker.
    A missing `otel` extra, or a port that cannot be served, ends the command with one line.
    """
    try:
        serve = plugins.metrics_endpoint()
    except ImportError as exc:
        fail(f"--metrics-port needs the otel extra ({exc}): pip install 'sweepq[otel]'")
    except ConfigurationError as exc:
        fail(f"--metrics-port: {exc}")
    try:
        return serve(app, port=port, address=ADDRESS)
    except OSError as exc:
        fail(f"cannot serve metrics on {ADDRESS}:{port}: {exc.strerror or exc}")
