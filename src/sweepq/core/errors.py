"""Errors raised by sweepq.

Every error derives from `SweepqError`, and its message says what to do next. Permanent errors
(a mistake to fix) are kept apart from transient ones (the same call may succeed if repeated)::

    SweepqError
    ├── ConfigurationError          settings that cannot work (no DSN, lease vs heartbeat, ...)
    ├── InvalidIdentifierError      a schema/queue/table/column name that is not a plain identifier
    ├── UnknownTaskError            enqueue of a task no handler is registered for
    ├── InvalidArgumentsError       args that do not match the handler, are not JSON, or too big
    ├── InvalidJobOptionError       negative delay, unique_for without identity_key, ...
    │   └── GroupClosedError        enqueue into a group that App.close_group closed
    ├── InvalidResultError          a handler's return value that is not JSON, or too big
    ├── UnknownJobError             waiting for a job that does not exist (or was pruned)
    ├── DuplicateTaskError          two handlers registered under one task name
    ├── DuplicateJobError           enqueue_many(on_duplicate="raise") met a job already there
    ├── MigrationError              the database schema is newer than this sweepq, or unusable
    │   └── SchemaNotMigratedError  the schema is missing, or behind this sweepq: run migrate
    └── TransientError              safe to retry: the same call may succeed
        ├── DatabaseUnavailableError  PostgreSQL could not be reached (also a ConnectionError)
        └── DedupRaceError            concurrent enqueuers of the same keys kept colliding

The sweeps layer adds its own subtree under `SweepError` (see `sweepq.sweeps.errors`). Handler
outcomes (`Snooze`, `RetryAfter`, `Cancel`) are not errors of sweepq; they live in
`sweepq.core.decision`, which decides what each does to the job.
"""

from __future__ import annotations

from collections.abc import Iterable


class SweepqError(Exception):
    """The root of every error sweepq raises."""


def _shown(value: object) -> str:
    """`repr(value)`, shortened: a message stays one readable line whatever it names."""
    shown = repr(value)
    return shown if len(shown) <= 80 else f"{shown[:60]}...({len(shown):,} characters)"


def not_registered(kind: str, shown: str, known: list[str], fix: str) -> str:
    """The message of a name looked up among the registered ones and not found: `no task
    named 'x' is registered (known: a, b); register it ...`."""
    listed = ", ".join(known) if known else "none"
    return f"no {kind} named {shown} is registered (known: {listed}); {fix}"


class ConfigurationError(SweepqError):
    """Settings that cannot work together, or a setting that is missing."""


class InvalidIdentifierError(SweepqError, ValueError):
    """A name used as an SQL identifier is not a plain identifier."""

    def __init__(self, what: str, value: object, rule: str | None = None) -> None:
        self.what = what
        self.value = value
        rule = rule or (
            "use 1-63 letters, digits and underscores, not starting with a digit"
            " (a table may be qualified: 'schema.table')"
        )
        super().__init__(f"{what} {_shown(value)} is not valid: {rule}")


class UnknownTaskError(SweepqError, LookupError):
    """No handler is registered under this task name."""

    def __init__(self, task: str, known: Iterable[str]) -> None:
        self.task = task
        self.known = sorted(known)
        fix = "register it with @app.task before enqueueing it"
        super().__init__(not_registered("task", _shown(task), self.known, fix))


