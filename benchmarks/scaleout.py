"""Scale-out: 1, 2, 4 and 8 worker processes draining one backlog on one PostgreSQL.

For each process count, on a fresh schema: a backlog of no-op jobs is enqueued with
`enqueue_many` (then VACUUM ANALYZE, so every count starts from the same settled table); N
processes are spawned, each opens `Worker(app, concurrency=20)` and says it is ready; all start
at once (a start barrier, so interpreter start-up, imports and connecting are not timed) and
drain the backlog with `run_until_idle()`. Printed per count: combined jobs/s from the start to
the last process's end, its ratio to one process, worker CPU per job (the processes'
`time.process_time()`, asyncpg's client side included), server CPU per job (the backends whose
application_name is one of the workers', from /proc/<pid>/stat), jobs per claim, claim
conflicts (defined under the table) and what the workers' backends waited on.

With `--hosts`, each worker process runs in a network namespace of its own and reaches the
server by TCP over a veth pair and a bridge, as a separate host on a LAN would; the server is a
PostgreSQL cluster the run starts and deletes (`_hosts.py`; root and iproute2 needed).

    .venv/bin/python benchmarks/scaleout.py [--quick] [--processes 1,2,4,8] [--jobs N] [--hosts]
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from typing import Any, NamedTuple

import anyio
from _common import (
    Backends,
    ProcessLink,
    SpawnedProcesses,
    bench_app,
    console,
    enqueue_noops,
    parse_args,
    print_environment,
    register_noop,
    table,
)

import sweepq
from sweepq.core.rows import ClaimBatch

CONCURRENCY = 20
CLAIM_INDEX = "jobs_claim_unkeyed"  # the index the claim of unkeyed jobs reads


class Claim(NamedTuple):
    """One call of the claim statement, timed on `time.monotonic()` (one clock per machine)."""

    started: float
    ended: float
    asked: int
    got: int


class Report(NamedTuple):
    """What one worker process did between the start and the end of its `run_until_idle()`."""

    started: float
    ended: float
    jobs: int
    cpu: float
    claims: list[Claim]


class Run(NamedTuple):
    processes: int
    reports: list[Report]
    server_cpu: float | None
    backends: Backends
    index_reads: int
    locked: Counter[str]  # statement name -> samples of it waiting on a lock
    wal: int  # bytes of WAL written during the run (the server otherwise quiet)

    @property
    def jobs(self) -> int:
        return sum(r.jobs for r in self.reports)

    @property
    def wall(self) -> float:
        return max(r.ended for r in self.reports) - min(r.started for r in self.reports)

    @property
    def claims(self) -> list[Claim]:
        return [c for r in self.reports for c in r.claims]

    def short_claims(self) -> tuple[int, int]:
        """Claims that got fewer jobs than they asked for: (with jobs left for later, at the tail).

        A short claim counts as a conflict when a claim that started after it ended still got
        jobs: every job was enqueued before the start and none comes back, so those jobs were
        due and not claimed while the short claim ran. The others are the tail of the backlog.
        """
        claims = self.claims
        last = max((c.started for c in claims if c.got), default=0.0)
        short = [c for c in claims if c.got < c.asked]
        conflicts = sum(1 for c in short if c.ended < last)
        return conflicts, len(short) - conflicts


def record_claims(queries: Any) -> list[Claim]:
    """Record every claim of this `Queries` instance (patched on the instance)."""
    claims: list[Claim] = []
    claim = queries.job_claim

    async def recorded(conn: Any, queues: Any, limit: int, *args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        batch: ClaimBatch = await claim(conn, queues, limit, *args, **kwargs)
        claims.append(Claim(started, time.monotonic(), limit, len(batch.jobs)))
        return batch

    setattr(queries, "job_claim", recorded)  # noqa: B010  # on this instance only
    return claims


def work(link: ProcessLink, dsn: str, schema: str) -> None:
    """One worker process: open, say ready (with its application_name), drain, report."""

    async def main() -> None:
        app = sweepq.App(dsn, schema=schema, pool_max_size=2)
        register_noop(app)
        async with app, sweepq.Worker(app, concurrency=CONCURRENCY) as worker:
            claims = record_claims(app.queries)
            await link.ready(worker.application_name)
            started, cpu0 = time.monotonic(), time.process_time()
            done = await worker.run_until_idle()
            ended, cpu = time.monotonic(), time.process_time() - cpu0
            await link.report(Report(started, ended, done, cpu, claims))

    anyio.run(main)


async def index_reads(app: sweepq.App) -> int:
    """Index entries the claim's index has returned to scans, as last flushed."""
    async with app.pool.acquire() as conn:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        reads = await conn.fetchval(
            "SELECT idx_tup_read FROM pg_stat_user_indexes"
            " WHERE schemaname = $1 AND indexrelname = $2",
            app.schema,
            CLAIM_INDEX,
        )
    return int(reads or 0)


