"""The named-statement loader: parts shared by statements, and its refusals."""

from __future__ import annotations

import pytest

from sweepq.core.sqlfiles import parse_statements


def test_a_part_is_put_in_place_in_each_statement_that_names_it_and_is_no_statement() -> None:
    text = """
-- part: chosen
-- The jobs chosen.
chosen AS (SELECT 1 AS id)

-- name: one_read
-- Reads them.
WITH {part:chosen} SELECT id FROM chosen;

-- name: two_read
-- Reads them too.
WITH {part:chosen}, more AS (SELECT 2) SELECT id FROM chosen;
"""
    statements = parse_statements(text)
    assert set(statements) == {"one_read", "two_read"}
    assert "chosen AS (SELECT 1 AS id)" in statements["one_read"]
    assert "chosen AS (SELECT 1 AS id), more" in statements["two_read"]
    assert "{part:" not in statements["one_read"] + statements["two_read"]


def test_a_part_named_but_not_defined_and_a_name_defined_twice_are_refused() -> None:
    with pytest.raises(ValueError, match="part 'missing' is named but not defined"):
        parse_statements("-- name: a_read\n-- x\nSELECT {part:missing};\n")
    with pytest.raises(ValueError, match="statement 'a_read' is defined twice"):
        parse_statements("-- name: a_read\n-- x\nSELECT 1;\n-- name: a_read\n-- y\nSELECT 2;\n")
    with pytest.raises(ValueError, match="part 'p' is defined twice"):
        parse_statements("-- part: p\n-- x\n1\n-- part: p\n-- y\n2\n")


def test_every_statement_fits_the_statement_cache_of_the_pools() -> None:
    """asyncpg keeps prepared only statements up to the pools' limit: a longer one would be
    parsed and planned again on every call (the claim once was, at 4x its cost)."""
    from sweepq.core.database import STATEMENT_CACHE_BYTES
    from sweepq.core.sqlfiles import load_statements

    for package in ("sweepq.core.sql", "sweepq.sweeps.sql", "sweepq.cli.sql"):
        for name, sql in load_statements(
            package, "a_schema_name_of_63_characters_" + "x" * 32
        ).items():
            assert len(sql.encode()) < STATEMENT_CACHE_BYTES // 2, (package, name)
