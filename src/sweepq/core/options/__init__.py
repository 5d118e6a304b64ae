"""Job options, declared once: each one's kind, default, columns and doc, and the rules between.

`JobOptions` types the keyword arguments of `App.enqueue` and `JobSpec`. Each of its fields is
annotated with an `Option`: its `Kind` (the check in Python and in SQL, the SQL type; see
`kinds.py`), its default (the task's, or a constant), whether it is a key (sent by
`job_insert`, which dedups and wakes), the columns of `jobs` it writes (with the SQL expression
and its Python twin for COPY), and one line for the docs. `RULES` (`rules.py`) holds the rules
between options. `OPTIONS` lists the options in declaration order.

Every enqueue path is made from this declaration: `resolve` (App.enqueue, enqueue_many, the
Django backend through `check_one` and `rules.check`), the statements `job_insert` and
`job_insert_one` (their column lists and values are `fragments()`), the COPY path
(`core/enqueue.py`, from `columns`), and the SQL function `{schema}.enqueue`, rendered by
`python -m sweepq.core.render_enqueue` into the newest core migration that defines it.
"""

from __future__ import annotations

import string
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypedDict, get_type_hints

from .. import checks
from ..errors import InvalidJobOptionError
from ..tasks import DEFAULT_MAX_ATTEMPTS, Task
from . import rules
from .kinds import ATTEMPTS, PRIORITY, Kind, Moment, QueueName, Seconds, Text
from .rules import RULES


@dataclass(frozen=True)
class Column:
    """A column of `jobs` an option writes: `sql` computes it from options named in braces
    (`{run_at}`), `python(now, *those options)` the same for COPY (None: the value itself)."""

    name: str
    sql: str
    python: Callable[..., Any] | None = None

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(f for _, f, _, _ in string.Formatter().parse(self.sql) if f)


@dataclass(frozen=True)
class Option:
    """How one option is checked, defaulted, stored and documented."""

    kind: Kind
    doc: str
    default: Any = None  # when not given and the task has none (the SQL function's)
    from_task: bool = False  # the task's attribute of the same name is the default
    sent: bool = True  # False: checked, not sent (unique_for)
    keyed: bool = False  # a key: its jobs go by job_insert, which dedups and wakes
    columns: tuple[Column, ...] | None = None  # None: the value as it is, in `column`
    column: str = ""  # its name in job_insert's input and in jobs (default: the option's name)
    example: Any = None  # a good value (the tests enqueue it by every path and compare rows)
    name: str = ""

    @property
    def sql_type(self) -> str | None:
        return self.kind.sql_type if self.sent else None


def _run_at(now: datetime, run_at: datetime | None, delay: float | None) -> datetime:
    if run_at is not None:
        return run_at
    return now if not delay else now + timedelta(seconds=delay)


def _deadline_at(now: datetime, deadline: float | None) -> datetime | None:
    return None if deadline is None else now + timedelta(seconds=deadline)


def _deadline_after(now: datetime, deadline: float | None) -> timedelta | None:
    return None if deadline is None else timedelta(seconds=deadline)


