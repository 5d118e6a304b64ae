"""What every benchmark shares: the DSN, a throwaway schema, timing, counting and tables.

Each benchmark creates its own schema `bench_<name>_<random>` on the database named by
`SWEEPQ_BENCH_DSN` and drops it at the end. Benchmarks print figures; they never assert them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import multiprocessing
import multiprocessing.synchronize
import os
import platform
import queue
import statistics
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from datetime import date
from typing import Any

import anyio
import anyio.to_thread
import asyncpg
from anyio.abc import TaskStatus
from rich.console import Console
from rich.table import Table

import sweepq
from sweepq.core.queries import Conn

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
RESULTS_DIR = "/tmp/sweepq-bench"

console = Console(highlight=False, width=130)


def bench_dsn() -> str:
    """The database the benchmarks run on."""
    return os.environ.get("SWEEPQ_BENCH_DSN") or DEFAULT_DSN


def bench_schema(name: str) -> str:
    """A fresh schema name for one run of benchmark `name`."""
    return f"bench_{name}_{uuid.uuid4().hex[:8]}"


def parse_args(
    description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None
) -> argparse.Namespace:
    """Parse `--quick` (sizes that finish in seconds) plus any options `extra` adds."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="small sizes, finishes in seconds")
    if extra is not None:
        extra(parser)
    return parser.parse_args()


@contextlib.asynccontextmanager
async def bench_app(
    name: str, *, schema: str | None = None, dsn: str | None = None, pool_max_size: int = 10
) -> AsyncIterator[sweepq.App]:
    """An open App on a fresh migrated schema, dropped on the way out."""
    schema = schema or bench_schema(name)
    app = sweepq.App(dsn or bench_dsn(), schema=schema, pool_max_size=pool_max_size)
    async with app:
        try:
            await app.migrate()
            yield app
        finally:
            await app.pool.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def print_environment(title: str) -> None:
    """One header line per run: what ran where, so figures can be compared honestly."""
    conn = await asyncpg.connect(bench_dsn())
    try:
        version = await conn.fetchval("SHOW server_version")
        settings = {
            r["name"]: r["setting"]
            for r in await conn.fetch(
                "SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])",
                ["shared_buffers", "synchronous_commit", "fsync", "jit"],
            )
        }
    finally:
        await conn.close()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    console.print(f"[bold]{title}[/bold]")
    console.print(
        f"{date.today().isoformat()} · {os.cpu_count()} cores, load {load} · "
        f"Python {platform.python_version()} · PostgreSQL {version} "
        f"(synchronous_commit={settings.get('synchronous_commit')}, "
        f"shared_buffers={settings.get('shared_buffers')}x8kB, "
        f"server jit={settings.get('jit')}; sweepq turns it off)"
    )


class Stopwatch:
    """Wall and process CPU time of a block: `with Stopwatch() as sw: ...; sw.wall, sw.cpu`."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0
        self._wall0 = 0.0
        self._cpu0 = 0.0

    def __enter__(self) -> Stopwatch:
        self._wall0 = time.perf_counter()
        self._cpu0 = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._wall0
        self.cpu = time.process_time() - self._cpu0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of `values`, interpolated."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[max(0, min(98, round(q) - 1))]


def count_queries(queries: object) -> Counter[str]:
    """Count calls to each statement wrapper of a `Queries` instance (patched on the instance)."""
    calls: Counter[str] = Counter()
    for name in dir(queries):
        if not name.startswith(("job_", "concurrency_key_")):
            continue
        method = getattr(queries, name)
        if not callable(method):
            continue

        def wrap(fn: Callable[..., Awaitable[Any]], label: str) -> Callable[..., Awaitable[Any]]:
            @functools.wraps(fn)
            async def counted(*args: Any, **kwargs: Any) -> Any:
                calls[label] += 1
                return await fn(*args, **kwargs)

            return counted

        setattr(queries, name, wrap(method, name))
    return calls


@contextlib.contextmanager
def count_round_trips() -> Iterator[Counter[str]]:
    """Count the messages asyncpg sends and waits on, per kind, in this process.

    Every `fetch`/`execute` with arguments is one extended-protocol round trip (after the
    statement is prepared); `execute` without arguments is one simple-query round trip, which
    is how a pool resets a connection it gets back ("pool reset").
    """
    trips: Counter[str] = Counter()
    cls: Any = asyncpg.connection.Connection
    original_execute = cls.execute
    original_private = cls._execute

    # The signature mirrors Connection.execute, timeout included.
    async def execute(self: Any, query: str, *args: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        if not args:
            trips["pool reset" if query == self.get_reset_query() else "simple query"] += 1
        return await original_execute(self, query, *args, timeout=timeout)

    async def private(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        trips["statement"] += 1
        return await original_private(self, query, *args, **kwargs)

    cls.execute = execute
    cls._execute = private
    try:
        yield trips
    finally:
        cls.execute = original_execute
        cls._execute = original_private


class ServerCpu:
    """CPU seconds spent by the PostgreSQL backends that run statements on `schema`.

    While the block runs, pg_stat_activity is sampled every 20 ms for backends whose current or
    last statement names the schema; at the end of the block their lifetime CPU (utime + stime
    from /proc/<pid>/stat, so the server must run on this machine) is summed. Use it around
    work done on connections opened for that work (a worker's own pool), read before they close.
    """

    def __init__(self, app: sweepq.App) -> None:
        self.app = app
        self.pids: set[int] = set()
        self.seconds: float | None = None
        self.statements = 0  # its own sampling statements, to leave out of round-trip counts

    async def sample(self) -> None:
        """Collect the pids until cancelled (run it in a task group)."""
        pattern = f'%"{self.app.schema}"%'
        async with self.app.pool.acquire() as conn:
            while True:
                rows = await conn.fetch(
                    "SELECT pid FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND query LIKE $1",
                    pattern,
                )
                self.statements += 1
                self.pids.update(r[0] for r in rows)
                await anyio.sleep(0.02)

    def read(self) -> float | None:
        """Summed CPU seconds of the pids seen, or None if /proc does not show them."""
        total = 0.0
        for pid in self.pids:
            seconds = process_cpu_seconds(pid)
            if seconds is None:
                return None
            total += seconds
        self.seconds = total
        return self.seconds


def process_cpu_seconds(pid: int) -> float | None:
    """Lifetime CPU seconds (utime + stime) of process `pid` on this machine; None if gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


class Backends:
    """The PostgreSQL backends named `names` in pg_stat_activity: their CPU, and what they wait on.

    A worker's connections carry its `application_name`, so
    `Backends(app, [worker.application_name])` follows exactly the backends that serve it.
    `sample()` reads pg_stat_activity every 20 ms until cancelled. A backend's CPU (from
    /proc/<pid>/stat, so the server must run on this machine) counts from the first sample, or
    from its start if it connected later; start the sampler (`await tg.start(backends.sample)`)
    just before the measured work and call `cpu_seconds()` just after it, before the connections
    close. Every sample of a backend running a statement is counted in `waits` under its wait
    event ("Lock:tuple", "LWLock:WALWrite", ...), or "running" when it shows none (on a CPU, or
    waiting for one). `locked` counts the samples waiting on a lock by (the statement's text, the
    text of the statement of the first backend it waits for, "" if that one is gone already).
    """

    interval = 0.02

    def __init__(self, app: sweepq.App, names: Sequence[str]) -> None:
        self.app = app
        self.names = list(names)
        self.baseline: dict[int, float] = {}  # pid -> its CPU seconds when first seen
        self.waits: Counter[str] = Counter()
        self.locked: Counter[tuple[str, str]] = Counter()  # (waiting, blocking) statement text
        self.samples = 0

    async def sample(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Sample until cancelled; started (for `tg.start`) once the first sample is taken."""
        async with self.app.pool.acquire() as conn:
            await self._sample(conn)
            task_status.started()
            while True:
                await anyio.sleep(self.interval)
                await self._sample(conn)

    async def _sample(self, conn: Any) -> None:
        rows = await conn.fetch(
            "SELECT a.pid, a.state, a.wait_event_type, a.wait_event,"
            " CASE WHEN a.wait_event_type = 'Lock' THEN a.query END,"
            " CASE WHEN a.wait_event_type = 'Lock' THEN (SELECT b.query FROM pg_stat_activity b"
            "   WHERE b.pid = (pg_blocking_pids(a.pid))[1]) END"
            " FROM pg_stat_activity a WHERE a.application_name = ANY($1::text[])",
            self.names,
        )
        first = self.samples == 0
        self.samples += 1
        for pid, state, wait_type, wait_event, query, blocker in rows:
            if pid not in self.baseline:
                self.baseline[pid] = (process_cpu_seconds(pid) or 0.0) if first else 0.0
            if state == "active":
                self.waits[f"{wait_type}:{wait_event}" if wait_type else "running"] += 1
                if query is not None:
                    self.locked[query, blocker or ""] += 1

    def cpu_seconds(self) -> float | None:
        """CPU seconds of the backends seen, since first seen; None if /proc does not show one."""
        total = 0.0
        for pid, before in self.baseline.items():
            now = process_cpu_seconds(pid)
            if now is None:
                return None
            total += now - before
        return total


NOOP_TASK = "bench.noop"


def register_noop(app: sweepq.App) -> None:
    """Register `NOOP_TASK`, a task that does nothing (what throughput benchmarks drain)."""

    async def noop(ctx: sweepq.Context) -> None:
        return None

    app.task(name=NOOP_TASK)(noop)


async def enqueue_noops(app: sweepq.App, count: int, *, batch: int = 10_000) -> None:
    """Enqueue `count` jobs of `NOOP_TASK` with `enqueue_many`, `batch` at a time."""
    for start in range(0, count, batch):
        size = min(batch, count - start)
        await app.enqueue_many([sweepq.JobSpec(NOOP_TASK) for _ in range(size)])


def _on_host(host: str, target: Callable[..., None], *args: object) -> None:
    """Run `target(*args)` in network namespace `host` (a spawned process's first step)."""
    from _hosts import enter_network_namespace

    enter_network_namespace(host)
    target(*args)


@dataclasses.dataclass(frozen=True)
class ProcessLink:
    """What a process started by `SpawnedProcesses` shares with the parent.

    In the process: `await link.ready(hello)` once it is set up (imports done, connections
    open), which returns when the parent starts every process at once; `await link.report(result)`
    when done, which returns when the parent has read what it needs while the process's
    connections are still open.
    """

    hellos: multiprocessing.Queue[Any]
    results: multiprocessing.Queue[Any]
    go: multiprocessing.synchronize.Event
    done: multiprocessing.synchronize.Event

    async def ready(self, hello: object) -> None:
        """Tell the parent this process is ready (with `hello`), and wait for the start."""
        self.hellos.put(hello)
        await anyio.to_thread.run_sync(self.go.wait)

    async def report(self, result: object) -> None:
        """Hand `result` to the parent, and wait until it lets the process close."""
        self.results.put(result)
        await anyio.to_thread.run_sync(self.done.wait)


class SpawnedProcesses:
    """`count` spawned processes each running `target(link, *args)`, started together.

    A start barrier, so that start-up (the interpreter, imports, connections) is not timed:

        async with SpawnedProcesses(4, child, dsn) as procs:
            hellos = await procs.hellos()  # every process is ready
            procs.start()
            results = await procs.results()
            procs.release()  # the processes close their connections and exit

    `target` must be a module-level function (spawned processes import it). With `hosts`
    (network namespaces, `_hosts.network_hosts`), process i runs in `hosts[i]`.
    """

    def __init__(
        self,
        count: int,
        target: Callable[..., None],
        *args: object,
        hosts: Sequence[str] | None = None,
    ) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.link = ProcessLink(ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Event())
        self.procs = [
            ctx.Process(target=target, args=(self.link, *args), daemon=True)
            if hosts is None
            else ctx.Process(target=_on_host, args=(hosts[i], target, self.link, *args))
            for i in range(count)
        ]
        for proc in self.procs:
            proc.daemon = True

    async def __aenter__(self) -> SpawnedProcesses:
        for proc in self.procs:
            proc.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        # Never leave a process waiting: on an error they run on and exit (daemons, if need be).
        self.link.go.set()
        self.link.done.set()
        for proc in self.procs:
            await anyio.to_thread.run_sync(proc.join, 60.0)
            if proc.is_alive():
                proc.terminate()
                await anyio.to_thread.run_sync(proc.join)

    async def hellos(self) -> list[Any]:
        """What each process passed to `link.ready`, once all have (in the order they did)."""
        return await self._collect(self.link.hellos)

    def start(self) -> None:
        """Let every process go."""
        self.link.go.set()

    async def results(self) -> list[Any]:
        """What each process passed to `link.report`, once all have."""
        return await self._collect(self.link.results)

    def release(self) -> None:
        """Let the processes close and exit."""
        self.link.done.set()

    async def _collect(self, source: multiprocessing.Queue[Any]) -> list[Any]:
        got: list[Any] = []
        while len(got) < len(self.procs):
            try:
                got.append(await anyio.to_thread.run_sync(source.get, True, 0.5))
            except queue.Empty:
                failed = [p.exitcode for p in self.procs if p.exitcode not in (None, 0)]
                if failed:
                    raise RuntimeError(
                        f"a benchmark process failed (exit codes {failed})"
                    ) from None
        return got


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print a table; numbers are right-aligned and formatted with thousands separators."""
    out = Table(title=title, title_justify="left")
    for n, column in enumerate(columns):
        out.add_column(column, justify="left" if n == 0 else "right")
    for row in rows:
        out.add_row(*(fmt(v) for v in row))
    console.print(out)


def fmt(value: object) -> str:
    """A number as people read it: 12,345 / 1,234.5 / 12.3 / 0.123."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def vm_kib(field: str = "VmRSS") -> int:
    """A memory figure of this process from /proc/self/status, in KiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)


def results_path(filename: str) -> str:
    """A path under the results folder (outside the repository), created on demand."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    return os.path.join(RESULTS_DIR, filename)


class Rollback(Exception):
    """Raised inside a transaction to roll back what a measurement did."""


async def rolled_back_claims(
    app: sweepq.App,
    conn: Conn,
    *,
    limit: int,
    claims: int,
    worker_id: str,
    queues: Sequence[str] = ("default",),
) -> tuple[list[float], int]:
    """Milliseconds of each of `claims` claims of `limit` (`app.queries.job_claim`), each rolled
    back so that the backlog stays the same; and how many jobs the last one got."""
    times: list[float] = []
    got = 0
    for _ in range(claims):
        try:
            async with conn.transaction():
                started = time.perf_counter()
                claimed = await app.queries.job_claim(conn, list(queues), limit, worker_id, 30.0)
                times.append((time.perf_counter() - started) * 1e3)
                got = len(claimed.jobs)
                raise Rollback
        except Rollback:
            pass
    return times, got
