"""Enqueueing: checking job specs, inserting them in one statement, and telling dedup's truth.

Dedup is done by the database: `ON CONFLICT DO NOTHING` against the idempotency index (forever)
and the active-identity index ("start if not already running"). `unique_for` additionally refuses
a second job of an identity created within the window, under a transaction-scoped advisory lock
per identity so that concurrent enqueuers serialize.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Unpack

import msgspec

from . import options as _options
from .errors import DedupRaceError, InvalidJobOptionError
from .jobs import Enqueued, EnqueueOutcome, JobId
from .options import JobOptions
from .queries import Conn, Queries
from .tasks import Task

logger = logging.getLogger("sweepq")

_ACTIVE = frozenset({"available", "running"})
_DEDUP_ROUNDS = 5


class JobSpec:
    """One job for `App.enqueue_many`: a task (object or name), its args, and enqueue options.

    The options mean what they mean for `App.enqueue`; `None` means the task's default.

    Args:
        task: a `Task` or a registered task name.
        args: the handler's keyword arguments (dict or msgspec Struct), JSON values.
        **options: the same options as `App.enqueue` (all but `conn`, which belongs to the
            call).

    Raises:
        InvalidJobOptionError: an option name `enqueue` does not know.

    Example:
        >>> sweepq.JobSpec(send_email, {"to": "a@example.com"}, idempotency_key="k2")
    """

    __slots__ = ("args", "options", "task")

    def __init__(
        self,
        task: Task | str,
        args: Mapping[str, Any] | msgspec.Struct | None = None,
        **options: Unpack[JobOptions],
    ) -> None:
        _options.check_names(options)
        self.task = task
        self.args = args
        self.options = options

    def __repr__(self) -> str:
        task = self.task.name if isinstance(self.task, Task) else self.task
        shown = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return f"JobSpec({task!r}, {self.args!r}{shown})"


class Rows:
    """What `job_insert` takes: per job its task, its args and each sent option, as columns."""

    __slots__ = ("columns", "windows")

    def __init__(self, columns: dict[str, list[Any]], windows: list[float | None]) -> None:
        self.columns = columns  # task, args, then the sent options in declaration order
        self.windows = windows  # per job, its unique_for window in seconds (or None)

    def __len__(self) -> int:
        return len(self.windows)

    def take(self, positions: Sequence[int]) -> Rows:
        return Rows(
            {name: [values[i] for i in positions] for name, values in self.columns.items()},
            [self.windows[i] for i in positions],
        )


def job_specs(specs: object) -> list[JobSpec]:
    """Check the argument of `App.enqueue_many`: a list (or tuple) of JobSpec."""
    if isinstance(specs, list | tuple):
        strays = [type(s).__name__ for s in specs if not isinstance(s, JobSpec)]
        if not strays:
            return list(specs)
        got = f"a {type(specs).__name__} holding {strays[0]}"
    else:
        got = type(specs).__name__
    raise InvalidJobOptionError(
        f"enqueue_many takes a list of sweepq.JobSpec, got {got}; wrap each job in "
        "sweepq.JobSpec(task, args, ...)"
    )


def build_rows(
    specs: Sequence[JobSpec], lookup: Any, trace: Callable[[], str | None] | None = None
) -> Rows:
    """Check every spec and lay them out as insert columns; nothing is written if one is bad.

    `trace` gives the caller's trace context, for the jobs that do not pass `trace_context`.
    """
    names = ["task", "args", *(o.name for o in _options.SENT)]
    columns: dict[str, list[Any]] = {name: [] for name in names}
    appends = [(name, columns[name].append) for name in names]
    windows: list[float | None] = []
    current = trace() if trace is not None else None
    for spec in specs:
        task: Task = lookup(spec.task)
        values = _options.resolve(spec.options, task)
        if current is not None and values["trace_context"] is None:
            values["trace_context"] = current
        values["task"], values["args"] = task.name, task.encode_args(spec.args)
        for name, append in appends:
            append(values[name])
        windows.append(values["unique_for"])
    return Rows(columns, windows)


async def insert(queries: Queries, conn: Conn, rows: Rows) -> list[Enqueued]:
    """Insert `rows` on `conn` (in a transaction when unique_for is used); results in order."""
    count = len(rows)
    column = rows.columns
    results: list[Enqueued | None] = [None] * count
    if any(w is not None for w in rows.windows):
        # Lock, then read in a new statement: its snapshot sees every job committed before
        # we held the lock.
        positions = [i for i, w in enumerate(rows.windows) if w is not None]
        identities = [column["identity_key"][i] or "" for i in positions]
        await queries.job_identity_lock(conn, identities)
        recent = await queries.job_identity_recent(
            conn, identities, [rows.windows[i] or 0.0 for i in positions]
        )
        for ordinal, (job_id, state) in recent.items():
            position = positions[ordinal - 1]
            results[position] = _existing(job_id, state, "identity", rows, position)
    todo = [i for i in range(count) if results[i] is None]
    for _ in range(_DEDUP_ROUNDS):
        if not todo:
            break
        subset = rows if len(todo) == count else rows.take(todo)
        inserted = await queries.job_insert(conn, list(subset.columns.values()))
        conflicted = [todo[n] for n, (_, created) in enumerate(inserted) if not created]
        for n, (job_id, created) in enumerate(inserted):
            if created:
                results[todo[n]] = Enqueued(job_id, "created")
        todo = []
        if not conflicted:
            break
        # A new statement sees the committed job we collided with.
        found = await queries.job_find_duplicates(
            conn,
            *([column[name][i] for i in conflicted] for name in _DEDUP_COLUMNS),
        )
        for position, (holder, holder_state) in zip(conflicted, found, strict=True):
            if holder is None or holder_state is None:
                todo.append(position)  # the active job it collided with has finished: again
            else:
                results[position] = _existing(holder, holder_state, "key", rows, position)
    if todo:
        raise DedupRaceError(len(todo), _DEDUP_ROUNDS)
    return [r for r in results if r is not None]


_DEDUP_COLUMNS = ("idempotency_scope", "idempotency_key", "identity_key")


def _existing(job_id: JobId, state: str, by: str, rows: Rows, position: int) -> Enqueued:
    outcome: EnqueueOutcome = "existing_active" if state in _ACTIVE else "existing_terminal"
    if outcome == "existing_terminal":
        column = rows.columns
        key = column["idempotency_key"][position]
        logger.warning(
            "enqueue deduplicated against terminal job %s (state %s, task %s, %s); "
            "no new job was created",
            job_id,
            state,
            column["task"][position],
            f"idempotency_key={key!r}"
            if by == "key" and key is not None
            else f"identity_key={column['identity_key'][position]!r}",
        )
    return Enqueued(job_id, outcome)
