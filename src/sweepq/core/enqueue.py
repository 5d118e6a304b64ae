"""Enqueueing: checking job specs, writing them, and telling dedup's truth.

A job with no key is written by one short INSERT (alone) or by COPY (16 or more in a call), its
id reserved in input order; the others by `job_insert`. Dedup is done by the database:
`ON CONFLICT DO NOTHING` against the idempotency index (forever) and the active-identity index
("start if not already running"). `unique_for` additionally refuses a second job of an identity
created within the window, under a lock on the identity's row of `identity_locks` (held to the
end of the transaction) so that concurrent enqueuers serialize.
"""

from __future__ import annotations

import contextlib
import logging
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Unpack

import asyncpg
import msgspec

from . import options as _options
from .errors import DedupRaceError, DuplicateJobError, GroupClosedError, InvalidJobOptionError
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


# A row as `build_rows` lays it out: the task, its args, then each sent option in declaration
# order. Plain rows (no key of any kind) are sent by COPY; the others by `job_insert`.
_FIELDS = ("task", "args", *(o.name for o in _options.SENT))
_AT = {name: n for n, name in enumerate(_FIELDS)}
_KEYS = tuple(_AT[o.name] for o in _options.SENT if o.keyed)
# With on_duplicate="raise", a job whose only key is an idempotency key is plain too: COPY fails
# on a duplicate, which is then the caller's error.
_STRICT_KEYS = tuple(k for k in _KEYS if k != _AT["idempotency_key"])
# What COPY writes: every column of the options a plain row may carry (the others' are NULL),
# each as the declaration computes it, the times from the transaction's now() (job_reserve).
_COPIED = tuple(o for o in _options.SENT if _AT[o.name] not in _STRICT_KEYS)
_COPY = _options.columns_of(_COPIED)
# A record is laid out: id, task, args, the columns that are an option's value as it is, then
# those computed by their Python twin (from the option values at `inputs`, and now()).
_DIRECT = tuple(c for c in _COPY if c.python is None)
_COMPUTED = tuple((c, c.python) for c in _COPY if c.python is not None)
COPY_COLUMNS = ("id", "task", "args", *(c.name for c in _DIRECT), *(c.name for c, _ in _COMPUTED))


def _records_source() -> str:
    """The source of `_records(values, plain, ids, now)`: the COPY records of the rows at
    `plain`. Generated from the declaration, as dataclasses generate `__init__`, so that a row
    costs one tuple: a computed column is its twin's value for the row (f0, f1, ...), or, when
    the row gives none of its inputs (the common case), that value computed once (k0, ...)."""
    fields = ["ids[i]", "r[0]", "r[1]", *(f"r[{_AT[c.inputs[0]]}]" for c in _DIRECT)]
    constants = []
    for n, (c, _) in enumerate(_COMPUTED):
        inputs = [f"r[{_AT[name]}]" for name in c.inputs]
        given = " and ".join(f"{i} is None" for i in inputs)
        fields.append(f"(k{n} if {given} else f{n}(now, {', '.join(inputs)}))")
        constants.append(f"    k{n} = f{n}(now{', None' * len(inputs)})\n")
    rows = "zip(plain, map(values.__getitem__, plain))"
    return (
        "def _records(values, plain, ids, now):\n"
        + "".join(constants)
        + f"    return [({', '.join(fields)}) for i, r in {rows}]\n"
    )


_namespace: dict[str, Any] = {f"f{n}": python for n, (_, python) in enumerate(_COMPUTED)}
exec(_records_source(), _namespace)  # the source is made above, from the declaration only
_records: Callable[[list[tuple[Any, ...]], Sequence[int], list[int], datetime], list[Any]]
_records = _namespace["_records"]
# Below this many plain rows, one `job_insert` beats the four round trips of a COPY.
COPY_MIN_ROWS = 16


class Rows:
    """Checked jobs, one tuple per job: its task, its args and each sent option."""

    __slots__ = ("_plain", "values", "windows")

    def __init__(self, values: list[tuple[Any, ...]], windows: list[float | None]) -> None:
        self.values = values
        self.windows = windows  # per job, its unique_for window in seconds (or None)
        self._plain: dict[bool, list[int]] = {}

    def __len__(self) -> int:
        return len(self.values)

    def get(self, name: str, position: int) -> Any:
        return self.values[position][_AT[name]]

    def columns(self, positions: Sequence[int]) -> list[list[Any]]:
        """The rows at `positions` as the columns `job_insert` takes (after the ids)."""
        picked = [self.values[i] for i in positions]
        return [list(column) for column in zip(*picked, strict=True)]

    def plain(self, strict: bool = False) -> list[int]:
        """Positions of the jobs with no key: nothing to deduplicate, no key to wake (with
        `strict`, an idempotency key is allowed: a duplicate fails the COPY)."""
        found = self._plain.get(strict)
        if found is None:
            keys = _STRICT_KEYS if strict else _KEYS
            found = [n for n, row in enumerate(self.values) if all(row[k] is None for k in keys)]
            self._plain[strict] = found
        return found


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


