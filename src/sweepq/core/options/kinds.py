"""What values a job option takes, checked the same way in Python and in the SQL function.

A `Kind` checks a value in Python (returning it as the statements take it) and renders the SQL
that checks the same value as JSON inside `{schema}.enqueue` (`core/render_enqueue.py`): a test
of `val`, the option's JSON value (never JSON null), and what the refusal says it must be.
The bounds are those of `core/checks.py`, read from it when the function is rendered.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

from .. import checks
from ..ident import queue_name
from ..tasks import MAX_ATTEMPTS_RANGE, PRIORITY_RANGE


def literal(value: object, indent: int = 0) -> str:
    """A Python value as an SQL literal (for values declared in code, never for input); a long
    string is split into literals on lines of their own, which SQL joins."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    chunks = textwrap.wrap(text, 72, drop_whitespace=False, break_long_words=False) or [text]
    assert "".join(chunks) == text
    quoted = ["'" + chunk.replace("'", "''") + "'" for chunk in chunks]
    return f"\n{' ' * indent}".join(quoted)


@dataclass(frozen=True)
class Kind:
    """A kind of value: its check in Python, its SQL type, and its check in SQL."""

    @property
    def sql_type(self) -> str:
        return "text"

    def check(self, value: object, name: str) -> Any:
        raise NotImplementedError

    def sql_test(self, name: str) -> str:
        """An SQL boolean: whether `val` (jsonb, not null) is a good value of this kind."""
        raise NotImplementedError

    def sql_must(self, name: str) -> str:
        """What the SQL function's refusal says the value must be."""
        raise NotImplementedError

    def sql_value(self, name: str) -> str:
        """The checked value, typed, from the `given` options."""
        return f"(given ->> {literal(name)})::{self.sql_type}"

    def sql_check(self, name: str) -> str:
        """The block of the function's `checks` that refuses a bad value of option `name`."""
        return (
            f"val := given -> {literal(name)};\n"
            f"IF val IS NOT NULL AND NOT (\n        {self.sql_test(name)}) THEN\n"
            f"    bad := {literal(name)};\n"
            f"    must := {literal(self.sql_must(name), 12)};\n"
            "    EXIT checks;\n"
            "END IF;"
        )


@dataclass(frozen=True)
class QueueName(Kind):
    """A queue name (`ident.queue_name`)."""

    # ident._QUEUE, anchored; test_queue_names_are_checked_as_python_checks_them holds the two.
    pattern = "^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$"

    def check(self, value: object, name: str) -> str:
        return queue_name(value)

    def sql_test(self, name: str) -> str:
        return (
            "coalesce(jsonb_typeof(val) = 'string'\n"
            f"                 AND (val #>> '{{}}') ~ {literal(self.pattern)}, false)"
        )

    def sql_must(self, name: str) -> str:
        return "a queue name: 1-128 letters, digits and '_ . : -', not starting with a sign"

    def sql_value(self, name: str) -> str:
        return f"given ->> {literal(name)}"


@dataclass(frozen=True)
class Integer(Kind):
    """An int (not a bool) within `allowed`."""

    allowed: range
    type_name: str = "integer"

    @property
    def sql_type(self) -> str:
        return self.type_name

    def check(self, value: object, name: str) -> int:
        return checks.int_in(value, name, self.allowed)

    def sql_test(self, name: str) -> str:
        low, high = self.allowed.start, self.allowed.stop - 1
        return (
            "CASE WHEN jsonb_typeof(val) = 'number' AND val::text ~ '^-?[0-9]+$'\n"
            f"             THEN (val::text)::numeric BETWEEN {low} AND {high} ELSE false END"
        )

    def sql_must(self, name: str) -> str:
        return f"an integer in {self.allowed.start}..{self.allowed.stop - 1}"


