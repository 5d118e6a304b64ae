"""OpenTelemetry for sweepq: a span per execution and metrics from the events, and queue gauges
read from the database. Needs the `otel` extra: `pip install 'sweepq[otel]'`.

`OtelObserver` is an observer (`app.observe(OtelObserver())`): it builds everything it reports
from the events (`sweepq.events`) alone. `QueueSampler` reads each queue's depth with one
statement every `interval` seconds and reports it through observable gauges. See "Events and
metrics" in the operations guide for every metric, its unit and its attributes, and
`docs/examples/ops_otel.py` for both at work.

`observer.py` holds the observer and `instrument`, `sampler.py` the sampler; import the names
from here.
"""

from __future__ import annotations

from .observer import OtelObserver, current_traceparent, instrument
from .sampler import QueueSample, QueueSampler

__all__ = ["OtelObserver", "QueueSample", "QueueSampler", "current_traceparent", "instrument"]