async def flushed_index_reads(app: sweepq.App, names: list[str]) -> int:
    """`index_reads` once the workers' backends have exited (a backend flushes as it exits)."""
    for _ in range(200):  # at most 10 s
        if not await app.pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = ANY($1::text[])", names
        ):
            break
        await anyio.sleep(0.05)
    await anyio.sleep(0.25)  # its statistics are written just after it leaves pg_stat_activity
    return await index_reads(app)


def statement_name(app: sweepq.App, text: str) -> str:
    """sweepq's name of a statement from its text (cut at track_activity_query_size)."""
    if not text:
        return "(a lock released before it was read)"
    name = next((k for k, sql in app.queries.sql.items() if sql.startswith(text)), None)
    return name or " ".join(text.split())[:60]


def statement_names(app: sweepq.App, texts: Counter[tuple[str, str]]) -> Counter[str]:
    """Lock-wait samples by "<waiting statement> behind <blocking statement>"."""
    named: Counter[str] = Counter()
    for (waiting, blocking), n in texts.items():
        named[f"{statement_name(app, waiting)} behind {statement_name(app, blocking)}"] += n
    return named


async def measure(processes: int, jobs: int, hosts: list[str] | None) -> Run:
    async with bench_app("scaleout") as app:
        register_noop(app)
        await enqueue_noops(app, jobs)
        await app.pool.execute(f'VACUUM ANALYZE "{app.schema}".jobs')
        reads_before = await index_reads(app)
        wal_before = await app.pool.fetchval("SELECT pg_current_wal_insert_lsn() - '0/0'")
        on = None if hosts is None else hosts[:processes]
        async with SpawnedProcesses(processes, work, app.dsn, app.schema, hosts=on) as procs:
            names: list[str] = await procs.hellos()
            backends = Backends(app, names)
            async with anyio.create_task_group() as tg:
                await tg.start(backends.sample)
                procs.start()
                reports: list[Report] = await procs.results()
                server_cpu = backends.cpu_seconds()  # before the workers' connections close
                tg.cancel_scope.cancel()
            procs.release()
        wal = await app.pool.fetchval("SELECT pg_current_wal_insert_lsn() - '0/0'") - wal_before
        reads = await flushed_index_reads(app, names) - reads_before
        locked = statement_names(app, backends.locked)
    run = Run(processes, reports, server_cpu, backends, reads, locked, int(wal))
    if run.jobs != jobs:
        console.print(f"note: {processes} processes processed {run.jobs:,} jobs, not {jobs:,}")
    return run


def throughput_row(run: Run, base: Run | None) -> list[object]:
    jobs, rate = run.jobs, run.jobs / run.wall
    per_process = sorted(r.jobs for r in run.reports)
    server = "—" if run.server_cpu is None else run.server_cpu / jobs * 1e6
    return [
        run.processes,
        jobs,
        run.wall,
        rate,
        "—" if base is None else rate / (base.jobs / base.wall),
        f"{per_process[0]:,}-{per_process[-1]:,}",
        sum(r.cpu for r in run.reports) / jobs * 1e6,
        server,
        len(run.backends.baseline),
        run.wal / jobs,
        run.wal / run.wall / 1e6,
    ]


def claims_row(run: Run) -> list[object]:
    claims = run.claims
    claimed = sum(c.got for c in claims)
    answered = sum(1 for c in claims if c.got)
    conflicts, tail = run.short_claims()
    waits = run.backends.waits
    locks = sum(n for name, n in waits.items() if name.startswith("Lock:"))
    return [
        run.processes,
        len(claims),
        len(claims) - answered,
        sum(c.asked for c in claims) / max(1, len(claims)),
        claimed / max(1, answered),
        conflicts,
        tail,
        f"{locks} of {sum(waits.values()):,}",
        run.index_reads / max(1, claimed),
    ]


WAIT_GROUPS = ("running", "Lock", "LWLock", "IO", "Client", "IPC")


def waits_row(run: Run) -> list[object]:
    waits = run.backends.waits
    total = sum(waits.values())
    groups: Counter[str] = Counter()
    for name, n in waits.items():
        group = name.split(":", 1)[0]
        groups[group if group in WAIT_GROUPS else "other"] += n
    top = ", ".join(f"{name} {n / total:.0%}" for name, n in waits.most_common(4) if total)
    return [
        run.processes,
        total,
        *(f"{groups[g] / max(1, total):.0%}" for g in (*WAIT_GROUPS, "other")),
        top,
    ]


def locked_statements(runs: list[Run]) -> str:
    """Which statements the lock-wait samples were running, per process count."""
    parts = [
        f"{run.processes} processes: "
        + ", ".join(f"{name} {n}" for name, n in run.locked.most_common())
        for run in runs
        if run.locked
    ]
    return "; ".join(parts) or "none"