@dataclass(frozen=True)
class Seconds(Kind):
    """A duration: a timedelta or a finite number of seconds, at most `checks.MAX_SPAN`."""

    allow_zero: bool = False

    @property
    def sql_type(self) -> str:
        return "float8"

    def check(self, value: object, name: str) -> float:
        return checks.seconds(value, name, allow_zero=self.allow_zero)

    def sql_test(self, name: str) -> str:
        # JSON has no NaN or infinity.
        lowest = "(val::text)::numeric >= 0" if self.allow_zero else "(val::text)::numeric > 0"
        return (
            "CASE WHEN jsonb_typeof(val) = 'number'\n"
            "             THEN (val::text)::numeric <= max_span\n"
            f"                  AND {lowest} ELSE false END"
        )

    def sql_must(self, name: str) -> str:
        span = "between 0 and" if self.allow_zero else "above 0 and at most"
        return f"a number of seconds {span} {checks.MAX_SPAN_TEXT}"

    def sql_value(self, name: str) -> str:
        # Rounded first: a float8 cannot hold 1e-400, and intervals keep microseconds anyway.
        return f"round((given ->> {literal(name)})::numeric, 9)::float8"


@dataclass(frozen=True)
class Moment(Kind):
    """A timezone-aware time within `checks.MAX_SPAN` of now (in SQL: ISO 8601 text)."""

    @property
    def sql_type(self) -> str:
        return "timestamptz"

    def check(self, value: object, name: str) -> Any:
        return checks.run_at(value)

    def sql_must(self, name: str) -> str:
        return (
            f"an ISO 8601 time with a UTC offset within {checks.MAX_SPAN_TEXT} of now "
            '(e.g. "2030-01-01T09:00:00+00:00" or "2030-01-01T09:00:00Z")'
        )

    def sql_value(self, name: str) -> str:
        return f"new_{name}"  # set by the check

    def sql_check(self, name: str) -> str:
        # PostgreSQL 15's jsonpath datetime() checks every field without raising; it does not
        # take 'Z', which means +00:00.
        target = f"new_{name}"
        pattern = (
            "'^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}'\n"
            "                          '([.][0-9]{1,6})?([Zz]|[+-][0-9]{2}(:[0-9]{2})?)$'"
        )
        return (
            f"val := given -> {literal(name)};\n"
            "IF val IS NOT NULL THEN\n"
            "    IF jsonb_typeof(val) = 'string'\n"
            f"       AND (val #>> '{{}}') ~ ({pattern})\n"
            "    THEN\n"
            f"        {target} := (jsonb_path_query_first(\n"
            "            to_jsonb(regexp_replace(val #>> '{}', '[Zz]$', '+00:00')),\n"
            "            '$.datetime() ? (@.type() == \"timestamp with time zone\")',\n"
            "            silent => true) #>> '{}')::timestamptz;\n"
            "    END IF;\n"
            f"    IF {target} IS NULL OR NOT {target} BETWEEN\n"
            "            now() - make_interval(secs => max_span)\n"
            "            AND now() + make_interval(secs => max_span) THEN\n"
            f"        bad := {literal(name)};\n"
            f"        must := {literal(self.sql_must(name), 16)};\n"
            "        EXIT checks;\n"
            "    END IF;\n"
            "END IF;"
        )


@dataclass(frozen=True)
class Text(Kind):
    """A string PostgreSQL can store and index: at most `longest` characters (by default
    `checks.MAX_KEY_LENGTH`), empty only where `empty_ok`."""

    empty_ok: bool = False
    longest: int = checks.MAX_KEY_LENGTH

    def check(self, value: object, name: str) -> str:
        return checks.text(value, name, empty_ok=self.empty_ok, longest=self.longest)

    def sql_test(self, name: str) -> str:
        # PostgreSQL text (and so jsonb) cannot hold NUL or lone surrogates at all.
        low = 0 if self.empty_ok else 1
        return (
            "CASE WHEN jsonb_typeof(val) = 'string'\n"
            f"             THEN length(val #>> '{{}}') BETWEEN {low} AND {self.longest}\n"
            "             ELSE false END"
        )

    def sql_must(self, name: str) -> str:
        kind = "a string" if self.empty_ok else "a non-empty string"
        return f"{kind} of at most {self.longest} characters"

    def sql_value(self, name: str) -> str:
        return f"given ->> {literal(name)}"


PRIORITY = Integer(PRIORITY_RANGE, "smallint")
ATTEMPTS = Integer(MAX_ATTEMPTS_RANGE)
