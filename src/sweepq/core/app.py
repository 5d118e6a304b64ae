"""The names the worker, the admin, the CLI and the integrations import for the core's app.

The core's app is `Queue` (`core/queue.py`); `App` here is that class under the name those
modules use. The public `sweepq.App` (`sweeps/app.py`) is the core's app with the sweeps layer.
"""

from __future__ import annotations

from .dsn import DEFAULT_SCHEMA as DEFAULT_SCHEMA
from .enqueue import JobSpec as JobSpec  # re-exported: sweepq.JobSpec
from .queue import Queue

App = Queue

__all__ = ["DEFAULT_SCHEMA", "App", "JobSpec", "Queue"]
