"""The worker's settings, checked once by `WorkerConfig`: what cannot work is refused when a
`Worker` or a config is built, and a config resolves its defaults once.
"""

from __future__ import annotations

import dataclasses
import math
import re
from datetime import timedelta
from typing import Any

import pytest

import sweepq
from sweepq.core.worker import WorkerConfig


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"lease_seconds": 1.0, "heartbeat_seconds": 0.6}, "shorter than two heartbeats"),
        ({"concurrency": 0}, "concurrency must be an int >= 1"),
        ({"poll_seconds": 0}, "poll_seconds must be a finite number of seconds >= 0.01"),
        ({"poll_seconds": 1e-9}, "poll_seconds must be a finite number of seconds >= 0.01"),
        ({"lease_seconds": math.inf}, "lease_seconds must be a finite number of seconds"),
        ({"lease_seconds": 1e-9}, "lease_seconds must be a finite number of seconds >= 0.5"),
        ({"lease_seconds": "30"}, "lease_seconds must be a finite number of seconds"),
        ({"grace_seconds": math.nan}, "grace_seconds must be a finite number of seconds"),
        ({"grace_seconds": -1}, "grace_seconds must be a finite number of seconds >= 0"),
        ({"heartbeat_seconds": math.nan}, "heartbeat_seconds must be a finite number"),
        ({"maintenance_seconds": math.inf}, "maintenance_seconds must be a finite number"),
        ({"prune_every": timedelta(0)}, "prune_every must be a timedelta of 1 s to 36,525 days"),
        ({"prune_every": 3600}, "prune_every must be a timedelta"),
        ({"prune_older_than": timedelta(days=-1)}, "prune_older_than must be a timedelta"),
        ({"queues": "default"}, "a list of queue names, not a string"),
        ({"queues": []}, "at least one queue"),
    ],
)
def test_worker_settings_that_cannot_work_are_refused_at_construction(
    dsn: str, options: dict[str, Any], says: str
) -> None:
    app = sweepq.App(dsn, schema="sweepq_unused")
    with pytest.raises(sweepq.ConfigurationError, match=re.escape(says)):
        sweepq.Worker(app, **options)
    # The checks are the config's, made once: the command line builds one too.
    with pytest.raises(sweepq.ConfigurationError, match=re.escape(says)):
        WorkerConfig(**options)


def test_a_worker_config_resolves_its_defaults_once_and_cannot_change(dsn: str) -> None:
    config = WorkerConfig(queues=["a", "a", "b"], concurrency=4, threads=9, lease_seconds=6)
    assert (config.queues, config.threads, config.heartbeat_seconds) == (("a", "b"), 4, 2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.concurrency = 5  # type: ignore[misc]
    worker = sweepq.Worker.from_config(sweepq.App(dsn, schema="sweepq_unused"), config)
    assert (worker.queues, worker.concurrency, worker.threads) == (["a", "b"], 4, 4)
    assert (worker.lease_seconds, worker.heartbeat_seconds) == (6.0, 2.0)
