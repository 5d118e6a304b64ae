"""The demo's application: a table of rows, and a little real work per row.

Each row's text is hashed and the checksum written back to a column that the walk does not key
on (the key is `id`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from sweepq.core.app import App
from sweepq.core.context import Context
from sweepq.core.outcomes import Cancel
from sweepq.core.queries import Executor
from sweepq.core.sqlfiles import load_statements

DEMO_QUEUE = "sweepq-demo"
DEMO_TASK = "sweepq-demo.checksum"
DEMO_TABLE = "demo_rows"


class DemoQueries:
    """The statements of `cli/sql/demo.sql`, bound to the demo's schema."""

    def __init__(self, schema: str) -> None:
        self.sql: Mapping[str, str] = load_statements("sweepq.cli.sql", schema)

    async def demo_table_reset(self, conn: Executor) -> None:
        await conn.execute(self.sql["demo_table_reset"])

    async def demo_rows_fill(self, conn: Executor, rows: int) -> None:
        await conn.execute(self.sql["demo_rows_fill"], rows)

    async def demo_table_analyze(self, conn: Executor) -> None:
        await conn.execute(self.sql["demo_table_analyze"])

    async def demo_row_body(self, conn: Executor, row_id: int) -> str | None:
        body: str | None = await conn.fetchval(self.sql["demo_row_body"], row_id)
        return body

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
    """The demo's App: its tasks on `schema`."""
    app = App(dsn, schema=schema, pool_max_size=pool_max_size)
    queries = DemoQueries(schema)

    @app.task(name=DEMO_TASK, queue=DEMO_QUEUE, max_attempts=3)
    async def checksum_row(ctx: Context, row_id: int) -> None:
        async with ctx.app.connection() as conn:
            body = await queries.demo_row_body(conn, row_id)
            if body is None:
                raise Cancel(f"row {row_id} is gone")
            await queries.demo_row_set_checksum(conn, row_id, checksum(body))

    return app
