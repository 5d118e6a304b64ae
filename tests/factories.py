"""Direct-SQL factories: set up and read rows where the API under test would hide the point.

Each takes the app and plain values, and runs on `on` if given (the rolled-back tier's `conn`),
else on the app's pool (`drop_schema` takes the connection itself). Names in SQL text pass
`ident()`; values are parameters.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg

import sweepq
from sweepq.core.ident import ident
from sweepq.core.queries import Executor

_TABLES_SQL = "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename"


def _on(app: sweepq.App, on: Executor | None) -> Executor:
    return app.pool if on is None else on


def _table(app: sweepq.App, table: str) -> str:
    return f"{ident(app.schema)}.{ident(table, what='table name')}"


# reading ----------------------------------------------------------------------------------------


async def count_rows(app: sweepq.App, table: str, *, on: Executor | None = None) -> int:
    """Rows of `table` in the app's schema."""
    return int(await _on(app, on).fetchval(f"SELECT count(*) FROM {_table(app, table)}"))


async def table_counts(app: sweepq.App, *, on: Executor | None = None) -> dict[str, int]:
    """Rows of every table of the app's schema, by table name."""
    executor = _on(app, on)
    tables = [r[0] for r in await executor.fetch(_TABLES_SQL, app.schema)]
    counts = ", ".join(f"(SELECT count(*) FROM {_table(app, t)})" for t in tables)
    return dict(zip(tables, await executor.fetchval(f"SELECT ARRAY[{counts}]"), strict=True))


async def count_jobs(
    app: sweepq.App,
    *states: str,
    task: str | None = None,
    scope: str | None = None,
    on: Executor | None = None,
) -> int:
    """Jobs in any of `states` (all states if none), of `task` and `idempotency_scope` if given."""
    return int(
        await _on(app, on).fetchval(
            f"SELECT count(*) FROM {_table(app, 'jobs')}"
            " WHERE (cardinality($1::text[]) = 0 OR state::text = ANY($1::text[]))"
            " AND ($2::text IS NULL OR task = $2) AND ($3::text IS NULL OR idempotency_scope = $3)",
            list(states),
            task,
            scope,
        )
    )


async def key_counts(app: sweepq.App, scope: str, *, on: Executor | None = None) -> dict[str, int]:
    """Jobs holding each idempotency key of `scope` (a sweep's leaves: one each)."""
    rows = await _on(app, on).fetch(
        f"SELECT idempotency_key, count(*) FROM {_table(app, 'jobs')}"
        " WHERE idempotency_scope = $1 GROUP BY 1",
        scope,
    )
    return {r[0]: r[1] for r in rows}


async def handled_items(app: sweepq.App, *, on: Executor | None = None) -> list[int]:
    """The item of every execution `create_items`' `handled` table recorded (repeats kept)."""
    return [r[0] for r in await _on(app, on).fetch(f"SELECT item_id FROM {_table(app, 'handled')}")]


async def job_ids(app: sweepq.App, *, on: Executor | None = None) -> set[int]:
    """The ids of every job."""
    return {r[0] for r in await _on(app, on).fetch(f"SELECT id FROM {_table(app, 'jobs')}")}


async def key_running(app: sweepq.App, key: str, *, on: Executor | None = None) -> int:
    """The concurrency key's running count (its row must exist)."""
    value = await _on(app, on).fetchval(
        f"SELECT running FROM {_table(app, 'concurrency_keys')} WHERE key = $1", key
    )
    assert value is not None, f"no row for concurrency key {key!r}"
    return int(value)


async def key_next_run_at(
    app: sweepq.App, key: str, *, on: Executor | None = None
) -> datetime | None:
    """The key's place in the claim's walk (None: not in it)."""
    value: datetime | None = await _on(app, on).fetchval(
        f"SELECT next_run_at FROM {_table(app, 'concurrency_keys')} WHERE key = $1", key
    )
    return value


async def lease_lapsed(app: sweepq.App, job_id: int, *, on: Executor | None = None) -> bool:
    """Whether the job's lease ended before the database's now()."""
    return bool(
        await _on(app, on).fetchval(
            f"SELECT lease_expires_at < now() FROM {_table(app, 'jobs')} WHERE id = $1", job_id
        )
    )


async def schema_exists(app: sweepq.App, schema: str, *, on: Executor | None = None) -> bool:
    """Whether a schema of this name exists."""
    found = await _on(app, on).fetchval(
        "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema
    )
    return bool(found)


# writing ----------------------------------------------------------------------------------------


