"""Integrations built on sweepq's public API, each behind an extra of its own.

- `sweepq.contrib.otel` (`pip install 'sweepq[otel]'`): OpenTelemetry spans and metrics from
  the events (`App.observe`), and gauges of the queues read from the database.
- `sweepq.contrib.django` (`pip install 'sweepq[django]'`, Django 6+): a backend for Django's
  tasks framework, its workers (`manage.py sweepq_worker`), results and waits.

Each is imported by its own name; importing `sweepq.contrib` alone imports none of them.
"""

__all__: list[str] = []
