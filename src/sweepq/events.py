"""What observers registered with `App.observe` hear: the core's events of executions
(`sweepq.core.events`) and the sweeps' events of runs (`sweepq.sweeps.events`)."""

from .core.events import JobClaimed, JobFinished, JobStarted
from .sweeps.events import (
    Event,
    Observer,
    SweepLinkCommitted,
    SweepRunEnded,
    SweepThrottled,
)

__all__ = [
    "Event",
    "JobClaimed",
    "JobFinished",
    "JobStarted",
    "Observer",
    "SweepLinkCommitted",
    "SweepRunEnded",
    "SweepThrottled",
]
