"""The table of job options in the jobs guide is the one the declaration of the options gives."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sweepq.core.checks import MAX_KEY_LENGTH
from sweepq.core.errors import InvalidJobOptionError
from sweepq.core.options import OPTIONS, docs_table
from sweepq.core.options.kinds import Text
from sweepq.core.queries import Conn

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "jobs-clients.md"
BLOCK = re.compile(
    r"<!-- options-table:start -->\n(?P<table>.*?)\n<!-- options-table:end -->", re.S
)


def test_the_guides_table_of_options_is_generated_from_their_declaration() -> None:
    match = BLOCK.search(GUIDE.read_text(encoding="utf-8"))
    assert match is not None, "jobs-clients.md has no options table block"
    assert match["table"] == docs_table(), (
        "the options changed: paste the output of sweepq.core.options.docs_table() into the guide"
    )


def test_every_option_is_described_in_the_guide() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    missing = [
        o.name for o in OPTIONS if f"\n`{o.name}`" not in text and f"`, `{o.name}`" not in text
    ]
    assert missing == []


@pytest.mark.parametrize("kind", [Text(), Text(empty_ok=True), Text(longest=5)], ids=repr)
@pytest.mark.parametrize(
    "value",
    ["", "abcde", "abcdef", "x" * MAX_KEY_LENGTH, "x" * (MAX_KEY_LENGTH + 1), 5, None],
    ids=lambda value: f"{value!r:.12}",
)
async def test_a_text_kind_takes_in_sql_exactly_what_it_takes_in_python(
    conn: Conn, kind: Text, value: object
) -> None:
    refusal = ""
    try:
        kind.check(value, "key")
    except InvalidJobOptionError as exc:
        refusal = str(exc)
    python = not refusal
    assert python or f"at most {kind.longest} characters" in refusal  # its own bound, named
    query = f"SELECT {kind.sql_test('key')} FROM (SELECT $1::jsonb AS val) AS given"
    sql = await conn.fetchval(query, json.dumps(value))
    assert sql is python, f"{kind!r} on {value!r}: SQL says {sql}, Python {python}"