_LAYOUT = operator.itemgetter(*_FIELDS)


def build_row(
    task: Task,
    args: Any,
    options: Mapping[str, Any],
    trace: str | None,
    reserved: _options.Reserved = (),
) -> tuple[tuple[Any, ...], float | None]:
    """Check one job and lay it out as a row; raises on the first bad value."""
    values = _options.resolve(options, task, reserved)
    if trace is not None and values["trace_context"] is None:
        values["trace_context"] = trace
    values["task"], values["args"] = task.name, task.encode_args(args)
    return _LAYOUT(values), values["unique_for"]


def build_rows(
    specs: Sequence[JobSpec],
    lookup: Any,
    trace: Callable[[], str | None] | None = None,
    reserved: _options.Reserved = (),
) -> Rows:
    """Check every spec and lay them out as rows; nothing is written if one is bad.

    `trace` gives the caller's trace context, for the jobs that do not pass `trace_context`;
    `reserved`, the names layers keep for their own jobs.
    """
    current = trace() if trace is not None else None
    values: list[tuple[Any, ...]] = []
    windows: list[float | None] = []
    for spec in specs:
        row, window = build_row(lookup(spec.task), spec.args, spec.options, current, reserved)
        values.append(row)
        windows.append(window)
    return Rows(values, windows)


# The SQLSTATE with which the jobs table refuses a job of a closed group (core migration 0011's
# trigger, whose DETAIL is the group's name).
GROUP_CLOSED = "55SQ1"


@contextlib.contextmanager
def refused_if_closed() -> Iterator[None]:
    """Turn the jobs table's refusal of a closed group's job into `GroupClosedError`."""
    try:
        yield
    except asyncpg.PostgresError as exc:
        if exc.sqlstate != GROUP_CLOSED:
            raise
        raise GroupClosedError(str(exc.detail or "")) from None


def encode_spec(rows: Rows, position: int) -> str:
    """One checked job as JSON, by option name, for `decode_specs` to insert later (the
    `then` of a closed group): any process can, one that does not know its task too."""
    stored = dict(zip(_FIELDS, rows.values[position], strict=True))
    stored["unique_for"] = rows.windows[position]
    return msgspec.json.encode(stored).decode()


# What a field a stored job lacks (stored by a version that had no such option) is sent as.
_STORED_DEFAULTS: dict[str, Any] = {"idempotency_scope": ""}


def decode_specs(texts: Sequence[str]) -> Rows:
    """The jobs `encode_spec` stored, as rows ready for `insert`."""
    values: list[tuple[Any, ...]] = []
    windows: list[float | None] = []
    for text in texts:
        stored = msgspec.json.decode(text)
        if stored.get("run_at") is not None:
            stored["run_at"] = msgspec.convert(stored["run_at"], datetime)
        values.append(tuple(stored.get(name, _STORED_DEFAULTS.get(name)) for name in _FIELDS))
        windows.append(stored.get("unique_for"))
    return Rows(values, windows)


async def insert_one(queries: Queries, conn: Conn, row: tuple[Any, ...]) -> Enqueued:
    """Insert one plain job (no key of any kind) in one short statement."""
    with refused_if_closed():
        job_id = await queries.job_insert_one(conn, {name: row[n] for name, n in _AT.items()})
    return Enqueued(job_id, "created")


async def insert(
    queries: Queries, conn: Conn, rows: Rows, *, strict: bool = False
) -> list[Enqueued]:
    """Insert `rows` on `conn`; results in order.

    Plain rows go by COPY when there are enough of them (`conn` must then be in a transaction,
    as it must when unique_for is used or with `strict`); the rest by `job_insert`, which
    deduplicates. With `strict`, any duplicate raises `DuplicateJobError`. A job of a closed
    group raises `GroupClosedError` (the jobs table refuses it, whatever the path).
    """
    with refused_if_closed():
        return await _insert(queries, conn, rows, strict=strict)


