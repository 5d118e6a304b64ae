"""What observers registered with `App.observe` hear: see `sweepq.core.events`."""

from .core.events import (
    Event,
    JobClaimed,
    JobFinished,
    JobStarted,
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
