"""Durations on the command line: one number and one unit."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sweepq.cli.durations import parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("15m", timedelta(minutes=15)),
        ("12h", timedelta(hours=12)),
        ("7d", timedelta(days=7)),
        ("2w", timedelta(weeks=2)),
        ("1.5h", timedelta(minutes=90)),
        ("0s", timedelta(0)),
    ],
)
def test_durations_parse_with_one_unit(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected
