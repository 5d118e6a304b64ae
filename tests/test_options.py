"""The table of job options in the jobs guide is the one the declaration of the options gives."""

from __future__ import annotations

import re
from pathlib import Path

from sweepq.core.options import OPTIONS, docs_table

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
