"""The dashboard's pages at 1,000,000 jobs: what each costs to serve, and its slowest query.

The jobs are inserted directly (one `INSERT ... SELECT FROM generate_series`, then ANALYZE),
as a week of a busy application would leave them, oldest first:

- 97 % finished: completed, 2 % failed (each with a traceback of ~600 bytes), 1 % cancelled,
  each finished a few seconds after it was created, so the last hour holds ~6,000;
- the newest 3 % live: available (due), scheduled for the next hour, and 1 in 10 of them
  running (a worker's lease);
- queues default, mail, images, payments, reports, webhooks, and `sweeps` for the 60,000 leaves
  of a running sweep run (every fifth job of the newest 30 %, with its group); 12 tasks, and
  10 jobs of a task found nowhere else (`rare_audit`: a filter that matches almost nothing);
- 20 % on 1,000 concurrency keys (`tenant-<n>`, a limit of 5 on every tenth key), 2 % in 200
  job groups (`import-<n>`); 3 cron schedules.

Each page is then requested through the dashboard's ASGI application (httpx's ASGITransport,
no network) once to warm up and `--repeat` times (default 5). Printed per page: the median
time of the whole request; the median of its slowest statement and that statement's name
(statements are timed on the client around asyncpg's round trip, as the server here has no
pg_stat_statements loaded: this includes the network, here a loopback); statements per page;
the size of its HTML, and gzipped (what a proxy that compresses would send). Then every
statement the pages ran: on how many pages, and its median on the page where it is fastest and
where it is slowest.

    .venv/bin/python benchmarks/dashboard.py [--quick] [--jobs N] [--repeat R]

`--quick` fills 100,000 jobs. The scratch schema is dropped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
from _common import bench_app, console, parse_args, print_environment, table

import sweepq
from sweepq.core.ident import ident
from sweepq.core.sqlfiles import load_statements
from sweepq.sweeps.naming import leaf_group
from sweepq.web import create_app

REPEAT = 5
SWEEP = "bench_reindex"
QUEUES = ["default"] * 8 + ["mail"] * 4 + ["images"] * 3 + ["payments"] * 2 + ["reports"]
QUEUES += ["webhooks"] * 2
TASKS = ["send_email", "send_sms", "resize_image", "charge_card", "refund", "build_report",
         "sync_inventory", "deliver_webhook", "index_document", "expire_session", "notify_slack",
         "export_csv"]  # fmt: skip
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/sweepq/core/execution.py", line 88, in execute\n'
    "    returned = await task.fn(ctx, **kwargs)\n"
    '  File "/srv/app/shop/tasks.py", line 214, in sync_inventory\n'
    "    stock = await client.fetch_stock(warehouse, timeout=30)\n"
    '  File "/srv/app/shop/inventory.py", line 57, in fetch_stock\n'
    "    response = await self._session.get(url, params=query)\n"
    '  File "/srv/app/.venv/lib/python3.12/site-packages/httpx/_client.py", line 1768, in get\n'
    "    return await self.request(...)\n"
    "httpx.ConnectError: [Errno 111] Connection refused (inventory.internal:8443)\n"
)

FILL_SQL = """
INSERT INTO {jobs} (task, queue, state, args, attempt, max_attempts, run_at, created_at,
                    attempted_at, finished_at, failure_reason, errors, worker_id,
                    lease_expires_at, concurrency_key, job_group, idempotency_scope,
                    idempotency_key)
SELECT task, queue, state, args,
       CASE WHEN state IN ('completed', 'running') THEN 1 WHEN state = 'failed' THEN 5 ELSE 0 END,
       5,
       CASE WHEN scheduled THEN now() + make_interval(secs => (g % 3600) + 60) ELSE created END,
       created,
       CASE WHEN state IN ('available') THEN NULL ELSE created + interval '0.5 second' END,
       CASE WHEN state IN ('completed', 'failed', 'cancelled')
            THEN created + make_interval(secs => 1 + g % 30) END,
       CASE WHEN state = 'failed' THEN 'max_attempts_exceeded' END,
       CASE WHEN state = 'failed' THEN jsonb_build_array(jsonb_build_object(
            'at', created, 'kind', 'exception', 'attempt', 5, 'error', $2::text))
            ELSE '[]'::jsonb END,
       CASE WHEN state = 'running' THEN 'bench:worker:' || (g % 8) END,
       CASE WHEN state = 'running' THEN now() + interval '30 seconds' END,
       concurrency_key, job_group, coalesce(job_group, ''),
       CASE WHEN job_group LIKE 'sweep:%' THEN g::text END
FROM (
    SELECT g, created, scheduled,
           CASE WHEN leaf THEN 'sweepq.sweep.{sweep}.leaf'
                WHEN g % 100000 = 7 THEN 'rare_audit'
                ELSE ($3::text[])[1 + (g / 3) % cardinality($3::text[])] END AS task,
           CASE WHEN leaf THEN 'sweeps'
                ELSE ($4::text[])[1 + g % cardinality($4::text[])] END AS queue,
           (CASE WHEN live AND g % 10 = 0 THEN 'running'
                 WHEN live THEN 'available'
                 WHEN (g * 7919) % 1000 < 20 THEN 'failed'
                 WHEN (g * 7919) % 1000 < 30 THEN 'cancelled'
                 ELSE 'completed' END)::{state} AS state,
           json_build_object('id', g, 'tenant', g * 31 % 1000) AS args,
           CASE WHEN NOT leaf AND g % 10 IN (2, 3) THEN 'tenant-' || (g / 10 % 1000) END
               AS concurrency_key,
           CASE WHEN leaf THEN $5::text
                WHEN g % 50 = 1 THEN 'import-' || (g / 50 % 200) END AS job_group
    FROM (
        SELECT g,
               now() - interval '7 days' * (1 - g::float8 / $1) AS created,
               g > $1 * 0.97 AS live,
               g > $1 * 0.97 AND g % 10 IN (4, 5) AS scheduled,
               g > $1 * 0.7 AND g % 5 = 0 AS leaf
        FROM generate_series(1, $1::bigint) AS g
    ) AS base
) AS jobs
"""

KEYS_SQL = """
INSERT INTO {keys} (key, max_running, running)
SELECT 'tenant-' || k, CASE WHEN k % 10 = 0 THEN 5 END,
       (SELECT count(*) FROM {jobs} WHERE state = 'running' AND concurrency_key = 'tenant-' || k)
