"""sweepq: a durable job queue for Python on PostgreSQL, with sweeps."""

from importlib.metadata import PackageNotFoundError, version

from . import backoff as backoff  # sweepq.backoff: ready-made retry backoffs
from . import events as events  # sweepq.events: what observers hear
from .core.app import JobSpec
from .core.context import Context
from .core.decision import Cancel, RetryAfter, Snooze
from .core.errors import (
    ConfigurationError,
    DatabaseUnavailableError,
    DuplicateJobError,
    DuplicateTaskError,
    GroupClosedError,
    InvalidArgumentsError,
    InvalidIdentifierError,
    InvalidJobOptionError,
    InvalidResultError,
    MigrationError,
    SchemaNotMigratedError,
    SweepqError,
    UnknownJobError,
    UnknownTaskError,
)
from .core.jobs import (
    Enqueued,
    GroupClosure,
    GroupCounts,
    GroupProgress,
    Job,
    JobError,
    JobId,
    JobState,
)
from .core.queues import QueuePause, QueueState
from .core.retry import RetryPolicy
from .core.tasks import Task
from .core.worker import Worker
from .sweeps.app import App
from .sweeps.errors import InvalidSweepError, SweepError, UnknownSweepError
from .sweeps.runs import SweepFailure, SweepRun, SweepStarted, SweepState
from .sweeps.sweep import Sweep
from .sweeps.table import TableSweep

try:  # the version has one source: the package's metadata, from pyproject.toml
    __version__ = version("sweepq")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "App",
    "Cancel",
    "ConfigurationError",
    "Context",
    "DatabaseUnavailableError",
    "DuplicateJobError",
    "DuplicateTaskError",
    "Enqueued",
    "GroupClosedError",
    "GroupClosure",
    "GroupCounts",
    "GroupProgress",
    "InvalidArgumentsError",
    "InvalidIdentifierError",
    "InvalidJobOptionError",
    "InvalidResultError",
    "InvalidSweepError",
    "Job",
    "JobError",
    "JobId",
    "JobSpec",
    "JobState",
    "MigrationError",
    "QueuePause",
    "QueueState",
    "RetryAfter",
    "RetryPolicy",
    "SchemaNotMigratedError",
    "Snooze",
    "Sweep",
    "SweepError",
    "SweepFailure",
    "SweepRun",
    "SweepStarted",
    "SweepState",
    "SweepqError",
    "TableSweep",
    "Task",
    "UnknownJobError",
    "UnknownSweepError",
    "UnknownTaskError",
    "Worker",
]
