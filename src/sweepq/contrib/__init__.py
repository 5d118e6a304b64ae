"""Integrations built on sweepq's public API, each behind an extra of its own.

- `sweepq.contrib.otel` (`pip install 'sweepq[otel]'`): OpenTelemetry spans and metrics from
  the events (`App.observe`), and gauges of the queues read from the database.

Each is imported by its own name; importing `sweepq.contrib` alone imports none of them.
"""

__all__: list[str] = []
