"""Rules between job options: each one checked in Python and rendered into the SQL function.

A rule reads the options' values as sent (None where not given, or the default) and raises
`InvalidJobOptionError` with its message; `sql()` is the same rule in `{schema}.enqueue`, over
its `new_<option>` variables, raising the same message behind "sweepq: ".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import checks
from ..errors import InvalidJobOptionError
from .kinds import literal


def _raise_sql(condition: str, message: str, *args: str) -> str:
    shown = "".join(f",\n        {a}" for a in args)
    return (
        f"IF {condition} THEN\n"
        f"    RAISE EXCEPTION {literal('sweepq: ' + message, 8)}{shown}\n"
        "        USING ERRCODE = '22SQ1';\n"
        "END IF;"
    )


class Rule:
    """One rule between options."""

    @property
    def reads(self) -> tuple[str, ...]:
        """The options it reads."""
        raise NotImplementedError

    def check(self, values: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def sql(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class NotBoth(Rule):
    """Two options that cannot be given together."""

    first: str
    second: str

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.first, self.second)

    @property
    def message(self) -> str:
        return f"pass {self.first} or {self.second}, not both"

    def check(self, values: Mapping[str, Any]) -> None:
        if values.get(self.first) is not None and values.get(self.second) is not None:
            raise InvalidJobOptionError(self.message)

    def sql(self) -> str:
        return _raise_sql(
            f"new_{self.first} IS NOT NULL AND new_{self.second} IS NOT NULL", self.message
        )


@dataclass(frozen=True)
class Needs(Rule):
    """An option that means nothing without another one; `why` says what it adds."""

    option: str
    needs: str
    why: str

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.option, self.needs)

    @property
    def message(self) -> str:
        return f"{self.option} needs {self.needs}: {self.why}; pass {self.needs} as well"

    def check(self, values: Mapping[str, Any]) -> None:
        if values.get(self.option) is not None and values.get(self.needs) is None:
            raise InvalidJobOptionError(self.message)

    def sql(self) -> str:
        condition = f"new_{self.option} IS NOT NULL AND new_{self.needs} IS NULL"
        return _raise_sql(condition, self.message)


@dataclass(frozen=True)
class IndexEntry(Rule):
    """Options stored in one index entry: together at most `checks.MAX_IDEMPOTENCY_BYTES` of
    UTF-8 when `key` is given (`parts` ends with `key`)."""

    parts: tuple[str, ...]
    key: str

    @property
    def reads(self) -> tuple[str, ...]:
        return self.parts

    def _message(self, size: str) -> str:
        return (
            f"{' and '.join(self.parts)} together must be at most "
            f"{checks.MAX_IDEMPOTENCY_BYTES:,} bytes of UTF-8 (one index entry holds both), got "
            f"{size}; use a shorter scope or key (e.g. a hash of a long one)"
        )

    def check(self, values: Mapping[str, Any]) -> None:
        if values.get(self.key) is None:
            return
        size = sum(len(str(values.get(p) or "").encode()) for p in self.parts)
        if size > checks.MAX_IDEMPOTENCY_BYTES:
            raise InvalidJobOptionError(self._message(f"{size:,}"))

    def sql(self) -> str:
        size = "\n        + ".join(f"octet_length(coalesce(new_{p}, ''))" for p in self.parts)
        return _raise_sql(
            f"new_{self.key} IS NOT NULL AND (\n        {size}) > {checks.MAX_IDEMPOTENCY_BYTES}",
            self._message("%"),
            f"to_char(\n        {size}, 'FM999,999,990')",
        )


RULES: tuple[Rule, ...] = (
    NotBoth("delay", "run_at"),
    Needs(
        "unique_for",
        "identity_key",
        "it widens 'one active job per identity' to 'one job per identity within the window'",
    ),
    IndexEntry(("idempotency_scope", "idempotency_key"), "idempotency_key"),
)


def check(values: Mapping[str, Any]) -> None:
    """Apply every rule to `values`; raises on the first broken one."""
    for rule in RULES:
        rule.check(values)