class JobOptions(TypedDict, total=False):
    """Every option of `enqueue` and `JobSpec`; all default to None (the task's, or nothing)."""

    queue: Annotated[
        str | None,
        Option(
            QueueName(),
            "the queue to put the job in (default: the task's)",
            "default",
            from_task=True,
            example="mail",
        ),
    ]
    priority: Annotated[
        int | None,
        Option(
            PRIORITY,
            "higher runs first among due jobs (-32768..32767)",
            0,
            from_task=True,
            example=-7,
        ),
    ]
    delay: Annotated[
        timedelta | float | None,
        Option(
            Seconds(allow_zero=True),
            "start no earlier than this long from now (not with run_at)",
            example=90.5,
            columns=(),  # it is in run_at's
        ),
    ]
    run_at: Annotated[
        datetime | None,
        Option(
            Moment(),
            "start no earlier than this timezone-aware time",
            example=datetime(2030, 1, 2, 3, 4, 5, 678900, tzinfo=UTC),
            columns=(
                Column(
                    "run_at",
                    "coalesce({run_at}, now() + make_interval(secs => coalesce({delay}, 0)))",
                    _run_at,
                ),
            ),
        ),
    ]
    max_attempts: Annotated[
        int | None,
        Option(
            ATTEMPTS,
            "executions charged before failing (default: the task's)",
            DEFAULT_MAX_ATTEMPTS,
            from_task=True,
            example=2,
        ),
    ]
    idempotency_key: Annotated[
        str | None,
        Option(
            Text(),
            "dedup forever (until pruned) within the scope",
            keyed=True,
            example="charge:42",
        ),
    ]
    idempotency_scope: Annotated[
        str | None,
        Option(
            Text(empty_ok=True),
            "the namespace of idempotency_key (default '')",
            "",
            example="billing",
        ),
    ]
    identity_key: Annotated[
        str | None,
        Option(
            Text(),
            "at most one active (available or running) job has it",
            keyed=True,
            example="user:1",
        ),
    ]
    unique_for: Annotated[
        timedelta | float | None,
        Option(
            Seconds(),
            "no second job of identity_key created within this",
            sent=False,
            example=600,
        ),
    ]
    deadline: Annotated[
        timedelta | float | None,
        Option(
            Seconds(),
            "schedule-to-close: fail deadline_exceeded after this",
            example=3600,
            columns=(
                Column("deadline_at", "now() + make_interval(secs => {deadline})", _deadline_at),
                Column("deadline_after", "make_interval(secs => {deadline})", _deadline_after),
            ),
        ),
    ]
    concurrency_key: Annotated[
        str | None,
        Option(
            Text(),
            "run at most set_concurrency_limit of these at once",
            keyed=True,
            example="smtp",
        ),
    ]
    group: Annotated[
        str | None,
        Option(
            Text(),
            "the job group it belongs to (counted, cancelled, retried together)",
            column="job_group",
            example="import-1",
        ),
    ]
    timeout: Annotated[
        timedelta | float | None,
        Option(
            Seconds(),
            "most seconds one execution may run before it is cancelled (default: the task's)",
            from_task=True,
            example=30,
        ),
    ]
    trace_context: Annotated[
        str | None,
        Option(
            Text(),
            "the enqueuer's W3C traceparent, continued by the job's span (tracing fills it)",
            example="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ),
    ]


def _declared() -> tuple[Option, ...]:
    hints = get_type_hints(JobOptions, include_extras=True, localns=vars(sys.modules[__name__]))
    found: list[Option] = []
    for name, hint in hints.items():
        (option,) = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Option)]
        column = option.column or name
        columns = option.columns
        if columns is None:
            columns = (Column(column, "{" + name + "}"),) if option.sent else ()
        for c in columns:
            # COPY writes a column without a Python twin as the option's value itself.
            if c.python is None and c.sql != "{" + c.inputs[0] + "}":
                raise TypeError(f"option {name!r}: column {c.name!r} computed by SQL needs python")
        found.append(replace(option, name=name, column=column, columns=columns))
    return tuple(found)


OPTIONS: tuple[Option, ...] = _declared()
NAMES: frozenset[str] = frozenset(o.name for o in OPTIONS)
BY_NAME: Mapping[str, Option] = {o.name: o for o in OPTIONS}
SENT: tuple[Option, ...] = tuple(o for o in OPTIONS if o.sent)
# The options of a job without keys, as `job_insert_one` takes them (from $4, in this order).
SINGLE: tuple[Option, ...] = tuple(o for o in SENT if not o.keyed)


def columns_of(options: Sequence[Option]) -> tuple[Column, ...]:
    """The columns of `jobs` that `options` write, in declaration order."""
    return tuple(c for o in options for c in o.columns or ())


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


def check_one(name: str, value: object) -> Any:
    """One option's value as sent, checked alone (None stays None: the default)."""
    return None if value is None else BY_NAME[name].kind.check(value, name)


# What an option left out (or None) is, but for the task's defaults; checks give the same.
_UNSET: dict[str, Any] = {o.name: None if o.from_task else o.default for o in OPTIONS}
_FROM_TASK = tuple(o.name for o in OPTIONS if o.from_task)
_CHECKS = {o.name: o.kind.check for o in OPTIONS}
# Defaults break no rule, so a job given no option needs none checked (the common case, and
# the hot path of enqueue_many), unless a rule reads an option the task gives.
rules.check(_UNSET)
_RULES_READ_TASK = any(name in _FROM_TASK for rule in RULES for name in rule.reads)


# What a layer keeps for its own jobs: (option, prefix), the option `group` or
# `idempotency_scope` (core migration 0010's reserved_names holds the same for the SQL function).
Reserved = Sequence[tuple[str, str]]


def resolve(options: Mapping[str, object], task: Task, reserved: Reserved = ()) -> dict[str, Any]:
    """Every option's value as sent, checked (alone and together); raises on the first bad one.

    Only the options given are checked: the others take their default (the task's defaults were
    checked when it was registered). A `group` or `idempotency_scope` that begins with one of the
    `reserved` prefixes of its option is refused.
    """
    values = _UNSET.copy()
    for name in _FROM_TASK:
        values[name] = getattr(task, name)
    for name, value in options.items():
        if value is not None:
            values[name] = _CHECKS[name](value, name)
    if options or _RULES_READ_TASK:
        rules.check(values)
    if reserved:
        for option in ("group", "idempotency_scope"):
            check_reserved(option, values[option], reserved)
    return values


def check_reserved(option: str, value: object, reserved: Reserved) -> None:
    """Refuse a `group` or `idempotency_scope` that begins with a prefix a layer keeps."""
    for kept, prefix in reserved:
        if kept == option and isinstance(value, str) and value.startswith(prefix):
            raise InvalidJobOptionError(reserved_message(option, checks.show(value), repr(prefix)))


def reserved_message(option: str, shown: str, prefix: str) -> str:
    """The refusal of a name a layer keeps (the SQL function words it the same)."""
    return (
        f"{option} {shown}: names beginning with {prefix} are kept for sweepq's own jobs "
        "(a sweep's runs); use another name"
    )


def input_arrays(first: int) -> str:
    """The typed array parameters of the sent options, numbered from `first` (for SQL)."""
    return ", ".join(f"${first + n}::{o.kind.sql_type}[]" for n, o in enumerate(SENT))


def input_names() -> str:
    """The sent options' column names, in the order of `input_arrays` (for SQL)."""
    return ", ".join(o.column for o in SENT)


def column_values(columns: Sequence[Column], ref: Callable[[Option], str], sep: str = ", ") -> str:
    """The SQL expressions of `columns`, each option in them written as `ref` gives it."""
    return sep.join(c.sql.format_map({n: ref(BY_NAME[n]) for n in c.inputs}) for c in columns)


def fragments() -> dict[str, str]:
    """The parts of `job_insert` and `job_insert_one` (core/sql/jobs.sql) made from the
    declaration: the input arrays and their names, and the columns and values inserted."""
    single_at = {o.name: n for n, o in enumerate(SINGLE, start=4)}
    return {
        "{job_option_arrays}": input_arrays(5),
        "{job_option_names}": input_names(),
        "{job_columns}": ", ".join(c.name for c in columns_of(SENT)),
        "{job_values}": column_values(columns_of(SENT), lambda o: o.column),
        "{job_one_columns}": ", ".join(c.name for c in columns_of(SINGLE)),
        "{job_one_values}": column_values(
            columns_of(SINGLE), lambda o: f"${single_at[o.name]}::{o.kind.sql_type}"
        ),
    }


def docs_table() -> str:
    """The table of options in the jobs guide (a test keeps the guide's copy equal to it)."""
    rows = [f"| `{o.name}` | {o.doc} |" for o in OPTIONS]
    return "\n".join(["| option | meaning |", "|---|---|", *rows])


__all__ = [
    "BY_NAME",
    "NAMES",
    "OPTIONS",
    "RULES",
    "SENT",
    "SINGLE",
    "Column",
    "JobOptions",
    "Option",
    "Reserved",
    "check_names",
    "check_one",
    "check_reserved",
    "columns_of",
    "docs_table",
    "fragments",
    "input_arrays",
    "input_names",
    "resolve",
]
