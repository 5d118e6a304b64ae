"""Shared by the sweep tests: a fresh sweeps app, a TableSweep of the items table (made by
`factories.create_items`), and a worker process (`python sweep_worker_proc.py DSN SCHEMA`) that
works that sweep until it is killed.

The process prints `ready <worker id>` once its worker runs; it has a short lease (1 s) so that
the jobs it held when killed are rescued quickly by the next worker.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

import anyio

import sweepq
from factories import drop_schema
from sweepq.core.ident import ident
from sweepq.sweeps.app import App
from waiting import wait_until

WORKER_OPTIONS: dict[str, Any] = {
    "lease_seconds": 1.0,
    "heartbeat_seconds": 0.3,
    "poll_seconds": 0.2,
    "maintenance_seconds": 0.2,
    "leader_ttl_seconds": 1.0,
}


@contextlib.asynccontextmanager
async def sweeps_app(dsn: str, schema: str | None = None) -> AsyncIterator[App]:
    """A fresh schema, migrated (core and sweeps), with an open sweeps App; dropped afterwards."""
    schema = schema or f"t_{uuid.uuid4().hex[:12]}"
    # Handlers beyond its size wait for a connection: tests run three at a time on one server.
    app = App(dsn, schema=schema, pool_max_size=12)
    async with app:
        await app.migrate()
        try:
            yield app
        finally:
            await drop_schema(app.pool, schema)


class ItemsSweep(sweepq.TableSweep):
    """Handles every row of `items`: records it in `handled`, fails if `fail`, may sleep."""

    name = "items"
    key: ClassVar[tuple[str, ...]] = ("created_at", "id")

    async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
        assert self.app is not None
        delay = self.params.get("delay", 0)
        if delay:
            await anyio.sleep(delay)
        await self.app.pool.execute(
            f"INSERT INTO {ident(self.app.schema)}.handled (item_id) VALUES ($1)", item["id"]
        )
        if item["fail"]:
            raise RuntimeError(f"item {item['id']} always fails")


def items_sweep(schema: str, **settings: Any) -> type[ItemsSweep]:
    """An ItemsSweep over `<schema>.items` with other settings (page_size=..., window=...)."""

    class Items(ItemsSweep):
        table = f"{schema}.items"

    for attribute, value in settings.items():
        setattr(Items, attribute, value)
    return Items


async def run_until_ended(
    app: App, run_id: int, *, concurrency: int = 20, timeout: float = 60.0
) -> sweepq.SweepRun:
    """Run a worker until the run has ended; returns the ended run."""
    async with (
        sweepq.Worker(app, concurrency=concurrency, **WORKER_OPTIONS) as worker,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(worker.run)
        run = await wait_for_run(app, run_id, lambda r: r.ended, timeout=timeout)
        worker.stop()
    return run


async def wait_for_run(
    app: App,
    run_id: int,
    condition: Callable[[sweepq.SweepRun], bool],
    *,
    timeout: float = 60.0,
) -> sweepq.SweepRun:
    """Poll the run until `condition(run)` holds; the run as it was then."""
    seen: list[sweepq.SweepRun] = []

    async def holds() -> bool:
        run = await app.sweep_status(run_id)
        assert run is not None
        seen[:] = [run]
        return condition(run)

    await wait_until(holds, timeout=timeout, what=f"run {run_id}: {condition}")
    return seen[-1]


def crash_sweep(schema: str) -> type[ItemsSweep]:
    """The sweep the worker process works (the killing test registers the same one)."""
    return items_sweep(schema, page_size=50, window=200)


async def main(dsn: str, schema: str) -> None:
    app = App(dsn, schema=schema)
    app.register_sweep(crash_sweep(schema))
    async with app, sweepq.Worker(app, concurrency=10, **WORKER_OPTIONS) as worker:
        print("ready", worker.id, flush=True)
        await worker.run()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
