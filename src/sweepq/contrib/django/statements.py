"""The statements SweepqBackend runs on Django's own connection, in Django's cursor style.

Its own (`sql/backend.sql`: the enqueue, through the core's SQL function) are written with `%s`
already; the core's statements it reads jobs with (`job_get_json`) are written for asyncpg
(`$1`, `$2`, ...) and converted here, once, when the backend is built.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from sweepq.core.sqlfiles import load_statements

CORE_STATEMENTS = ("job_get_json",)
"""The core's statements the backend runs (`sweepq/core/sql/`)."""

_PARAMETER = re.compile(r"\$(\d+)")


def backend_statements(schema: str) -> Mapping[str, str]:
    """{name: SQL} for `schema`: the backend's own statements and the core's it runs."""
    found = dict(load_statements("sweepq.contrib.django.sql", schema))
    core = load_statements("sweepq.core.sql", schema)
    found.update((name, django_placeholders(core[name])) for name in CORE_STATEMENTS)
    return MappingProxyType(found)


def django_placeholders(statement: str) -> str:
    """An asyncpg statement (`$1`, `$2`, ...) as Django's cursor takes it: `%s` for each
    parameter, and any other percent sign (in a comment, a LIKE pattern) doubled.

    Raises:
        ValueError: the statement does not use each parameter once, in order (a `%s` cannot say
            which parameter it is).
    """
    numbers = [int(n) for n in _PARAMETER.findall(statement)]
    if numbers != list(range(1, len(numbers) + 1)):
        raise ValueError(
            "a statement for Django's cursor must use $1, $2, ... once each and in order; "
            f"this one uses {numbers}"
        )
    return _PARAMETER.sub("%s", statement.replace("%", "%%"))
