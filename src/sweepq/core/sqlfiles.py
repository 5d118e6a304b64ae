"""Loading named SQL statements from `.sql` files.

A file holds statements under `-- name: noun_verb` headers, each followed by a one-line purpose.
`{schema}` in the text is replaced by the schema name, quoted after validation, once at load.
A `-- part: noun` header holds text that two statements share (CTEs of the two claims, say): a
statement names it as `{part:noun}`, and a part is never a statement of its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

from .ident import ident

_HEADER = re.compile(r"^-- (name|part): ([a-z][a-z0-9_]*)\s*$", re.MULTILINE)
_PART = re.compile(r"\{part:([a-z][a-z0-9_]*)\}")


def parse_statements(text: str) -> dict[str, str]:
    """Split a `.sql` file's text into {name: statement}, each part it names put in place."""
    pieces = _HEADER.split(text)
    found: dict[tuple[str, str], str] = {}
    for kind, name, body in zip(pieces[1::3], pieces[2::3], pieces[3::3], strict=True):
        if (kind, name) in found:
            what = "statement" if kind == "name" else "part"
            raise ValueError(f"{what} {name!r} is defined twice")
        found[kind, name] = body.strip()
    parts = {name: body for (kind, name), body in found.items() if kind == "part"}

    def put(match: re.Match[str]) -> str:
        if match[1] not in parts:
            raise ValueError(f"part {match[1]!r} is named but not defined")
        return parts[match[1]]

    return {
        name: _PART.sub(put, body).rstrip(";")
        for (kind, name), body in found.items()
        if kind == "name"
    }


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
