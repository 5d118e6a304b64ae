"""Integrations the command line runs without importing them: the `sweepq.cli` entry points.

The command line sits below `sweepq.contrib` (contrib > cli > testing > sweeps > core). Where a
command runs an integration, the integration names its function in its distribution's metadata,
under the entry-point group `sweepq.cli`, and the command loads it by that name when asked to:

| name      | what it fills                      | the function                             |
|-----------|------------------------------------|------------------------------------------|
| `django`  | `sweepq worker --django`: the App  | `(alias) -> App`, Django set up for it   |
| `metrics` | `sweepq worker --metrics-port`     | `(app, *, port, address) -> Sampler`     |
| `web`     | `sweepq web`                       | `(dsn, *, host, port, schema, ...)`      |

sweepq declares them for its own integrations (pyproject.toml). Loading one imports its extra's
packages, so a missing extra is an `ImportError`, which the command turns into what to install.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, Protocol

from sweepq.core.errors import ConfigurationError
from sweepq.sweeps.app import App

GROUP = "sweepq.cli"


class Sampler(Protocol):
    """What feeds the metrics endpoint's queue gauges: run beside the worker, stopped before
    the app closes (`sweepq.contrib.otel.QueueSampler`)."""

    async def run(self) -> None: ...

    def stop(self) -> None: ...


class DjangoApp(Protocol):
    def __call__(self, alias: str, /) -> App: ...


class MetricsEndpoint(Protocol):
    def __call__(self, app: App, *, port: int, address: str) -> Sampler: ...


class WebServer(Protocol):
    def __call__(
        self,
        app_or_dsn: str,
        *,
        host: str,
        port: int,
        schema: str,
        read_only: bool,
        base_path: str,
    ) -> None: ...


def django_app() -> DjangoApp:
    """The `django` function: the worker App of a Django project's `TASKS[alias]`.

    Raises:
        ConfigurationError: no such entry point is installed.
        ImportError: its module could not be imported.
    """
    found: DjangoApp = _load("django")
    return found


def metrics_endpoint() -> MetricsEndpoint:
    """The `metrics` function: serve an App's metrics for Prometheus at address:port.

    Raises:
        ConfigurationError: no such entry point is installed.
        ImportError: its module could not be imported (the `otel` extra is missing).
    """
    found: MetricsEndpoint = _load("metrics")
    return found


def web_server() -> WebServer:
    """The `web` function: serve the dashboard of a DSN's database until interrupted.

    Raises:
        ConfigurationError: no such entry point is installed.
        ImportError: its module could not be imported (the `web` extra is missing).
    """
    found: WebServer = _load("web")
    return found


def _load(name: str) -> Any:  # Any: what an entry point names is known by its documented name
    matches = entry_points(group=GROUP, name=name)
    if not matches:
        raise ConfigurationError(
            f"no {name!r} entry point in group {GROUP!r}: sweepq's installed metadata is "
            "incomplete; reinstall sweepq"
        )
    return next(iter(matches)).load()
