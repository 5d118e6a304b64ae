"""Enqueueing: checking job specs, inserting them in one statement, and telling dedup's truth.

Dedup is done by the database: `ON CONFLICT DO NOTHING` against the idempotency index (forever)
and the active-identity index ("start if not already running"). `unique_for` additionally refuses
a second job of an identity created within the window, under a transaction-scoped advisory lock
per identity so that concurrent enqueuers serialize.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import msgspec

from .checks import idempotency, int_in, optional_seconds, optional_text, run_at
from .errors import InvalidJobOptionError
from .ident import queue_name
from .jobs import Enqueued, EnqueueOutcome, JobId
from .queries import Conn, InsertRows, Queries
from .tasks import MAX_ATTEMPTS_RANGE, PRIORITY_RANGE, Task

logger = logging.getLogger("sweepq")

_ACTIVE = frozenset({"available", "running"})
_DEDUP_ROUNDS = 5


class _Spec(msgspec.Struct):
    task: Task | str
    args: Mapping[str, Any] | msgspec.Struct | None = None


class JobSpec(_Spec, kw_only=True):
    """One job for `App.enqueue_many`: a task (object or name), its args, and enqueue options.

    The options mean what they mean for `App.enqueue`; `None` means the task's default.
    """

    queue: str | None = None
    priority: int | None = None
    delay: timedelta | float | None = None
    run_at: datetime | None = None
    max_attempts: int | None = None
    idempotency_key: str | None = None
    idempotency_scope: str = ""
    identity_key: str | None = None
    unique_for: timedelta | float | None = None
    deadline: timedelta | float | None = None
    concurrency_key: str | None = None


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
    specs: Sequence[JobSpec], tasks: Mapping[str, Task], lookup: Any
) -> tuple[InsertRows, list[float | None]]:
    """Check every spec and lay them out as insert columns; nothing is written if one is bad.

    Returns the rows and, per row, its unique_for window in seconds (or None).
    """
    rows = InsertRows()
    windows: list[float | None] = []
    for spec in specs:
        _check_spec(spec, lookup(spec.task), rows)
        if spec.unique_for is not None and spec.identity_key is None:
            raise InvalidJobOptionError(
                "unique_for needs identity_key: it widens 'one active job per identity' to "
                "'one job per identity within the window'; pass identity_key=... as well"
            )
        windows.append(optional_seconds(spec.unique_for, "unique_for"))
    return rows, windows


def _check_spec(spec: JobSpec, task: Task, rows: InsertRows) -> None:
    """Check one spec's options and append them to `rows`."""
    rows.task.append(task.name)
    rows.args.append(task.encode_args(spec.args))
    rows.queue.append(task.queue if spec.queue is None else queue_name(spec.queue))
    priority = task.priority if spec.priority is None else spec.priority
    rows.priority.append(int_in(priority, "priority", PRIORITY_RANGE))
    attempts = task.max_attempts if spec.max_attempts is None else spec.max_attempts
    rows.max_attempts.append(int_in(attempts, "max_attempts", MAX_ATTEMPTS_RANGE))
    if spec.delay is not None and spec.run_at is not None:
        raise InvalidJobOptionError("pass delay or run_at, not both")
    rows.delay.append(optional_seconds(spec.delay, "delay", allow_zero=True))
    rows.run_at.append(run_at(spec.run_at))
    rows.deadline.append(optional_seconds(spec.deadline, "deadline"))
    scope, key = idempotency(spec.idempotency_scope, spec.idempotency_key)
    rows.idempotency_scope.append(scope)
    rows.idempotency_key.append(key)
    rows.identity_key.append(optional_text(spec.identity_key, "identity_key"))
    rows.concurrency_key.append(optional_text(spec.concurrency_key, "concurrency_key"))


async def insert(
    queries: Queries, conn: Conn, rows: InsertRows, windows: Sequence[float | None]
) -> list[Enqueued]:
    """Insert `rows` on `conn` (in a transaction when unique_for is used); results in order."""
    count = len(rows.task)
    results: list[Enqueued | None] = [None] * count
    if any(w is not None for w in windows):
        # Lock, then read in a new statement: its snapshot sees every job committed before
        # we held the lock.
        positions = [i for i, w in enumerate(windows) if w is not None]
        identities = [rows.identity_key[i] or "" for i in positions]
        await queries.job_identity_lock(conn, identities)
        recent = await queries.job_identity_recent(
            conn, identities, [windows[i] or 0.0 for i in positions]
        )
        for ordinal, (job_id, state) in recent.items():
            position = positions[ordinal - 1]
            results[position] = _existing(job_id, state, "identity", rows, position)
    todo = [i for i in range(count) if results[i] is None]
    for _ in range(_DEDUP_ROUNDS):
        if not todo:
            break
        subset = rows if len(todo) == count else _take(rows, todo)
        inserted = await queries.job_insert(conn, subset)
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
            [rows.idempotency_scope[i] for i in conflicted],
            [rows.idempotency_key[i] for i in conflicted],
            [rows.identity_key[i] for i in conflicted],
        )
        for position, (holder, holder_state) in zip(conflicted, found, strict=True):
            if holder is None or holder_state is None:
                todo.append(position)  # the active job it collided with has finished: again
            else:
                results[position] = _existing(holder, holder_state, "key", rows, position)
    if todo:
        raise InvalidJobOptionError(
            f"could not settle dedup for {len(todo)} job(s) after {_DEDUP_ROUNDS} rounds of "
            "racing enqueuers; retry the enqueue"
        )
    return [r for r in results if r is not None]


def _existing(job_id: JobId, state: str, by: str, rows: InsertRows, position: int) -> Enqueued:
    outcome: EnqueueOutcome = "existing_active" if state in _ACTIVE else "existing_terminal"
    if outcome == "existing_terminal":
        logger.warning(
            "enqueue deduplicated against terminal job %s (state %s, task %s, %s); "
            "no new job was created",
            job_id,
            state,
            rows.task[position],
            f"idempotency_key={rows.idempotency_key[position]!r}"
            if by == "key" and rows.idempotency_key[position] is not None
            else f"identity_key={rows.identity_key[position]!r}",
        )
    return Enqueued(job_id, outcome)


def _take(rows: InsertRows, positions: Sequence[int]) -> InsertRows:
    return InsertRows(
        **{
            field: [getattr(rows, field)[i] for i in positions]
            for field in InsertRows.__struct_fields__
        }
    )
