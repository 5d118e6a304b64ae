"""Writes per job: rows written and WAL bytes per job, enqueue and processing apart.

Each variant runs on a fresh schema: N no-op jobs enqueued with `enqueue_many` (COPY), then
drained by one worker (20 slots, `run_until_idle`). Printed per job, for the enqueue and for
the processing: WAL bytes (`pg_current_wal_insert_lsn()` before and after, the server otherwise
quiet) and rows inserted / updated / deleted per table (`pg_stat_user_tables` deltas, read once
the worker's connections closed and reported), and the claims and outcome writes per job:

- plain: jobs without keys (the light claim);
- keyed: 100 jobs per concurrency key, no limit;
- limited: 100 jobs per key, limit 5 per key;
- the SQL loop: PostgreSQL alone, the least a queue writes: a bare table with one partial index
  (`state = 'available'`), filled by COPY, then a claim of 20 (`FOR UPDATE SKIP LOCKED`, then
  UPDATE) and an UPDATE to `done` per 20, each its own commit;
- pgqueuer, when it is importable (the peer bench's venv has it: see `../shared/bench/`): its
  own tables in a scratch schema, `Queries.enqueue` of the batch, one `PgQueuer` worker
  (batch_size 10, 20 tasks) until the queue is empty.

    .venv/bin/python benchmarks/writes.py [--quick] [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import anyio
import asyncpg
from _common import (
    bench_dsn,
    bench_schema,
    count_queries,
    parse_args,
    print_environment,
    table,
)

import sweepq

TASK = "bench.noop"
KEY_SIZE = 100
LIMIT = 5


class Phase(NamedTuple):
    wal: int
    rows: dict[str, tuple[int, int, int]]


class Result(NamedTuple):
    name: str
    jobs: int
    enqueue: Phase
    process: Phase
    statements: str


async def _lsn(conn: asyncpg.Connection[Any]) -> int:
    return int(await conn.fetchval("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"))


async def _rows(conn: asyncpg.Connection[Any], schema: str) -> dict[str, tuple[int, int, int]]:
    """Per table of `schema`: (inserted, updated, deleted) as reported so far."""
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    records = await conn.fetch(
        "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables"
        " WHERE schemaname = $1",
        schema,
    )
    return {r[0]: (r[1], r[2], r[3]) for r in records}


async def measured(
    conn: asyncpg.Connection[Any], schema: str, work: Callable[[], Awaitable[None]]
) -> Phase:
    """WAL bytes and rows written by `work` (statistics read once backends have reported)."""
    await anyio.sleep(1.5)
    rows0, wal0 = await _rows(conn, schema), await _lsn(conn)
    await work()
    wal1 = await _lsn(conn)
    await anyio.sleep(1.5)  # idle backends report their counts within a second
    rows1 = await _rows(conn, schema)
    delta = {
        name: tuple(a - b for a, b in zip(rows1[name], rows0.get(name, (0, 0, 0)), strict=True))
        for name in rows1
    }
    # Rows of the migrations reported late by the pool that ran them are not the jobs' writes.
    kept = {k: v for k, v in delta.items() if any(v) and k != "schema_migrations"}
    return Phase(wal1 - wal0, kept)  # type: ignore[arg-type]


async def sweepq_variant(name: str, jobs: int, key: Callable[[int], str | None]) -> Result:
    schema = bench_schema("writes")
    app = sweepq.App(bench_dsn(), schema=schema)

    async def noop(ctx: sweepq.Context) -> None:
        return None

    app.task(name=TASK)(noop)
    async with app:
        await app.migrate()
        try:
            if name == "limited":
                for k in range(0, jobs, KEY_SIZE):
                    await app.set_concurrency_limit(f"k{k // KEY_SIZE}", LIMIT)
            conn = await asyncpg.connect(bench_dsn())
            try:

                async def enqueue() -> None:
                    # On a connection of its own, closed at the end: a backend reports its
                    # row counts when it closes (an idle pooled one only every 10 s).
                    own = await asyncpg.connect(bench_dsn())
                    try:
                        for start in range(0, jobs, 10_000):
                            specs = [
                                sweepq.JobSpec(TASK, concurrency_key=key(i))
                                for i in range(start, min(jobs, start + 10_000))
                            ]
                            async with own.transaction():
                                await app.enqueue_many(specs, conn=own)
                    finally:
                        await own.close()

                calls = count_queries(app.queries)

                async def process() -> None:
                    async with sweepq.Worker(app, concurrency=20) as worker:
                        await worker.run_until_idle()

                enqueued = await measured(conn, schema, enqueue)
                calls.clear()
                processed = await measured(conn, schema, process)
            finally:
                await conn.close()
            claims = calls["job_claim"]
            finishes = calls["job_finish_many"]
            per = f"{claims / jobs:.3f} claims, {finishes / jobs:.3f} outcome writes"
            return Result(name, jobs, enqueued, processed, per)
        finally:
            await app.pool.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def sql_loop(jobs: int) -> Result:
    schema = bench_schema("writes_sql")
    conn = await asyncpg.connect(bench_dsn())
    q = f'"{schema}".q'
    try:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        await conn.execute(
            f"CREATE TABLE {q} (id bigserial PRIMARY KEY, task text NOT NULL,"
            " args json NOT NULL DEFAULT '{}', state text NOT NULL DEFAULT 'available',"
            " run_at timestamptz NOT NULL DEFAULT now(), worker text)"
        )
        await conn.execute(f"CREATE INDEX ON {q} (run_at, id) WHERE state = 'available'")

        async def enqueue() -> None:
            await conn.copy_records_to_table(
                "q", schema_name=schema, columns=["task"], records=[(TASK,)] * jobs
            )

        async def process() -> None:
            while True:
                ids = await conn.fetch(
                    f"UPDATE {q} SET state = 'running', worker = 'w' WHERE id IN ("
                    f" SELECT id FROM {q} WHERE state = 'available' AND run_at <= now()"
                    "  ORDER BY run_at, id LIMIT 20 FOR UPDATE SKIP LOCKED) RETURNING id"
                )
                if not ids:
                    return
                await conn.execute(
                    f"UPDATE {q} SET state = 'done', worker = NULL WHERE id = ANY($1::bigint[])",
                    [r[0] for r in ids],
                )

        enqueued = await measured(conn, schema, enqueue)
        processed = await measured(conn, schema, process)
        return Result("SQL loop", jobs, enqueued, processed, "0.050 claims, 0.050 outcome writes")
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


async def pgqueuer_variant(jobs: int) -> Result | None:
    try:
        from pgqueuer import PgQueuer, Queries  # type: ignore[import-not-found]
        from pgqueuer.db import AsyncpgDriver  # type: ignore[import-not-found]
    except ImportError:
        return None
    schema = bench_schema("writes_pgq")
    admin = await asyncpg.connect(bench_dsn())
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    settings = {"search_path": schema}
    try:
        conn = await asyncpg.connect(bench_dsn(), server_settings=settings)
        try:
            await Queries(AsyncpgDriver(conn)).install()

            async def enqueue() -> None:
                own = await asyncpg.connect(bench_dsn(), server_settings=settings)
                try:  # closed at the end, so that its row counts are reported
                    producer = Queries(AsyncpgDriver(own))
                    for start in range(0, jobs, 1_000):
                        n = min(1_000, jobs - start)
                        await producer.enqueue([TASK] * n, [json.dumps({}).encode()] * n, [0] * n)
                finally:
                    await own.close()

            async def process() -> None:
                worker_conn = await asyncpg.connect(bench_dsn(), server_settings=settings)
                try:
                    pgq = PgQueuer.from_asyncpg_connection(worker_conn)

                    @pgq.entrypoint(TASK)  # type: ignore[untyped-decorator]
                    async def noop(job: Any) -> None:
                        return None

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(lambda: pgq.run(batch_size=10, max_concurrent_tasks=20))
                        await _until_empty(admin, f'"{schema}".pgqueuer')
                        await anyio.sleep(0.5)  # the last outcomes' log rows
                        pgq.shutdown.set()
                finally:
                    await worker_conn.close()

            enqueued = await measured(admin, schema, enqueue)
            processed = await measured(admin, schema, process)
        finally:
            await conn.close()
        return Result("pgqueuer", jobs, enqueued, processed, "(its own loop)")
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.close()


async def _until_empty(conn: asyncpg.Connection[Any], table_name: str) -> None:
    """Poll until `table_name` (a queue table of this run) holds no row."""
    while True:
        if not await conn.fetchval(f"SELECT count(*) FROM {table_name}"):
            return
        await anyio.sleep(0.05)


def _rows_text(phase: Phase, jobs: int) -> str:
    parts = []
    for name, (ins, upd, dele) in sorted(phase.rows.items()):
        if ins + upd + dele < jobs / 200:
            continue  # less than 0.005 per job: another phase's late report
        counts = "/".join(f"{n / jobs:.2f}" for n in (ins, upd, dele))
        parts.append(f"{name} {counts}")
    return "; ".join(parts) or "-"


def _total(phase: Phase, jobs: int) -> float:
    return sum(sum(v) for v in phase.rows.values()) / jobs


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=0, help="jobs per variant")


async def main(args: argparse.Namespace) -> None:
    jobs = args.jobs or (2_000 if args.quick else 20_000)
    await print_environment(f"Writes per job: {jobs:,} no-op jobs per variant")
    started = time.perf_counter()
    results = [
        await sweepq_variant("plain", jobs, lambda i: None),
        await sweepq_variant("keyed", jobs, lambda i: f"k{i // KEY_SIZE}"),
        await sweepq_variant("limited", jobs, lambda i: f"k{i // KEY_SIZE}"),
        await sql_loop(jobs),
    ]
    peer = await pgqueuer_variant(jobs)
    if peer is None:
        print("pgqueuer: not importable here; run this script with the peer bench's python")
    else:
        results.append(peer)
    base = next(r for r in results if r.name == "SQL loop")
    rows: list[list[object]] = []
    for r in results:
        rows.append([
            r.name,
            r.enqueue.wal / r.jobs,
            r.process.wal / r.jobs,
            (r.process.wal / r.jobs) / max(1.0, base.process.wal / base.jobs),
            _total(r.enqueue, r.jobs),
            _total(r.process, r.jobs),
            r.statements,
        ])  # fmt: skip
    table(
        "per job (WAL in bytes; rows = inserted + updated + deleted, all tables)",
        ["variant", "enqueue WAL", "processing WAL", "x SQL loop", "enqueue rows",
         "processing rows", "statements per job"],
        rows,
    )  # fmt: skip
    table(
        "processing: rows per job by table (inserted/updated/deleted)",
        ["variant", "tables"],
        [[r.name, _rows_text(r.process, r.jobs)] for r in results],
    )
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    anyio.run(
        main,
        parse_args("Rows and WAL bytes written per job.", _options),
    )
