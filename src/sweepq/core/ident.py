"""Validation of names that end up in SQL text (schema, table, column) or in indexes (queues)."""

from __future__ import annotations

import re

from .errors import InvalidIdentifierError

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_QUEUE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:\-]{0,127}")


def ident(value: object, *, what: str = "identifier") -> str:
    """Return `value` double-quoted for SQL after checking it is a plain identifier."""
    if not isinstance(value, str) or not _IDENT.fullmatch(value):
        raise InvalidIdentifierError(what, value)
    return f'"{value}"'


# Schemas PostgreSQL keeps for itself: sweepq's tables cannot live there.
_SYSTEM_SCHEMAS = frozenset({"information_schema"})


def schema_name(value: object, *, what: str = "schema name") -> str:
    """Check a schema for sweepq's tables: a plain identifier, not one of PostgreSQL's own
    (`pg_catalog`, `pg_toast`, any `pg_*`, `information_schema`). Returns it unquoted."""
    ident(value, what=what)
    assert isinstance(value, str)
    if value.lower() in _SYSTEM_SCHEMAS or value.lower().startswith("pg_"):
        raise InvalidIdentifierError(
            what,
            value,
            "it is one of PostgreSQL's own schemas (pg_*, information_schema); give sweepq a "
            "schema of its own, such as the default 'sweepq'",
        )
    return value


def qualified(value: object, *, what: str = "table") -> str:
    """Return an optionally schema-qualified name (`users`, `app.users`) quoted for SQL."""
    if not isinstance(value, str):
        raise InvalidIdentifierError(what, value)
    parts = value.split(".")
    if len(parts) > 2:
        raise InvalidIdentifierError(what, value)
    return ".".join(ident(p, what=what) for p in parts)


def queue_name(value: object) -> str:
    """Check a queue name: 1-128 characters of letters, digits, `_ . : -`."""
    if not isinstance(value, str) or not _QUEUE.fullmatch(value):
        raise InvalidIdentifierError(
            "queue name", value, "use 1-128 letters, digits and '_ . : -', not starting with a sign"
        )
    return value
