"""The demo's application: a table of rows, and a sweep doing a little real work per row.

Each row's text is hashed and the checksum written back to a column that the walk does not key
on (the key is `id`, which nothing writes).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from sweepq.core.context import Context
from sweepq.core.queries import Executor
from sweepq.core.sqlfiles import load_statements
from sweepq.sweeps.app import App
from sweepq.sweeps.table import TableSweep

DEMO_QUEUE = "sweepq-demo"
DEMO_SWEEP = "sweepq-demo"
DEMO_TABLE = "demo_rows"


class DemoQueries:
    """The statements of `cli/sql/demo.sql`, bound to the demo's schema."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.sql: Mapping[str, str] = load_statements("sweepq.cli.sql", schema)

    async def demo_schema_state(self, conn: Executor) -> tuple[bool, bool]:
        """(the schema exists, it holds the demo table)."""
        record = await conn.fetchrow(self.sql["demo_schema_state"], self.schema)
        assert record is not None  # a SELECT without FROM returns its one row
        return record[0], record[1]

    async def demo_lock_try(self, conn: Executor) -> bool:
        return bool(await conn.fetchval(self.sql["demo_lock_try"], self.schema))

    async def demo_lock_wait(self, conn: Executor) -> None:
        await conn.execute(self.sql["demo_lock_wait"], self.schema)

    async def demo_schema_size(self, conn: Executor) -> int:
        return int(await conn.fetchval(self.sql["demo_schema_size"], self.schema))

    async def demo_schema_drop(self, conn: Executor) -> None:
        await conn.execute(self.sql["demo_schema_drop"])

    async def demo_table_create(self, conn: Executor) -> None:
        await conn.execute(self.sql["demo_table_create"])

    async def demo_rows_fill(self, conn: Executor, rows: int) -> None:
        await conn.execute(self.sql["demo_rows_fill"], rows)

    async def demo_table_analyze(self, conn: Executor) -> None:
        await conn.execute(self.sql["demo_table_analyze"])

    async def demo_row_set_checksum(self, conn: Executor, row_id: int, checksum: str) -> None:
        await conn.execute(self.sql["demo_row_set_checksum"], row_id, checksum)

    async def demo_rows_checked(self, conn: Executor) -> tuple[int, int]:
        """(rows, rows with a checksum)."""
        record = await conn.fetchrow(self.sql["demo_rows_checked"])
        assert record is not None  # an aggregate always returns its one row
        return record[0], record[1]


def checksum(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def build_demo_app(dsn: str, schema: str, *, pool_max_size: int) -> App:
    """The demo's App on `schema`, with its sweep over `<schema>.demo_rows` registered."""
    app = App(dsn, schema=schema, pool_max_size=pool_max_size)
    queries = DemoQueries(schema)

    class ChecksumRows(TableSweep):
        name = DEMO_SWEEP
        table = f"{schema}.{DEMO_TABLE}"
        key = ("id",)
        columns = ("id", "body")
        queue = DEMO_QUEUE
        page_size = 1_000
        window = 10_000

        async def handle(self, ctx: Context, item: dict[str, Any]) -> None:
            await queries.demo_row_set_checksum(ctx.app.pool, item["id"], checksum(item["body"]))

    app.register_sweep(ChecksumRows)
    return app
