"""A worker process for the PostgreSQL-restart tests:
`python fault_restart_worker.py KIND DSN SCHEMA LEDGER_FOLDER LEASE_SECONDS`, KIND one of `db`,
`local`, `sweep`.
It prints `ready <pid> <application_name>` once its worker runs, then works until it is killed.

Every execution sleeps `delay` (its work) and then ends in one of two ways, written to this
process's ledger file (`ledger-<pid>.txt`, one line per execution, flushed at once; it needs no
database, so it is complete whatever the server did):

- `finished`: the handler returned;
- `raised`: the handler raised (its database write failed because the server went away).

Handlers, by KIND:
- `db` (task `fault_restart.record`): the work is one INSERT into `handled` (its own transaction)
  of a row keyed by an id drawn for this execution; if it fails, the handler raises. A row whose
  execution also `raised` is a commit whose acknowledgement the restart cut off.
- `local` (the same task): the work does not touch the database, so handlers keep finishing while
  the server is away and their outcomes wait in the worker until it is back.
- `sweep`: an ItemsSweep over `<schema>.items` whose handler works as `db` (with `item_id`).

The heartbeat is a quarter of the lease, at most 1 s.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

import sweepq
from sweep_worker_proc import ItemsSweep
from sweepq.core.app import App as CoreApp
from sweepq.core.ident import ident

WORKER_OPTIONS: dict[str, Any] = {
    "poll_seconds": 0.2,
    "maintenance_seconds": 0.2,
    "leader_ttl_seconds": 2.0,
}
CONCURRENCY = 10
TASK = "fault_restart.record"
KINDS = ("db", "local", "sweep")


class Ledger:
    """How each execution of this process ended, one line each: `END EXECUTION JOB ATTEMPT PID
    ITEM UNIX_TIME` (ITEM is - outside sweeps)."""

    def __init__(self, folder: Path | None) -> None:
        self._fd: int | None = None
        if folder is not None:
            path = folder / f"ledger-{os.getpid()}.txt"
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(
        self, end: str, execution: uuid.UUID, ctx: sweepq.Context, item_id: int | None
    ) -> None:
        assert self._fd is not None, "a ledger folder is needed to run handlers"
        item = "-" if item_id is None else str(item_id)
        line = f"{end} {execution} {ctx.job_id} {ctx.attempt} {os.getpid()} {item} {time.time()}"
        # One write per line, unbuffered: the line is in the file when the handler ends.
        os.write(self._fd, f"{line}\n".encode())


class Entry:
    """One line of a ledger."""

    __slots__ = ("at", "attempt", "end", "execution", "item_id", "job_id", "pid")

    def __init__(self, line: str) -> None:
        end, execution, job_id, attempt, pid, item, at = line.split()
        self.end = end
        self.execution = uuid.UUID(execution)
        self.job_id = int(job_id)
        self.attempt = int(attempt)
        self.pid = int(pid)
        self.item_id = None if item == "-" else int(item)
        self.at = float(at)


def read_ledgers(folder: Path) -> list[Entry]:
    """Every execution of every worker process that wrote a ledger in `folder` (a line being
    written as we read is left for the next read)."""
    entries: list[Entry] = []
    for path in sorted(folder.glob("ledger-*.txt")):
        lines = path.read_text().split("\n")
        entries.extend(Entry(line) for line in lines[:-1])
    return entries


LEDGER = Ledger(None)


async def create_handled(app: sweepq.App) -> None:
    """`handled`: the rows that executions of the `db` handler committed."""
    await app.pool.execute(
        f"""CREATE TABLE {ident(app.schema)}.handled (
            execution uuid        PRIMARY KEY,
            job_id    bigint      NOT NULL,
            attempt   integer     NOT NULL,
            pid       integer     NOT NULL,
            at        timestamptz NOT NULL DEFAULT clock_timestamp())"""
    )


async def extend_handled(app: sweepq.App) -> None:
    """Give the sweep tests' `handled (item_id, at)` (see `create_items`) the same columns."""
    await app.pool.execute(
        f"""ALTER TABLE {ident(app.schema)}.handled
            ADD COLUMN execution uuid    PRIMARY KEY,
            ADD COLUMN job_id    bigint  NOT NULL,
            ADD COLUMN attempt   integer NOT NULL,
            ADD COLUMN pid       integer NOT NULL,
            ALTER COLUMN at SET DEFAULT clock_timestamp()"""
    )


async def work(
    app: CoreApp, ctx: sweepq.Context, delay: float, *, db: bool, item_id: int | None = None
) -> None:
    """Sleep `delay`, commit this execution's row if `db`, and write how it ended."""
    execution = uuid.uuid4()
    await anyio.sleep(delay)
    if db:
        columns = "execution, job_id, attempt, pid" + ("" if item_id is None else ", item_id")
        values = [execution, ctx.job_id, ctx.attempt, os.getpid()]
        if item_id is not None:
            values.append(item_id)
        placeholders = ", ".join(f"${i}" for i in range(1, len(values) + 1))
        try:
            await app.pool.execute(
                f"INSERT INTO {ident(app.schema)}.handled ({columns}) VALUES ({placeholders})",
                *values,
            )
        except Exception:
            LEDGER.write("raised", execution, ctx, item_id)
            raise
    LEDGER.write("finished", execution, ctx, item_id)


def register_task(app: sweepq.App, *, db: bool = True) -> sweepq.Task:
    """The jobs tests' task (see the module's docstring)."""

    @app.task(name=TASK)
    async def record(ctx: sweepq.Context, delay: float) -> None:
        await work(ctx.app, ctx, delay, db=db)

    return record


class RecordingItems(ItemsSweep):
    """ItemsSweep whose handler works as the `db` handler."""

    page_size = 100
    window = 400

    async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
        assert self.app is not None
        await work(self.app, ctx, self.params.get("delay", 0), db=True, item_id=item["id"])


def restart_sweep(schema: str) -> type[RecordingItems]:
    """The sweep over `<schema>.items` that the worker works (the test registers it too)."""

    class Items(RecordingItems):
        table = f"{schema}.items"

    return Items


async def main(kind: str, dsn: str, schema: str, folder: str, lease: str) -> None:
    global LEDGER
    LEDGER = Ledger(Path(folder))
    app = sweepq.App(dsn, schema=schema, pool_max_size=CONCURRENCY + 2)
    if kind == "sweep":
        app.register_sweep(restart_sweep(schema))
    elif kind in KINDS:
        register_task(app, db=kind == "db")
    else:
        raise SystemExit(f"unknown kind {kind!r}: one of {KINDS}")
    lease_seconds = float(lease)
    heartbeat = min(1.0, lease_seconds / 4)
    async with (
        app,
        sweepq.Worker(
            app,
            concurrency=CONCURRENCY,
            lease_seconds=lease_seconds,
            heartbeat_seconds=heartbeat,
            **WORKER_OPTIONS,
        ) as worker,
    ):
        print("ready", os.getpid(), worker.application_name, flush=True)
        await worker.run()


if __name__ == "__main__":
    kind, dsn, schema, folder, lease = sys.argv[1:6]
    anyio.run(main, kind, dsn, schema, folder, lease)
