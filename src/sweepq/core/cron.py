"""Cron: schedules that enqueue a task on each tick, exactly once across all workers.

The elected maintenance leader walks the registered schedules. For each due schedule it locks
the schedule's row, enqueues the tick's job, and moves `next_run_at` to the first tick after the
database's now() in the same transaction: a tick enqueues once, missed ticks do not stack up, and
time comes from the database.

A schedule's job is "start if not already running":
Each tick's job also carries `idempotency_key="<name>@<tick>"` (scope `cron`), so a tick can
never enqueue twice. Expressions have five fields, or six with seconds first.

- `overlap="skip"`: the job carries `identity_key="cron:<name>"`; a tick whose previous job is
  still active is skipped (recorded as `skipped`), and the schedule carries on.
- `overlap="buffer_one"`: the job carries `concurrency_key="cron:<name>"` limited to 1; a tick
  while one runs enqueues one more that waits its turn, unless one is already waiting.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, Unpack

import msgspec
from cronsim import CronSim, CronSimError

from .errors import InvalidJobOptionError
from .ident import queue_name
from .jobs import Enqueued
from .options import JobOptions
from .queries import Conn, Queries, RuntimeQueries
from .tasks import Task, storable_text

Overlap = Literal["skip", "buffer_one"]
_NAME_MAX = 200


class CronSchedule(msgspec.Struct, frozen=True):
    """A registered schedule (see `App.cron`)."""

    name: str
    expression: str
    task: str
    args: dict[str, Any]
    overlap: Overlap
    queue: str | None
    encoded_args: str

    @property
    def key(self) -> str:
        return f"cron:{self.name}"


def next_tick(expression: str, after: datetime) -> datetime:
    """The first tick of `expression` strictly after `after` (UTC)."""
    start = after.astimezone(UTC).replace(microsecond=0)
    return next(CronSim(expression, start)).astimezone(UTC)


def validate_expression(expression: str, name: str) -> None:
    if not isinstance(expression, str):
        raise InvalidJobOptionError(f"cron {name!r}: the expression must be a string")
    try:
        next_tick(expression, datetime.now(UTC))
    except (CronSimError, StopIteration, ValueError) as exc:
        raise InvalidJobOptionError(
            f"cron {name!r}: {expression!r} is not a valid cron expression ({exc}); "
            "use five fields (minute hour day month weekday), e.g. '*/5 * * * *', or six with "
            "seconds first"
        ) from None


def make_schedule(
    name: str,
    expression: str,
    task: Task,
    args: dict[str, Any] | None,
    *,
    overlap: str,
    queue: str | None,
) -> CronSchedule:
    if not isinstance(name, str) or not name or len(name) > _NAME_MAX or not storable_text(name):
        raise InvalidJobOptionError(
            f"cron name must be a non-empty string of at most {_NAME_MAX} characters without "
            f"NUL ('\\x00'), got {name!r}"
        )
    if overlap not in ("skip", "buffer_one"):
        raise InvalidJobOptionError(
            f"cron {name!r}: overlap must be 'skip' or 'buffer_one', got {overlap!r}"
        )
    validate_expression(expression, name)
    encoded = task.encode_args(args)
    return CronSchedule(
        name=name,
        expression=expression,
        task=task.name,
        args=dict(args or {}),
        overlap=overlap,  # type: ignore[arg-type]  # checked just above
        queue=None if queue is None else queue_name(queue),
        encoded_args=encoded,
    )


class Enqueue(Protocol):
    """What cron enqueues a tick's job with (`App.enqueue`, inside the tick's transaction)."""

    def __call__(
        self, task: str, args: dict[str, Any], *, conn: Conn, **options: Unpack[JobOptions]
    ) -> Awaitable[Enqueued]: ...


async def register(
    conn: Conn, queries: Queries, schedules: Sequence[CronSchedule], *, now: datetime
) -> None:
    """Make sure every schedule has its row (a new or changed expression restarts its ticks)."""
    for schedule in schedules:
        if schedule.overlap == "buffer_one":
            await queries.concurrency_key_set_limit(conn, schedule.key, 1)
        await queries.runtime.cron_upsert(
            conn, schedule.name, schedule.expression, next_tick(schedule.expression, now)
        )


async def enqueue_due(
    conn: Conn, queries: RuntimeQueries, schedule: CronSchedule, enqueue: Enqueue
) -> bool:
    """Enqueue the schedule's due tick once, in one transaction on `conn`; whether a job was
    created (False also when nothing was due)."""
    async with conn.transaction():
        due = await queries.cron_lock_due(conn, schedule.name)
        if due is None:
            return False
        tick, now = due
        # One job per tick even if two leaders ever overlap.
        options: JobOptions = {
            "queue": schedule.queue,
            "idempotency_scope": "cron",
            "idempotency_key": f"{schedule.name}@{tick.isoformat()}",
        }
        if schedule.overlap == "skip":
            options["identity_key"] = schedule.key
        elif await queries.cron_count_waiting(conn, schedule.key) == 0:
            options["concurrency_key"] = schedule.key
        else:
            options = {}  # one already waits its turn: nothing to enqueue
        result = None
        if options:
            args = msgspec.json.decode(schedule.encoded_args)
            result = await enqueue(schedule.task, args, conn=conn, **options)
        created = result is not None and result.created
        await queries.cron_advance(
            conn,
            schedule.name,
            tick,
            None if result is None else result.job_id,
            "enqueued" if created else "skipped",
            next_tick(schedule.expression, now),
        )
        return created