FROM generate_series(0, 999) AS k
"""


async def fill(app: sweepq.App, jobs: int) -> dict[str, Any]:
    """The jobs, keys, cron schedules and the sweep run; what the pages are asked about."""
    schema = ident(app.schema)
    await app.pool.execute(
        f"CREATE TABLE {schema}.products (id bigint PRIMARY KEY, name text NOT NULL)"
    )
    await app.pool.execute(f"INSERT INTO {schema}.products VALUES (1, 'one')")

    class Reindex(sweepq.TableSweep):
        name = SWEEP
        table = f"{app.schema}.products"
        key = ("id",)
        queue = "sweeps"

        async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
            return None

    app.register_sweep(Reindex)
    run = (await app.start_sweep(SWEEP)).run_id
    started = time.perf_counter()
    async with app.pool.acquire() as conn:
        await conn.execute(
            FILL_SQL.format(jobs=f"{schema}.jobs", state=f"{schema}.job_state", sweep=SWEEP),
            jobs,
            TRACEBACK,
            TASKS,
            QUEUES,
            leaf_group(run),
        )
        await conn.execute(
            KEYS_SQL.format(keys=f"{schema}.concurrency_keys", jobs=f"{schema}.jobs")
        )
        leaves = await conn.fetchval(
            f"SELECT count(*) FROM {schema}.jobs WHERE job_group = $1", leaf_group(run)
        )
        await conn.execute(
            f"UPDATE {schema}.sweep_runs SET enqueued = $2::bigint,"
            " estimated_total = $2::bigint * 2, links = $3::int WHERE id = $1",
            run,
            leaves,
            leaves // 500,
        )
        for name, expression, tz in (
            ("nightly-report", "0 3 * * *", "Europe/Paris"),
            ("refresh-rates", "*/5 * * * *", "UTC"),
            ("weekly-export", "0 6 * * 1", "America/New_York"),
        ):
            await conn.execute(
                f"INSERT INTO {schema}.cron_schedules (name, expression, tz, next_run_at)"
                " VALUES ($1, $2, $3, now() + interval '1 hour')",
                name,
                expression,
                tz,
            )
        filled = time.perf_counter() - started
        await conn.execute(f"VACUUM ANALYZE {schema}.jobs")
        await conn.execute(f"ANALYZE {schema}.concurrency_keys")
        failed = await conn.fetchval(
            f"SELECT max(id) FROM {schema}.jobs WHERE state = 'failed' AND id < $1", jobs // 2
        )
        states = await conn.fetch(
            f"SELECT state::text, count(*) FROM {schema}.jobs GROUP BY 1 ORDER BY 1"
        )
        size = await conn.fetchval(f"SELECT pg_total_relation_size('{schema}.jobs')")
    shown = ", ".join(f"{r[0]} {r[1]:,}" for r in states)
    console.print(
        f"filled {jobs:,} jobs in {filled:.1f} s ({shown}); the jobs table and its indexes: "
        f"{size / 2**20:,.0f} MB"
    )
    return {"run": run, "failed": failed, "middle": jobs // 2}


def pages(made: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, path) of every page measured."""
    day = datetime.now(UTC) - timedelta(days=1)
    since = day.strftime("%Y-%m-%dT%H:%M")
    until = (day + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    return [
        ("overview", "/"),
        ("overview fragment (polled)", "/fragments/overview"),
        ("jobs", "/jobs"),
        ("jobs ?state=failed", "/jobs?state=failed"),
        ("jobs ?state=available", "/jobs?state=available"),
        ("jobs ?queue=mail&state=completed", "/jobs?queue=mail&state=completed"),
        ("jobs ?key=tenant-7 (1 job in 5,000)", "/jobs?key=tenant-7"),
        ("jobs ?group=import-42 (1 in 10,000)", "/jobs?group=import-42"),
        ("jobs ?run=<run>&state=failed", f"/jobs?run={made['run']}&state=failed"),
        ("jobs ?task=rare_audit", "/jobs?task=rare_audit"),
        ("jobs ?since..until (1 h, a day ago)", f"/jobs?since={since}&until={until}"),
        ("jobs ?before=<middle id>", f"/jobs?before={made['middle']}"),
        ("job (failed)", f"/jobs/{made['failed']}"),
        ("retry confirm ?state=failed", "/jobs/retry?state=failed"),
        ("cancel confirm ?queue=mail", "/jobs/cancel?queue=mail"),
        ("sweeps", "/sweeps"),
        ("sweep run", f"/sweeps/{made['run']}"),
        ("keys", "/keys"),
        ("cron", "/cron"),
        ("queues", "/queues"),
    ]


class StatementClock:
    """Times every statement asyncpg runs in this process (its round trip), while on."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names
        self.times: list[tuple[float, str]] = []

    def name(self, query: str) -> str:
        return self.names.get(query) or " ".join(query.split())[:40]

    @contextlib.contextmanager
    def on(self) -> Iterator[list[tuple[float, str]]]:
        cls: Any = asyncpg.connection.Connection
        original = cls._execute
        clock = self

        async def timed(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await original(self, query, *args, **kwargs)
            finally:
                clock.times.append((time.perf_counter() - started, clock.name(query)))

        cls._execute = timed
        self.times = []
        try:
            yield self.times
        finally:
            cls._execute = original


def statement_names(schema: str) -> dict[str, str]:
    """{SQL text as run: its name in the catalogue} of the core and the sweeps."""
    from sweepq.core.options import fragments

    names: dict[str, str] = {}
    for package, extra in (("sweepq.core.sql", fragments()), ("sweepq.sweeps.sql", None)):
        for name, sql in load_statements(package, schema, extra).items():
            names[sql] = name
    return names


Timings = dict[tuple[str, str], list[float]]  # (statement, page) -> seconds of each call


async def measure(
    app: sweepq.App, made: dict[str, Any], repeat: int, calls: Timings
) -> list[list[object]]:
    """Each page's row of the first table; every statement's calls, by page, into `calls`."""
    clock = StatementClock(statement_names(app.schema))
    web = create_app(app)
    rows: list[list[object]] = []
    transport = httpx.ASGITransport(app=web)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        for label, path in pages(made):
            await client.get(path)  # warm: plans, the pool's connections, the templates
            walls: list[float] = []
            slowest: list[float] = []
            which: Counter[str] = Counter()
            statements = 0
            size = zipped = 0
            for _ in range(repeat):
                with clock.on() as times:
                    started = time.perf_counter()
                    response = await client.get(path)
                    walls.append(time.perf_counter() - started)
                assert response.status_code == 200, (path, response.status_code, response.text)
                statements = len(times)
                for seconds, name in times:
                    calls.setdefault((name, label), []).append(seconds)
                if times:
                    seconds, name = max(times)
                    slowest.append(seconds)
                    which[name] += 1
                size = len(response.content)
                zipped = len(gzip.compress(response.content))
            rows.append(
                [
                    label,
                    statistics.median(walls) * 1000,
                    statistics.median(slowest) * 1000 if slowest else 0.0,
                    which.most_common(1)[0][0] if which else "",
                    statements,
                    f"{size / 1024:.1f}",
                    f"{zipped / 1024:.1f}",
                ]
            )
    return rows


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=None, help="jobs to fill (1,000,000)")
    parser.add_argument("--repeat", type=int, default=REPEAT, help="requests per page")


async def main() -> None:
    args = parse_args(__doc__.splitlines()[0], options)
    jobs = args.jobs or (100_000 if args.quick else 1_000_000)
    await print_environment(f"dashboard pages at {jobs:,} jobs")
    calls: Timings = {}
    async with bench_app("dashboard", pool_max_size=4) as app:
        made = await fill(app, jobs)
        rows = await measure(app, made, args.repeat, calls)
    table(
        f"each page: median of {args.repeat} requests through the ASGI app",
        ["page", "page ms", "slowest query ms", "slowest query", "queries", "HTML kB",
         "gzip kB"],
        rows,
    )  # fmt: skip
    table(
        "each statement: the median ms of its calls on the page where it is fastest, and slowest",
        ["statement", "pages", "fastest ms", "slowest ms", "slowest on"],
        statement_rows(calls),
    )


def statement_rows(calls: Timings) -> list[list[object]]:
    by_statement: dict[str, dict[str, float]] = {}
    for (name, page), seconds in calls.items():
        by_statement.setdefault(name, {})[page] = statistics.median(seconds) * 1000
    rows: list[list[object]] = []
    for name, pages_ms in by_statement.items():
        worst = max(pages_ms, key=lambda page: pages_ms[page])
        rows.append([name, len(pages_ms), min(pages_ms.values()), pages_ms[worst], worst])
    return sorted(rows, key=lambda row: -float(str(row[3])))


if __name__ == "__main__":
    import anyio

    anyio.run(main)
