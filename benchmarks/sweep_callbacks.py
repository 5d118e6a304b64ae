"""Sweep callbacks: what `Sweep.on_complete` costs per end of a run, and `Sweep.throttle` per link.

Two measurements of two variants each. Every variant runs on a fresh schema, worked by one
in-process worker with 20 slots and no-op handlers; the variants run in interleaved rounds (A
first in odd rounds, B first in even ones, so that load on a shared machine hits both alike),
and the median of `--repeat` rounds counts (min and max are printed beside it).

1. on_complete: R runs (`--runs`, default 200; `--quick` 30) of a `TableSweep` over a table of
   20 rows (key `("id",)`, page_size 20: the first link fans out the 20 leaves, the second
   reads an empty page, drains and ends the run), each with its own params (`{"n": i}`, so they
   are different runs), at most 10 active at once (`--active`, below the 20 slots): the next
   run starts as one ends (on its `SweepRunEnded` event), while the worker runs. Timed from the
   first start until every run has ended and no job is left. (Not all at once: the draining
   links, which hold their slots while they wait for their leaves and are claimed before
   leaves, then take every slot. 30 runs at once lost 5 s to it, each link waiting out its
   stall bound; 200 at once never ended, their leaves never claimed.) A: the sweep without
   `on_complete`; B: the same sweep with `async def on_complete(self, ctx, run): pass`, so
   that each end also enqueues, in the end's transaction (closing the run's job group with it
   as the group's `then`), one `sweepq.sweep.<name>.done` job, which the worker then runs.
   Printed: wall seconds, ms per run, the difference per run end (B - A) / R in ms, B / A, the
   jobs written per run by task suffix (.link / .leaf / .done) and the links' snoozes per run.
   Then the end transaction itself, per end: each call of `end_run` by a draining link that
   ended its run is timed, as is the closing of the group inside it (`ending._close`), and
   its round trips are counted (statements; simple queries: BEGIN, COMMIT, SAVEPOINT; the
   pool's reset on release), both in those rounds and in a second pass of each round where 30
   runs (`--quick` 10) are each started and worked to their end alone (`run_until_idle()`), so
   that nothing else runs while one ends. This wraps `sweepq.sweeps.link.end_run`,
   `sweepq.sweeps.ending._close` and asyncpg's `Connection._execute` / `Connection.execute`
   (counting only in the task that runs `end_run`) while a pass runs, and puts them back after.
2. throttle: a `TableSweep` over N rows (`--rows`, default 50,000; `--quick` 5,000; page_size
   100, so N / 100 links; window 1,000), from `start_sweep` until the run has ended. A:
   `throttle = ()`; B: `replica_lag(5)`, `long_transactions(300)` and
   `dead_tuples("<schema>.rows", 0.5)`, which run before each link reads and fans out its page.
   First, apart from any sweep, on a table of N rows: what the checks see on this server
   (replicas, the oldest other open transaction of the database, the table's dead rows), what
   each check and `first_wait` over the three answer, and the median, min and max time of one
   call of each (and of `first_wait`) over 200 calls each on one pooled connection. On a server
   without replicas and without old transactions none of them asks to wait, so that B differs
   from A only by the checks' queries; a throttled link would show as a link snooze.
   Printed for the rounds: wall seconds, items/s, ms per link, link snoozes, and the added ms
   per link (B - A) / links.

    .venv/bin/python benchmarks/sweep_callbacks.py [--quick] [--runs R] [--active A] [--rows N]
        [--repeat K]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any, ClassVar

import anyio
import asyncpg
from _common import Stopwatch, bench_app, console, parse_args, print_environment, table

import sweepq
import sweepq.throttle
from sweepq.core.ident import ident
from sweepq.events import Event, SweepRunEnded
from sweepq.sweeps import ending, link

CONCURRENCY = 20
SMALL_ROWS = 20
CHECK_CALLS = 200
TERMINAL = ("completed", "failed", "cancelled")

# The round trips of the `end_run` call running in this task, when one is being counted.
_COUNTING: ContextVar[Counter[str] | None] = ContextVar("counting", default=None)


async def create_rows(app: sweepq.App, rows: int) -> None:
    await app.pool.execute(
        f"""CREATE TABLE {ident(app.schema)}.rows (id bigint PRIMARY KEY, payload text NOT NULL);
            INSERT INTO {ident(app.schema)}.rows
            SELECT i, md5(i::text) FROM generate_series(1, {int(rows)}) AS i"""
    )
    await app.pool.execute(f"VACUUM ANALYZE {ident(app.schema)}.rows")


async def jobs_by_kind(app: sweepq.App) -> tuple[Counter[str], Counter[str]]:
    """Rows of the jobs table by task suffix (link, leaf, done, ...), and their snoozes."""
    rows = await app.pool.fetch(
        f"SELECT substring(task FROM '[^.]+$') AS kind, count(*) AS n, sum(snoozes) AS snoozes"
        f" FROM {ident(app.schema)}.jobs GROUP BY 1"
    )
    return (
        Counter({r["kind"]: int(r["n"]) for r in rows}),
        Counter({r["kind"]: int(r["snoozes"]) for r in rows}),
    )


async def jobs_left(app: sweepq.App) -> int:
    """Jobs not yet terminal (available or running)."""
    left = await app.pool.fetchval(
        f"SELECT count(*) FROM {ident(app.schema)}.jobs WHERE state::text <> ALL($1::text[])",
        list(TERMINAL),
    )
    return int(left)


async def work_until_ended(app: sweepq.App, worker: sweepq.Worker) -> None:
    """Run the worker until no run is active and every job is terminal."""
    while True:
        await worker.run_until_idle()
        if not await app.list_sweep_runs(1, True) and not await jobs_left(app):
            return
        await anyio.sleep(0.01)  # a waiting link snoozed; it is due shortly


# --- 1. on_complete --------------------------------------------------------------------------


class Ends:
    """The ends of runs while `watch()` is on: each `end_run` call of a draining link that
    ended its run, timed, with `ending._close` inside it timed and its round trips counted."""

    def __init__(self) -> None:
        self.ends: list[float] = []  # seconds of each end_run call that ended a run
        self.closes: list[float] = []  # seconds of closing the run's group, inside it
        self.busy = 0  # end_run calls that found a leaf outstanding (and ended nothing)
        self.trips: Counter[str] = Counter()

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        end_run, close = link.end_run, ending._close
        conn_cls: Any = asyncpg.connection.Connection
        original_execute, original_private = conn_cls.execute, conn_cls._execute

        async def timed_end(*args: Any, **kwargs: Any) -> ending.EndResult:
            trips: Counter[str] = Counter()
            token = _COUNTING.set(trips)
            started = time.perf_counter()
            try:
                result = await end_run(*args, **kwargs)
            finally:
                _COUNTING.reset(token)
            if result == "ended":
                self.ends.append(time.perf_counter() - started)
                self.trips.update(trips)
            elif result == "busy":
                self.busy += 1
            return result

        async def timed_close(*args: Any, **kwargs: Any) -> None:
            started = time.perf_counter()
            await close(*args, **kwargs)
            self.closes.append(time.perf_counter() - started)

        # The signature mirrors Connection.execute, timeout included.
        async def execute(self: Any, query: str, *args: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
            trips = _COUNTING.get()
            if trips is not None and not args:
                trips["pool reset" if query == self.get_reset_query() else "simple query"] += 1
            return await original_execute(self, query, *args, timeout=timeout)

        async def private(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
            trips = _COUNTING.get()
            if trips is not None:
                trips["statement"] += 1
            return await original_private(self, query, *args, **kwargs)

        link.end_run, ending._close = timed_end, timed_close
        conn_cls.execute, conn_cls._execute = execute, private
        try:
            yield
        finally:
            link.end_run, ending._close = end_run, close
            conn_cls.execute, conn_cls._execute = original_execute, original_private


class Small(sweepq.TableSweep):
    name = "bench-small"
    key: ClassVar[tuple[str, ...]] = ("id",)
    page_size = SMALL_ROWS

    async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
        return None


class SmallWithOnComplete(Small):
    async def on_complete(self, ctx: sweepq.Context, run: sweepq.SweepRun) -> None:
        pass


class CallbackResult:
    def __init__(self, wall: float, jobs: Counter[str], snoozes: Counter[str], ends: Ends) -> None:
        self.wall = wall
        self.jobs = jobs
        self.snoozes = snoozes
        self.ends = ends


async def work_fed(
    app: sweepq.App, worker: sweepq.Worker, name: str, runs: int, active: int
) -> None:
    """Start `runs` runs of sweep `name` (params `{"n": i}`), at most `active` of them active at
    once (the next starts as one ends), while the worker runs; return once every run has ended
    and no job is left."""
    room = anyio.Semaphore(active)
    all_ended = anyio.Event()
    ended = 0

    def on_event(event: Event) -> None:
        nonlocal ended
        if isinstance(event, SweepRunEnded):
            ended += 1
            room.release()
            if ended == runs:
                all_ended.set()

    app.observe(on_event)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            for n in range(runs):
                await room.acquire()
                await app.start_sweep(name, {"n": n})
            await all_ended.wait()
            while True:
                if not await jobs_left(app):
                    break
                await anyio.sleep(0.01)  # the last ends' .done jobs
            worker.stop()
    finally:
        app.unobserve(on_event)


async def run_callbacks(
    runs: int, *, on_complete: bool, active: int | None = None
) -> CallbackResult:
    """`runs` runs, at most `active` active at once, timed from the first start until every run
    has ended and no job is left; or (`active=None`) each started and worked to its end alone,
    so that nothing else runs while it ends."""
    async with bench_app("callbacks", pool_max_size=20) as app:
        await create_rows(app, SMALL_ROWS)
        base = SmallWithOnComplete if on_complete else Small
        declared = type("Declared", (base,), {"table": f"{app.schema}.rows"})
        app.register_sweep(declared)
        ends = Ends()
        async with sweepq.Worker(app, concurrency=CONCURRENCY) as worker:
            with ends.watch(), Stopwatch() as sw:
                if active is None:
                    for n in range(runs):
                        await app.start_sweep(declared.name, {"n": n})
                        await work_until_ended(app, worker)
                else:
                    await work_fed(app, worker, declared.name, runs, active)
        ended = await app.list_sweep_runs(runs + 1, sweep=declared.name)
        jobs, snoozes = await jobs_by_kind(app)
    assert len(ended) == runs, (len(ended), runs)
    assert all(r.state == "completed" for r in ended), [r for r in ended if r.state != "completed"]
    assert len(ends.ends) == runs, (len(ends.ends), runs)
    return CallbackResult(sw.wall, jobs, snoozes, ends)


def median_ms(values: Sequence[float]) -> float:
    return 1_000 * statistics.median(values)


def end_row(label: str, results: Sequence[CallbackResult]) -> list[object]:
    ends = [t for r in results for t in r.ends.ends]
    closes = [t for r in results for t in r.ends.closes]
    trips: Counter[str] = Counter()
    for r in results:
        trips.update(r.ends.trips)
    count = len(ends)
    return [
        label, median_ms(ends), 1_000 * min(ends), 1_000 * max(ends), median_ms(closes),
        trips["statement"] / count, trips["simple query"] / count, trips["pool reset"] / count,
        sum(r.ends.busy for r in results) / count,
    ]  # fmt: skip


async def measure_callbacks(runs: int, active: int, serial: int, repeat: int) -> None:
    console.print(
        f"\n[bold]1. on_complete: {runs} runs of {SMALL_ROWS} rows (page_size {SMALL_ROWS}), at "
        f"most {active} active at once, {CONCURRENCY} slots[/bold]"
    )
    variants = {"A: no on_complete": False, "B: async on_complete (pass)": True}
    results: dict[str, list[CallbackResult]] = {name: [] for name in variants}
    alone: dict[str, list[CallbackResult]] = {name: [] for name in variants}
    for round_ in range(1, repeat + 1):
        order = list(variants) if round_ % 2 else list(reversed(variants))
        for name in order:
            results[name].append(
                await run_callbacks(runs, on_complete=variants[name], active=active)
            )
        for name in order:
            alone[name].append(await run_callbacks(serial, on_complete=variants[name]))
        console.print(
            f"round {round_}: "
            + ", ".join(
                f"{name[:1]} {results[name][-1].wall:.2f} s "
                f"({results[name][-1].snoozes['link']} link snoozes)"
                for name in order
            )
            + f"; {serial} runs one at a time: "
            + ", ".join(f"{name[:1]} {alone[name][-1].wall:.2f} s" for name in order)
        )
    walls = {name: [r.wall for r in rs] for name, rs in results.items()}
    a, b = (statistics.median(w) for w in walls.values())
    table(
        f"{runs} runs, at most {active} active at once, median of {repeat} interleaved rounds "
        "(fresh schema each)",
        ["variant", "wall s", "min", "max", "ms per run", "B - A per run end, ms", "B / A"],
        [
            [name, statistics.median(w), min(w), max(w), 1_000 * statistics.median(w) / runs,
             "-" if n == 0 else 1_000 * (b - a) / runs, "-" if n == 0 else b / a]
            for n, (name, w) in enumerate(walls.items())
        ],
    )  # fmt: skip
    kinds = sorted({kind for rs in results.values() for r in rs for kind in r.jobs})
    table(
        f"jobs written per run (rows of the jobs table by task suffix) and link snoozes, "
        f"{runs} runs, all {repeat} rounds",
        ["variant", *(f".{kind}" for kind in kinds), "all", "link snoozes"],
        [
            [name, *(sum(r.jobs[kind] for r in rs) / (runs * len(rs)) for kind in kinds),
             sum(r.jobs.total() for r in rs) / (runs * len(rs)),
             sum(r.snoozes["link"] for r in rs) / (runs * len(rs))]
            for name, rs in results.items()
        ],
    )  # fmt: skip
    rows = [end_row(f"{name[:1]}, {active} runs active", rs) for name, rs in results.items()]
    rows += [end_row(f"{name[:1]}, one run alone", rs) for name, rs in alone.items()]
    table(
        f"the end transaction (end_run calls that ended a run), per end, all {repeat} rounds: "
        f"{active} runs active at once, and {serial} runs each worked alone",
        ["variant", "end ms (median)", "min", "max", "of which closing the group ms",
         "statements", "simple queries", "pool resets", "busy calls per end"],
        rows,
    )  # fmt: skip
    quiet_a, quiet_b = (
        statistics.median(t for r in rs for t in r.ends.ends) for rs in alone.values()
    )
    console.print(
        f"on_complete adds {1_000 * (quiet_b - quiet_a):.2f} ms to the end transaction of a run "
        f"worked alone (median B - median A, {serial * repeat} ends each)"
    )


# --- 2. throttle ---------------------------------------------------------------------------


def health_checks(schema: str) -> tuple[sweepq.throttle.HealthCheck, ...]:
    return (
        sweepq.throttle.replica_lag(5),
        sweepq.throttle.long_transactions(300),
        sweepq.throttle.dead_tuples(f"{schema}.rows", 0.5),
    )


class Walk(sweepq.TableSweep):
    name = "bench-walk"
    key: ClassVar[tuple[str, ...]] = ("id",)
    page_size = 100
    window = 1_000

    async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
        return None


class ThrottleResult:
    def __init__(self, wall: float, links: int, snoozes: int) -> None:
        self.wall = wall
        self.links = links
        self.snoozes = snoozes


async def run_throttle(rows: int, *, checked: bool) -> ThrottleResult:
    async with bench_app("throttle", pool_max_size=20) as app:
        await create_rows(app, rows)

        class Declared(Walk):
            table = f"{app.schema}.rows"
            throttle = health_checks(app.schema) if checked else ()

        app.register_sweep(Declared)
        async with sweepq.Worker(app, concurrency=CONCURRENCY) as worker:
            with Stopwatch() as sw:
                started = await app.start_sweep(Declared.name)
                await work_until_ended(app, worker)
        run = await app.sweep_status(started.run_id)
        snoozes = await app.pool.fetchval(
            f"SELECT coalesce(sum(snoozes), 0) FROM {ident(app.schema)}.jobs"
            " WHERE idempotency_scope LIKE 'sweep-link:%'"
        )
    assert run is not None
    assert run.state == "completed", run
    assert run.completed == rows, run
    return ThrottleResult(sw.wall, run.links, int(snoozes))


async def what_the_checks_see(rows: int) -> None:
    """What each check reads on this server, and the median time of one call of each."""
    async with bench_app("throttle_checks") as app:
        await create_rows(app, rows)
        checks = health_checks(app.schema)
        async with app.pool.acquire() as conn:
            replicas = await conn.fetchval("SELECT count(*) FROM pg_stat_replication")
            oldest = await conn.fetchval(
                "SELECT extract(epoch FROM clock_timestamp() - min(xact_start))::float8"
                " FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
            live, dead = await conn.fetchrow(
                "SELECT n_live_tup, n_dead_tup FROM pg_stat_all_tables WHERE relid = $1::regclass",
                f"{app.schema}.rows",
            )
            role = await conn.fetchrow(
                "SELECT current_user AS name, pg_has_role(current_user, 'pg_read_all_stats',"
                " 'USAGE') AS monitor"
            )
            verdicts = [await check(conn) for check in checks]
            first = await sweepq.throttle.first_wait(conn, checks)
            console.print(
                f"what the checks see here (role {role['name']}, pg_read_all_stats: "
                f"{role['monitor']}): {replicas} replicas in pg_stat_replication; oldest other "
                "open transaction of this database: "
                + ("none" if oldest is None else f"{oldest:.1f} s")
                + f"; {ident(app.schema)}.rows {live:,} live / {dead:,} dead rows"
            )
            console.print(
                "each check says: "
                + "; ".join(
                    f"{check!r} -> {'go' if v is None else repr(v)}"
                    for check, v in zip(checks, verdicts, strict=True)
                )
                + f"; first_wait -> {'None (go)' if first is None else repr(first)}"
            )
            calls: dict[str, list[float]] = {}
            for check in checks:
                calls[repr(check)] = [await timed_call(check, conn) for _ in range(CHECK_CALLS)]

            async def all_three(c: Any) -> object:
                return await sweepq.throttle.first_wait(c, checks)

            calls["first_wait over the three"] = [
                await timed_call(all_three, conn) for _ in range(CHECK_CALLS)
            ]
    table(
        f"one call of each check, {CHECK_CALLS} calls each on one pooled connection",
        ["check", "ms (median)", "min", "max"],
        [[name, median_ms(t), 1_000 * min(t), 1_000 * max(t)] for name, t in calls.items()],
    )


async def timed_call(check: Any, conn: Any) -> float:
    started = time.perf_counter()
    await check(conn)
    return time.perf_counter() - started


async def measure_throttle(rows: int, repeat: int) -> None:
    console.print(
        f"\n[bold]2. throttle: a TableSweep over {rows:,} rows (page_size 100, window 1,000), "
        f"{CONCURRENCY} slots[/bold]"
    )
    await what_the_checks_see(rows)
    variants = {"A: throttle = ()": False, "B: the three checks": True}
    results: dict[str, list[ThrottleResult]] = {name: [] for name in variants}
    for round_ in range(1, repeat + 1):
        order = list(variants) if round_ % 2 else list(reversed(variants))
        for name in order:
            results[name].append(await run_throttle(rows, checked=variants[name]))
        console.print(
            f"round {round_}: "
            + ", ".join(
                f"{name[:1]} {results[name][-1].wall:.2f} s ({results[name][-1].links} links, "
                f"{results[name][-1].snoozes} link snoozes)"
                for name in order
            )
        )
    medians = [statistics.median(r.wall for r in rs) for rs in results.values()]
    links = results["A: throttle = ()"][-1].links
    out = []
    for n, (name, rs) in enumerate(results.items()):
        walls = [r.wall for r in rs]
        wall = medians[n]
        out.append([
            name, wall, min(walls), max(walls), rows / wall, 1_000 * wall / rs[-1].links,
            sum(r.snoozes for r in rs),
            "-" if n == 0 else 1_000 * (medians[1] - medians[0]) / links,
        ])  # fmt: skip
    table(
        f"{rows:,} no-op items, {links:,} links, median of {repeat} interleaved rounds",
        ["variant", "wall s", "min", "max", "items/s", "ms per link", "link snoozes",
         "B - A per link, ms"],
        out,
    )  # fmt: skip


async def main(args: argparse.Namespace) -> None:
    runs = args.runs or (30 if args.quick else 200)
    rows = args.rows or (5_000 if args.quick else 50_000)
    await print_environment(
        f"Sweep callbacks: on_complete over {runs} small runs, throttle over {rows:,} rows"
    )
    serial = min(runs, 10 if args.quick else 30)
    await measure_callbacks(runs, min(args.active, CONCURRENCY - 1), serial, args.repeat)
    await measure_throttle(rows, args.repeat)


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=None, help="small runs (default 200)")
    parser.add_argument(
        "--active", type=int, default=10, help="most runs active at once (default 10, < 20)"
    )
    parser.add_argument("--rows", type=int, default=None, help="rows to sweep (default 50,000)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the median counts")


if __name__ == "__main__":
    anyio.run(main, parse_args(__doc__ or "", options))
