"""Loading named SQL statements from `.sql` files.

A file holds statements under `-- name: noun_verb` headers, each followed by a one-line purpose.
`{schema}` in the text is replaced by the schema name, quoted after validation, once at load.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

from .ident import ident

_HEADER = re.compile(r"^-- name: ([a-z][a-z0-9_]*)\s*$", re.MULTILINE)


def parse_statements(text: str) -> dict[str, str]:
    """Split a `.sql` file's text into {name: statement}."""
    parts = _HEADER.split(text)
    statements: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in statements:
            raise ValueError(f"statement {name!r} is defined twice")
        statements[name] = body.strip().rstrip(";")
    return statements


def load_statements(
    package: str, schema: str, fragments: Mapping[str, str] | None = None
) -> Mapping[str, str]:
    """Load every `*.sql` file of `package` into a frozen {name: SQL} map for `schema`.

    `fragments` replaces other placeholders with SQL generated from declarations in the code
    (never from input), such as the job options' parameter list.
    """
    quoted = ident(schema, what="schema name")
    statements: dict[str, str] = {}
    for entry in sorted(resources.files(package).iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, body in parse_statements(entry.read_text(encoding="utf-8")).items():
            if name in statements:
                raise ValueError(f"statement {name!r} is defined in two files of {package}")
            for placeholder, sql in (fragments or {}).items():
                body = body.replace(placeholder, sql)
            statements[name] = body.replace("{schema}", quoted)
    return MappingProxyType(statements)