def print_runs(runs: list[Run]) -> None:
    base = next((r for r in runs if r.processes == 1), None)
    table(
        "throughput",
        [
            "processes",
            "jobs",
            "wall, s",
            "jobs/s",
            "× 1 process",
            "jobs per process",
            "worker CPU µs/job",
            "server CPU µs/job",
            "backends",
            "WAL B/job",
            "WAL MB/s",
        ],
        [throughput_row(run, base) for run in runs],
    )
    console.print(
        "wall: from the start signal (every process ready) to the last process's end (its last "
        "outcome recorded). Worker CPU: time.process_time() of the processes over that run, "
        "asyncpg's client side included. Server CPU: utime + stime of the backends whose "
        "application_name is one of the workers' (their own pools), from their first sample "
        "before the start to the end; the sampler's own backend (a query every 20 ms) is not "
        "counted. × 1 process: combined jobs/s over the one-process figure (— without a "
        "one-process run). backends: the workers' connections seen. WAL: bytes written by the "
        "server from the enqueue's end to the last outcome (pg_current_wal_insert_lsn).\n"
    )
    table(
        "claims and conflicts",
        [
            "processes",
            "claims",
            "empty",
            "asked per claim",
            "jobs per claim",
            "short, jobs left",
            "short, tail",
            "lock-wait samples",
            "claim-index entries per job",
        ],
        [claims_row(run) for run in runs],
    )
    console.print(
        "asked: the free slots a claim asked for. jobs per claim: jobs claimed / claims that "
        "returned at least one.\n"
        "[bold]claim conflicts[/bold]:\n"
        "- short, jobs left: claims that got fewer jobs than they asked for although a claim "
        "(of any process) that started after they ended still got jobs. Every job was enqueued "
        "before the start and none comes back (no-op jobs do not retry), so those jobs were due "
        "and unclaimed all through the short claim: it passed over them (SKIP LOCKED skips rows "
        "a concurrent claim holds locked without taking them). Short claims at the tail of the "
        "backlog, when every remaining job was already claimed, are counted apart.\n"
        "- lock-wait samples: samples (every 20 ms, pg_stat_activity) of a workers' backend "
        "running a statement while waiting on a heavyweight lock (wait_event_type 'Lock', the "
        "same as an ungranted pg_locks entry; row locks show as Lock:tuple / Lock:transactionid), "
        "of all samples of a workers' backend running a statement. By statement: "
        f"{locked_statements(runs)}.\n"
        f"- claim-index entries per job: entries of {CLAIM_INDEX} returned to index scans "
        "(pg_stat_user_indexes.idx_tup_read, flushed as the backends exit) per claimed job. "
        "Each job read once, plus one entry per claim for the skip scan's probe, is about 1.05; "
        "the rest are entries claims passed over: rows a concurrent claim held locked, and "
        "entries of jobs already claimed that the index has not yet marked dead (the probe and "
        "the range scan both pass over those). It is the cost of the conflicts that SKIP LOCKED "
        "hides from the claim's result.\n"
    )
    table(
        "what the workers' backends were doing (samples of a backend running a statement)",
        ["processes", "samples", *WAIT_GROUPS, "other", "most seen"],
        [waits_row(run) for run in runs],
    )
    console.print(
        "running: no wait event (on a CPU, or runnable and waiting for one). The groups are "
        "PostgreSQL's wait_event_type; 'most seen' names the commonest events."
    )


async def main(args: argparse.Namespace) -> None:
    jobs = args.jobs or (4_000 if args.quick else 40_000)
    processes: list[int] = args.processes
    await print_environment(
        f"scaleout: {jobs:,} no-op jobs per run, {CONCURRENCY} slots per worker process, "
        f"{'/'.join(map(str, processes))} processes"
    )
    if not args.hosts:
        runs = [await measure(n, jobs, None) for n in processes]
    else:
        # Each worker process a host of its own, reaching a server this run starts over a
        # bridge (see _hosts.py).
        from _hosts import OwnedServer, network_hosts

        with network_hosts(max(processes)) as hosts, OwnedServer() as server:
            os.environ["SWEEPQ_BENCH_DSN"] = server.dsn
            console.print(f"hosts: {len(hosts)} network namespaces; server {server.dsn}")
            runs = [await measure(n, jobs, hosts) for n in processes]
    print_runs(runs)


def counts(text: str) -> list[int]:
    """`--processes 1,2,4,8`."""
    try:
        values = [int(n) for n in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected counts like 1,2,4,8, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"process counts must be >= 1, got {text!r}")
    return values


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--processes",
        type=counts,
        default=[1, 2, 4, 8],
        help="worker process counts, comma-separated (default 1,2,4,8)",
    )
    parser.add_argument(
        "--jobs", type=int, default=None, help="backlog per run (default 40,000; --quick 4,000)"
    )
    parser.add_argument(
        "--hosts",
        action="store_true",
        help="each worker process in a network namespace of its own, against a server this "
        "run starts (root, iproute2)",
    )


if __name__ == "__main__":
    anyio.run(main, parse_args(__doc__ or "", options))
