"""Job options, declared once: each one's check, its default, what it sends, and what it means.

`JobOptions` types the keyword arguments of `App.enqueue` and `JobSpec`. Each of its fields is
annotated with an `Option`: the check that turns what a caller passed into the value sent (None
meaning "the default", often the task's), the element type of the array `job_insert` receives
for it (options are sent in declaration order), and one line for the docs. `OPTIONS` lists them.

Adding an option: declare it here, add its column in a migration, and use it in `job_insert`
and `job_insert_one` (core/sql/jobs.sql) by its name (COPY takes a plain column from this
declaration); `Job` shows it if users should read it back. The same migration
replaces the SQL function `{schema}.enqueue` (core/migrations/0005_enqueue_function.sql) with one
that takes the option: tests/test_sql_enqueue.py fails until it does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Annotated, Any, TypedDict, get_type_hints

from . import checks
from .errors import InvalidJobOptionError
from .ident import queue_name
from .tasks import MAX_ATTEMPTS_RANGE, PRIORITY_RANGE, Task

Check = Callable[[Any, Task], Any]


@dataclass(frozen=True)
class Option:
    """How one option is checked, sent and documented."""

    check: Check
    doc: str
    sql_type: str | None = None  # None: checked but not sent as a column (unique_for)
    column: str = ""  # its name in job_insert (default: the option's name)
    name: str = ""


def _queue(value: object, task: Task) -> str:
    return task.queue if value is None else queue_name(value)


def _priority(value: object, task: Task) -> int:
    return checks.int_in(task.priority if value is None else value, "priority", PRIORITY_RANGE)


def _max_attempts(value: object, task: Task) -> int:
    attempts = task.max_attempts if value is None else value
    return checks.int_in(attempts, "max_attempts", MAX_ATTEMPTS_RANGE)


def _delay(value: object, task: Task) -> float | None:
    return checks.optional_seconds(value, "delay", allow_zero=True)


def _run_at(value: object, task: Task) -> datetime | None:
    return checks.run_at(value)


def _timeout(value: object, task: Task) -> float | None:
    return checks.optional_seconds(task.timeout if value is None else value, "timeout")


def _seconds(what: str) -> Check:
    return lambda value, task: checks.optional_seconds(value, what)


def _key(what: str) -> Check:
    return lambda value, task: checks.optional_text(value, what)


def _scope(value: object, task: Task) -> str:
    return checks.text("" if value is None else value, "idempotency_scope", empty_ok=True)


class JobOptions(TypedDict, total=False):
    """Every option of `enqueue` and `JobSpec`; all default to None (the task's, or nothing)."""

    queue: Annotated[
        str | None,
        Option(_queue, "the queue to put the job in (default: the task's)", "text"),
    ]
    priority: Annotated[
        int | None,
        Option(_priority, "higher runs first among due jobs (-32768..32767)", "smallint"),
    ]
    delay: Annotated[
        timedelta | float | None,
        Option(_delay, "start no earlier than this long from now (not with run_at)", "float8"),
    ]
    run_at: Annotated[
        datetime | None,
        Option(_run_at, "start no earlier than this timezone-aware time", "timestamptz"),
    ]
    max_attempts: Annotated[
        int | None,
        Option(_max_attempts, "executions charged before failing (default: the task's)", "integer"),
    ]
    idempotency_key: Annotated[
        str | None,
        Option(_key("idempotency_key"), "dedup forever (until pruned) within the scope", "text"),
    ]
    idempotency_scope: Annotated[
        str | None,
        Option(_scope, "the namespace of idempotency_key (default '')", "text"),
    ]
    identity_key: Annotated[
        str | None,
        Option(
            _key("identity_key"), "at most one active (available or running) job has it", "text"
        ),
    ]
    unique_for: Annotated[
        timedelta | float | None,
        Option(_seconds("unique_for"), "no second job of identity_key created within this"),
    ]
    deadline: Annotated[
        timedelta | float | None,
        Option(
            _seconds("deadline"), "schedule-to-close: fail deadline_exceeded after this", "float8"
        ),
    ]
    concurrency_key: Annotated[
        str | None,
        Option(
            _key("concurrency_key"), "run at most set_concurrency_limit of these at once", "text"
        ),
    ]
    group: Annotated[
        str | None,
        Option(
            _key("group"),
            "the job group it belongs to (counted, cancelled, retried together)",
            "text",
            column="job_group",
        ),
    ]
    timeout: Annotated[
        timedelta | float | None,
        Option(
            _timeout,
            "most seconds one execution may run before it is cancelled (default: the task's)",
            "float8",
        ),
    ]
    trace_context: Annotated[
        str | None,
        Option(
            _key("trace_context"),
            "the enqueuer's W3C traceparent, continued by the job's span (tracing fills it)",
            "text",
        ),
    ]


def _declared() -> tuple[Option, ...]:
    hints = get_type_hints(JobOptions, include_extras=True, localns=vars(sys.modules[__name__]))
    found: list[Option] = []
    for name, hint in hints.items():
        (option,) = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Option)]
        found.append(replace(option, name=name, column=option.column or name))
    return tuple(found)


