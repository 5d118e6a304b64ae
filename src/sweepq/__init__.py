"""sweepq: a durable job queue for Python on PostgreSQL, with sweeps."""

from .core.app import App, JobSpec
from .core.context import Context
from .core.errors import (
    ConfigurationError,
    DuplicateTaskError,
    InvalidArgumentsError,
    InvalidIdentifierError,
    InvalidJobOptionError,
    MigrationError,
    SweepqError,
    UnknownTaskError,
)
from .core.jobs import Enqueued, Job, JobError, JobId, JobState
from .core.outcomes import Cancel, RetryAfter, Snooze
from .core.tasks import Task
from .core.worker import Worker

__all__ = [
    "App",
    "Cancel",
    "ConfigurationError",
    "Context",
    "DuplicateTaskError",
    "Enqueued",
    "InvalidArgumentsError",
    "InvalidIdentifierError",
    "InvalidJobOptionError",
    "Job",
    "JobError",
    "JobId",
    "JobSpec",
    "JobState",
    "MigrationError",
    "RetryAfter",
    "Snooze",
    "SweepqError",
    "Task",
    "UnknownTaskError",
    "Worker",
]