async def _insert(queries: Queries, conn: Conn, rows: Rows, *, strict: bool) -> list[Enqueued]:
    count = len(rows)
    results: list[Enqueued | None] = [None] * count
    plain = rows.plain(strict)
    ids: list[int | None] = [None] * count
    if len(plain) >= COPY_MIN_ROWS:
        try:
            reserved = await _copy(queries, conn, rows, plain)
        except asyncpg.UniqueViolationError as exc:
            raise DuplicateJobError(exc.detail or str(exc)) from None
        ids = list(reserved)
        for position in plain:
            results[position] = Enqueued(JobId(reserved[position]), "created")
    todo = [i for i in range(count) if results[i] is None]
    if todo:
        await _insert_keyed(queries, conn, rows, todo, ids, results, warn=not strict)
    done = [r for r in results if r is not None]
    if strict:
        for position, result in enumerate(done):
            if result.outcome != "created":
                raise DuplicateJobError(_key_text(rows, position))
    return done


def _key_text(rows: Rows, position: int) -> str:
    """The duplicate's key, worded as PostgreSQL words it when the COPY meets one."""
    key = rows.get("idempotency_key", position)
    if key is not None:
        scope = rows.get("idempotency_scope", position)
        return f"Key (idempotency_scope, idempotency_key)=({scope}, {key}) already exists."
    return f"Key (identity_key)=({rows.get('identity_key', position)}) already exists."


async def _copy(queries: Queries, conn: Conn, rows: Rows, plain: Sequence[int]) -> list[int]:
    """COPY the plain rows, with ids reserved for every row in input order (so the rows sent by
    `job_insert` after them keep their places in the claim order of jobs due together)."""
    at = _AT
    due_queues = {
        rows.values[i][at["queue"]]
        for i in plain
        if rows.values[i][at["run_at"]] is None and not rows.values[i][at["delay"]]
    }
    ids, now = await queries.job_reserve(conn, len(rows), sorted(due_queues))
    records = _records(rows.values, plain, ids, now)
    await queries.job_copy(conn, COPY_COLUMNS, records)
    return ids


async def _insert_keyed(
    queries: Queries,
    conn: Conn,
    rows: Rows,
    todo: list[int],
    ids: list[int | None],
    results: list[Enqueued | None],
    *,
    warn: bool = True,
) -> None:
    """Insert the rows at `todo` by `job_insert`, telling dedup's truth for each (and warning
    of a terminal job deduplicated against, unless `warn` is off: the caller raises instead)."""
    if any(rows.windows[i] is not None for i in todo):
        # Lock, then read in a new statement: its snapshot sees every job committed before
        # we held the lock.
        positions = [i for i in todo if rows.windows[i] is not None]
        identities = [rows.get("identity_key", i) or "" for i in positions]
        await queries.job_identity_lock(conn, identities)
        recent = await queries.job_identity_recent(
            conn, identities, [rows.windows[i] or 0.0 for i in positions]
        )
        for ordinal, (job_id, state) in recent.items():
            position = positions[ordinal - 1]
            results[position] = _existing(job_id, state, "identity", rows, position, warn)
        todo = [i for i in todo if results[i] is None]
    for _ in range(_DEDUP_ROUNDS):
        if not todo:
            break
        inserted = await queries.job_insert(conn, [ids[i] for i in todo], rows.columns(todo))
        conflicted = [todo[n] for n, (_, created) in enumerate(inserted) if not created]
        for n, (job_id, created) in enumerate(inserted):
            if created:
                results[todo[n]] = Enqueued(job_id, "created")
        todo = []
        if not conflicted:
            break
        # A new statement sees the committed job we collided with.
        found = await queries.job_find_duplicates(
            conn, *([rows.get(name, i) for i in conflicted] for name in _DEDUP_COLUMNS)
        )
        for position, (holder, holder_state) in zip(conflicted, found, strict=True):
            if holder is None or holder_state is None:
                todo.append(position)  # the active job it collided with has finished: again
            else:
                results[position] = _existing(holder, holder_state, "key", rows, position, warn)
    if todo:
        raise DedupRaceError(len(todo), _DEDUP_ROUNDS)


_DEDUP_COLUMNS = ("idempotency_scope", "idempotency_key", "identity_key")


def _existing(
    job_id: JobId, state: str, by: str, rows: Rows, position: int, warn: bool = True
) -> Enqueued:
    outcome: EnqueueOutcome = "existing_active" if state in _ACTIVE else "existing_terminal"
    if outcome == "existing_terminal" and warn:
        key = rows.get("idempotency_key", position)
        logger.warning(
            "enqueue deduplicated against terminal job %s (state %s, task %s, %s); "
            "no new job was created",
            job_id,
            state,
            rows.get("task", position),
            f"idempotency_key={key!r}"
            if by == "key" and key is not None
            else f"identity_key={rows.get('identity_key', position)!r}",
        )
    return Enqueued(job_id, outcome)
