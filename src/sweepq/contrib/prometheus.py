"""A Prometheus endpoint for an App's metrics, through OpenTelemetry (the `otel` extra): what
`sweepq worker --metrics-port` serves.

The command line finds `serve` through its `metrics` entry point (group `sweepq.cli`), so that
it never imports this integration; importing this module without the extra raises ImportError.
"""

from __future__ import annotations

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import start_http_server

from sweepq.core.app import App

from .otel import QueueSampler, instrument

__all__ = ["serve"]


def serve(app: App, *, port: int, address: str) -> QueueSampler:
    """Report `app`'s events (`instrument`) and its queues at http://address:port/metrics.

    The endpoint has a meter provider of its own: it shows sweepq's metrics whatever the
    program set globally. Spans go to the global tracer provider, if the program set one.

    Returns:
        The queue sampler that feeds the endpoint's queue gauges, to run beside the worker.

    Raises:
        OSError: the port cannot be served.
    """
    start_http_server(port, addr=address)
    provider = MeterProvider(metric_readers=[PrometheusMetricReader()])
    instrument(app, meter_provider=provider)
    return QueueSampler(app, meter_provider=provider)