async def backdate_jobs(
    app: sweepq.App,
    by: timedelta,
    *columns: str,
    ids: Sequence[int] | None = None,
    on: Executor | None = None,
) -> int:
    """Move the jobs' (all, or `ids`) timestamp `columns` back by `by`; the jobs changed."""
    assert columns, "name the columns to move back"
    shifts = ", ".join(f"{ident(c)} = {ident(c)} - $1::interval" for c in columns)
    status = await _on(app, on).execute(
        f"UPDATE {_table(app, 'jobs')} SET {shifts}"
        " WHERE $2::bigint[] IS NULL OR id = ANY($2::bigint[])",
        by,
        None if ids is None else list(ids),
    )
    return int(status.split()[-1])


async def backdate_keys(
    app: sweepq.App, by: timedelta, keys: Sequence[str], *, on: Executor | None = None
) -> None:
    """Move the concurrency keys' `updated_at` back by `by`, as if untouched since."""
    await _on(app, on).execute(
        f"UPDATE {_table(app, 'concurrency_keys')} SET updated_at = updated_at - $1::interval"
        " WHERE key = ANY($2::text[])",
        by,
        list(keys),
    )


async def expire_lease(
    app: sweepq.App,
    job_id: int | None = None,
    *,
    ago: timedelta = timedelta(seconds=1),
    on: Executor | None = None,
) -> None:
    """End the lease of a running job (or of every running job) `ago` before now()."""
    await _on(app, on).execute(
        f"UPDATE {_table(app, 'jobs')} SET lease_expires_at = now() - $2::interval"
        " WHERE state = 'running' AND ($1::bigint IS NULL OR id = $1)",
        job_id,
        ago,
    )


@contextlib.asynccontextmanager
async def connected_as(app: sweepq.App, worker_id: str) -> AsyncIterator[None]:
    """Hold a connection named as worker `worker_id`'s are, so that a rescue of its jobs takes
    it for alive (a stalled worker) rather than dead (no connection left)."""
    conn = await asyncpg.connect(
        app.dsn, server_settings={"application_name": f"sweepq worker {worker_id}"[:63]}
    )
    try:
        yield
    finally:
        await conn.close()


async def expire_deadline(app: sweepq.App, job_id: int, *, on: Executor | None = None) -> None:
    """Put the job's deadline a second before now()."""
    await _on(app, on).execute(
        f"UPDATE {_table(app, 'jobs')} SET deadline_at = now() - interval '1 s' WHERE id = $1",
        job_id,
    )


async def set_key_next_run_at(
    app: sweepq.App, key: str, at: datetime | None, *, on: Executor | None = None
) -> None:
    """Set the key's place in the claim's walk."""
    await _on(app, on).execute(
        f"UPDATE {_table(app, 'concurrency_keys')} SET next_run_at = $2 WHERE key = $1", key, at
    )


async def create_table(
    app: sweepq.App, table: str, columns: str, *, on: Executor | None = None
) -> str:
    """Create `table` (column definitions in SQL) in the app's schema; its qualified name."""
    await _on(app, on).execute(f"CREATE TABLE {_table(app, table)} ({columns})")
    return f"{app.schema}.{table}"


async def insert_rows(
    app: sweepq.App, table: str, rows: Sequence[Sequence[Any]], *, on: Executor | None = None
) -> None:
    """Insert `rows` (values in column order) into `table`."""
    width = len(rows[0])
    values = ", ".join(f"${n}" for n in range(1, width + 1))
    await _on(app, on).executemany(f"INSERT INTO {_table(app, table)} VALUES ({values})", rows)


async def create_items(
    app: sweepq.App, count: int, *, failing: range = range(0), on: Executor | None = None
) -> None:
    """`items` (id, created_at, updated_at, fail) with `count` rows, and an empty `handled`."""
    executor = _on(app, on)
    await create_table(
        app,
        "items",
        """id         bigint      PRIMARY KEY,
           created_at timestamptz NOT NULL,
           updated_at timestamptz NOT NULL,
           fail       boolean     NOT NULL DEFAULT false""",
        on=executor,
    )
    await create_table(
        app, "handled", "item_id bigint NOT NULL, at timestamptz DEFAULT now()", on=executor
    )
    # Several rows share each created_at, so the key (created_at, id) needs its tiebreaker.
    await executor.execute(
        f"""
        INSERT INTO {_table(app, "items")} (id, created_at, updated_at, fail)
        SELECT i, timestamptz '2020-01-01' + (i / 7) * interval '1.5 second',
               timestamptz '2020-01-01' + i * interval '1 second', i = ANY($2::bigint[])
        FROM generate_series(1, $1::bigint) AS i
        """,
        count,
        list(failing),
    )


async def drop_schema(on: Executor, schema: str) -> None:
    """Drop a schema and everything in it, if it exists."""
    await on.execute(f"DROP SCHEMA IF EXISTS {ident(schema, what='schema name')} CASCADE")
