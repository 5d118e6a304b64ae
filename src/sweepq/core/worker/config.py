"""The worker's settings, checked once: `WorkerConfig`.

`Worker(app, ...)` builds one from its keyword options, and the command line (`sweepq worker`)
builds one from its options and variables; either way a setting that cannot work is refused here,
with one message (`ConfigurationError`) that names the setting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from ..errors import ConfigurationError
from ..ident import queue_name

# The bounds of the worker's time settings, in seconds: below the least, a loop would spin or a
# lease would lapse between two statements; above the most, a setting is a mistake (a lease of a
# week keeps a dead worker's jobs for a week) or past what the database's intervals can hold.
LEAST_SECONDS = {
    "lease_seconds": 0.5,
    "heartbeat_seconds": 0.1,
    "poll_seconds": 0.01,
    "grace_seconds": 0.0,
    "maintenance_seconds": 0.01,
    "leader_ttl_seconds": 0.02,
}
MOST_SECONDS = 86_400.0
MOST_SPAN = timedelta(days=36_525)
PRUNE_EVERY_LEAST = timedelta(seconds=1)


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """A worker's settings, each checked when the config is made (see `sweepq.Worker` for what
    each one does). `threads` and `heartbeat_seconds` left None are resolved here: one thread per
    slot (never more threads than slots), a heartbeat a third of the lease.

    Raises:
        ConfigurationError: a setting out of its bounds, or settings that cannot work together
            (a lease under two heartbeats).
    """

    queues: Sequence[str] = ("default",)
    concurrency: int = 10
    threads: int | None = None
    lease_seconds: float = 30.0
    heartbeat_seconds: float | None = None
    poll_seconds: float = 1.0
    grace_seconds: float = 30.0
    maintenance_seconds: float = 1.0
    leader_ttl_seconds: float = 10.0
    prune_every: timedelta | None = timedelta(hours=1)
    prune_older_than: timedelta = timedelta(days=7)
    listen: bool = True

    def __post_init__(self) -> None:
        queues = self.queues
        if isinstance(queues, str):
            raise ConfigurationError("queues must be a list of queue names, not a string")
        if not queues:
            raise ConfigurationError("a worker needs at least one queue")
        names = tuple(dict.fromkeys(queue_name(q) for q in queues))
        concurrency = _check_count("concurrency", self.concurrency)
        threads = _check_count("threads", concurrency if self.threads is None else self.threads)
        lease = _check_seconds("lease_seconds", self.lease_seconds)
        heartbeat = lease / 3 if self.heartbeat_seconds is None else self.heartbeat_seconds
        heartbeat = _check_seconds("heartbeat_seconds", heartbeat)
        checked = {
            "queues": names,
            "concurrency": concurrency,
            "threads": min(threads, concurrency),
            "lease_seconds": lease,
            "heartbeat_seconds": heartbeat,
            "poll_seconds": _check_seconds("poll_seconds", self.poll_seconds),
            "grace_seconds": _check_seconds("grace_seconds", self.grace_seconds),
            "maintenance_seconds": _check_seconds("maintenance_seconds", self.maintenance_seconds),
            "leader_ttl_seconds": _check_seconds("leader_ttl_seconds", self.leader_ttl_seconds),
        }
        if self.prune_every is not None:
            _check_period("prune_every", self.prune_every, PRUNE_EVERY_LEAST)
        _check_period("prune_older_than", self.prune_older_than, timedelta(0))
        if lease < 2 * heartbeat:
            raise ConfigurationError(
                f"lease_seconds={lease:g} is shorter than two heartbeats "
                f"(heartbeat_seconds={heartbeat:g}): one late heartbeat would lose "
                "every lease; use a lease of at least 2x (default 3x) the heartbeat"
            )
        for name, value in checked.items():
            object.__setattr__(self, name, value)


def _check_count(label: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{label} must be an int >= 1, got {value!r}")
    return value


def _check_seconds(label: str, value: object) -> float:
    """A time setting: a finite number of seconds within its bounds."""
    lowest = LEAST_SECONDS[label]
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and lowest <= value <= MOST_SECONDS  # NaN fails both comparisons
    ):
        return float(value)
    raise ConfigurationError(
        f"{label} must be a finite number of seconds >= {lowest:g} and at most "
        f"{MOST_SECONDS:,.0f} (a day), got {value!r}"
    )


def _check_period(label: str, value: object, lowest: timedelta) -> None:
    if not isinstance(value, timedelta) or not lowest <= value <= MOST_SPAN:
        shown = f"{value.total_seconds():g} s" if isinstance(value, timedelta) else repr(value)
        raise ConfigurationError(
            f"{label} must be a timedelta of {lowest.total_seconds():g} s to "
            f"{MOST_SPAN.days:,} days, got {shown}"
        )