OPTIONS: tuple[Option, ...] = _declared()
NAMES: frozenset[str] = frozenset(o.name for o in OPTIONS)
SENT: tuple[Option, ...] = tuple(o for o in OPTIONS if o.sql_type is not None)


def check_names(options: Mapping[str, object]) -> None:
    """Refuse an option that does not exist, naming those that do."""
    if not options or NAMES.issuperset(options):
        return
    unknown = sorted(set(options) - NAMES)
    if unknown:
        raise InvalidJobOptionError(
            f"unknown job option(s) {', '.join(map(repr, unknown))}; the options are: "
            f"{', '.join(o.name for o in OPTIONS)}"
        )


_BY_NAME = {o.name: o for o in OPTIONS}
# What an option left out (or None) is, but for the task's defaults; checks give the same.
_UNSET: dict[str, Any] = {o.name: None for o in OPTIONS} | {"idempotency_scope": ""}


# What a layer keeps for its own jobs: (option, prefix), the option `group` or
# `idempotency_scope` (core migration 0010's reserved_names holds the same for the SQL function).
Reserved = Sequence[tuple[str, str]]


def resolve(options: Mapping[str, object], task: Task, reserved: Reserved = ()) -> dict[str, Any]:
    """Every option's value as sent, checked (alone and together); raises on the first bad one.

    Only the options given are checked: the others take their default (the task's defaults were
    checked when it was registered). A `group` or `idempotency_scope` that begins with one of the
    `reserved` prefixes of its option is refused.
    """
    values = _UNSET | {
        "queue": task.queue,
        "priority": task.priority,
        "max_attempts": task.max_attempts,
        "timeout": task.timeout,
    }
    for name, value in options.items():
        if value is not None:
            values[name] = _BY_NAME[name].check(value, task)
    if values["delay"] is not None and values["run_at"] is not None:
        raise InvalidJobOptionError("pass delay or run_at, not both")
    if values["unique_for"] is not None and values["identity_key"] is None:
        raise InvalidJobOptionError(
            "unique_for needs identity_key: it widens 'one active job per identity' to "
            "'one job per identity within the window'; pass identity_key=... as well"
        )
    if values["idempotency_key"] is not None:
        checks.idempotency(values["idempotency_scope"], values["idempotency_key"])
    for option in ("group", "idempotency_scope"):
        check_reserved(option, values[option], reserved)
    return values


def check_reserved(option: str, value: object, reserved: Reserved) -> None:
    """Refuse a `group` or `idempotency_scope` that begins with a prefix a layer keeps."""
    for kept, prefix in reserved:
        if kept == option and isinstance(value, str) and value.startswith(prefix):
            raise InvalidJobOptionError(
                f"{option} {checks.show(value)}: names beginning with {prefix!r} are kept for "
                "sweepq's own jobs (a sweep's runs); use another name"
            )


def input_arrays(first: int) -> str:
    """The typed array parameters of the sent options, numbered from `first` (for SQL)."""
    return ", ".join(f"${first + n}::{o.sql_type}[]" for n, o in enumerate(SENT))


def input_names() -> str:
    """The sent options' column names, in the order of `input_arrays` (for SQL)."""
    return ", ".join(o.column for o in SENT)


def docs_table() -> str:
    """The table of options in the jobs guide (a test keeps the guide's copy equal to it)."""
    rows = [f"| `{o.name}` | {o.doc} |" for o in OPTIONS]
    return "\n".join(["| option | meaning |", "|---|---|", *rows])