class DuplicateJobError(SweepqError):
    """`enqueue_many(..., on_duplicate="raise")` met a job that its keys say exists already
    (or two jobs of the call with one key). Nothing of the call was written; an enqueue inside
    your own transaction leaves it failed: roll it back.

    Attributes:
        key: the key that collided, as PostgreSQL or the dedup step reported it.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            f"a job with the same key exists already ({key}); nothing was enqueued by this "
            "call. Leave out on_duplicate='raise' to be told which jobs exist instead"
        )


class DuplicateTaskError(SweepqError):
    """Two handlers were registered under one task name."""

    def __init__(self, task: str) -> None:
        self.task = task
        super().__init__(
            f"a task named {task!r} is already registered; pass a distinct name= to @app.task"
        )


class InvalidArgumentsError(SweepqError, ValueError):
    """Job arguments that the handler cannot accept or that cannot be stored as JSON."""

    def __init__(self, task: str, problem: str) -> None:
        self.task = task
        self.problem = problem
        super().__init__(f"invalid arguments for task {task!r}: {problem}")


class InvalidJobOptionError(SweepqError, ValueError):
    """An enqueue option that cannot be honoured."""


class GroupClosedError(InvalidJobOptionError):
    """An enqueue into a group that `App.close_group` closed: the group takes no more jobs.

    Nothing of the call was written (one job of a closed group refuses the whole call); an
    enqueue inside your own transaction leaves it failed: roll it back. The SQL enqueue function
    and any other insert into the jobs table are refused the same way, with SQLSTATE `55SQ1`
    and the group's name as the error's DETAIL.

    Attributes:
        group: the closed group.
    """

    def __init__(self, group: str) -> None:
        self.group = group
        super().__init__(
            f"group {_shown(group)} is closed (App.close_group): it takes no more jobs, and "
            "nothing of this call was enqueued; enqueue into another group, or reopen it first "
            f"with app.reopen_group({_shown(group)})"
        )


class InvalidResultError(SweepqError, ValueError):
    """A handler returned a value that cannot be stored as its job's result: not JSON, or
    larger than the App's `result_max_bytes`.

    The worker fails that execution as if the handler had raised this error: it is retried as
    the task's retry policy says (which may discard it), and its message is in the job's errors.
    """

    def __init__(self, task: str, problem: str) -> None:
        self.task = task
        self.problem = problem
        super().__init__(f"the return value of task {task!r} cannot be its job's result: {problem}")


class UnknownJobError(SweepqError, LookupError):
    """No job has this id: it never existed, or retention removed it after it finished."""

    def __init__(self, job_id: int, schema: str) -> None:
        self.job_id = job_id
        self.schema = schema
        super().__init__(
            f"no job {job_id} in schema {schema!r}: it never existed, or retention pruned it "
            "after it finished; check the id (and the App's schema)"
        )


class MigrationError(SweepqError):
    """The schema cannot be migrated or is newer than this version of sweepq."""


class SchemaNotMigratedError(MigrationError):
    """The schema does not exist, or lacks migrations this version of sweepq needs."""

    def __init__(self, schema: str, where: str, pending: list[str]) -> None:
        self.schema = schema
        self.pending = pending
        missing = any(label.startswith("core/0001") for label in pending)
        state = "is not migrated" if missing else "is behind this version of sweepq"
        shown = ", ".join(pending[:3]) + (
            f" and {len(pending) - 3} more" if len(pending) > 3 else ""
        )
        super().__init__(
            f"schema {schema!r} at {where} {state} ({len(pending)} migration(s) pending: "
            f"{shown}): run `sweepq migrate --schema {schema}` (or `await app.migrate()`)"
        )


class TransientError(SweepqError):
    """The call failed for a reason that may be gone when it is repeated: retry it."""


class DatabaseUnavailableError(TransientError, ConnectionError):
    """sweepq could not reach PostgreSQL: it is down, restarting, or unreachable.

    Raised by the app's calls (enqueue, get_job, ...) when the connection to the database is
    refused or lost. It is also a `ConnectionError`. A handler that lets it propagate is handed
    back to the queue without an attempt charged: the database went away, not the handler.
    """

    def __init__(self, where: str, cause: BaseException) -> None:
        self.where = where
        self.cause = cause
        detail = str(cause).strip() or type(cause).__name__
        super().__init__(
            f"cannot reach PostgreSQL at {where} ({detail}); check that it is running and "
            "reachable, then try again"
        )


class DedupRaceError(TransientError):
    """Enqueuers of the same idempotency or identity keys kept colliding.

    Retrying the enqueue is safe: jobs of the call that were created are found again by their
    keys.
    """

    def __init__(self, jobs: int, rounds: int) -> None:
        self.jobs = jobs
        super().__init__(
            f"could not settle dedup for {jobs} job(s) after {rounds} rounds of racing "
            "enqueuers (each round found the job it collided with already gone); retry the enqueue"
        )
