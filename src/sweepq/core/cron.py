"""Cron: schedules that enqueue a task on each tick, exactly once across all workers.

The elected maintenance leader walks the registered schedules. For each due schedule it locks
the schedule's row, enqueues the tick's job, and moves `next_run_at` to the first tick after the
database's now() in the same transaction: a tick enqueues once, missed ticks do not stack up, and
time comes from the database.

Ticks are computed in the schedule's time zone (`tz`, UTC by default) and stored as UTC
instants. Across a DST change, an expression with a fixed minute and hour (neither field starts
with `*`) keeps to the local wall clock as Debian cron does: a time the spring change skips runs
at the first valid minute after it, a time the autumn change repeats runs once, at its first
instant. Any other expression ticks at every instant whose local time matches it.

A schedule's job is "start if not already running":
Each tick's job also carries `idempotency_key="<name>@<tick>"` (scope `cron`), so a tick can
never enqueue twice. Expressions have five fields, or six with seconds first.

- `overlap="skip"`: the job carries `identity_key="cron:<name>"`; a tick whose previous job is
  still active is skipped (recorded as `skipped`), and the schedule carries on.
- `overlap="buffer_one"`: the job carries `concurrency_key="cron:<name>"` limited to 1; a tick
  while one runs enqueues one more that waits its turn, unless one is already waiting.
"""

from __future__ import annotations

import difflib
from collections.abc import Awaitable, Iterator, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Literal, Protocol, Unpack
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import msgspec
from cronsim import CronSim, CronSimError

from .checks import storable_text
from .errors import InvalidJobOptionError
from .ident import queue_name
from .jobs import Enqueued
from .options import JobOptions
from .queries import Conn, Queries, RuntimeQueries
from .tasks import Task

Overlap = Literal["skip", "buffer_one"]
_NAME_MAX = 200


class CronSchedule(msgspec.Struct, frozen=True):
    """A registered schedule (see `App.cron`)."""

    name: str
    expression: str
    tz: str
    task: str
    args: dict[str, Any]
    overlap: Overlap
    queue: str | None
    encoded_args: str

    @property
    def key(self) -> str:
        return f"cron:{self.name}"


def zone(tz: str) -> tzinfo:
    """The time zone named `tz` (UTC is `datetime.UTC`: UTC schedules tick as they always did)."""
    return UTC if tz == "UTC" else ZoneInfo(tz)


def next_tick(expression: str, after: datetime, tz: str = "UTC") -> datetime:
    """The first tick of `expression` in time zone `tz` strictly after `after`, in UTC."""
    where = zone(tz)
    start = after.astimezone(where).replace(microsecond=0)
    if where is UTC or not _fixed_time(expression):
        ticks: Iterator[datetime] = CronSim(expression, start)
    else:
        ticks = _wall_clock_ticks(expression, start)
    # Not the first one blindly: from a start in the second pass of a repeated hour, the wall
    # clock's next fixed time can be the first pass's, an instant before `after`.
    return next(t for t in (tick.astimezone(UTC) for tick in ticks) if t > after)


def _fixed_time(expression: str) -> bool:
    """Whether the expression's minute and hour are fixed times (cronsim's test for its DST
    handling, which it applies to five-field expressions only: here, to six too)."""
    fields = expression.split()
    return len(fields) in (5, 6) and not any(f.startswith("*") for f in fields[-5:-3])


def _wall_clock_ticks(expression: str, start: datetime) -> Iterator[datetime]:
    """The ticks of a fixed-time expression on `start`'s local wall clock, placed as cronsim
    places those of a five-field one: a wall time that does not exist (skipped by a spring
    change) moves to the first minute that does; one that exists twice (repeated by an autumn
    change) is its first instant (fold=0)."""
    where = start.tzinfo
    for wall in CronSim(expression, start.replace(tzinfo=None)):
        while not _exists(wall, where):
            wall += timedelta(minutes=1)
        yield wall.replace(tzinfo=where, fold=0)


def _exists(wall: datetime, where: tzinfo | None) -> bool:
    instant = wall.replace(tzinfo=where).astimezone(UTC)
    return instant.astimezone(where).replace(tzinfo=None) == wall


def validate_zone(tz: str, name: str) -> None:
    if not isinstance(tz, str):
        raise InvalidJobOptionError(f"cron {name!r}: tz must be a time zone name, got {tz!r}")
    try:
        zone(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidJobOptionError(
            f"cron {name!r}: {tz!r} is not a time zone{_zone_hint(tz)}; use an IANA name such as "
            "'Europe/Paris' or 'America/New_York' (list them with: python -c \"import zoneinfo; "
            'print(*sorted(zoneinfo.available_timezones()), sep=chr(10))")'
        ) from None


def _zone_hint(tz: str) -> str:
    known = {name.lower(): name for name in available_timezones()}
    if not known:
        return " (this Python finds no time zone database: install the tzdata package)"
    wanted = tz.strip().lower().replace(" ", "_")
    close = difflib.get_close_matches(wanted, known, n=1, cutoff=0.8)
    # A city alone ('Paris') is the last part of its zone's name ('Europe/Paris').
    close = close or sorted(k for k in known if k.rsplit("/", 1)[-1] == wanted)[:1]
    return f" (did you mean {known[close[0]]!r}?)" if close else ""


def validate_expression(expression: str, name: str, tz: str = "UTC") -> None:
    if not isinstance(expression, str):
        raise InvalidJobOptionError(f"cron {name!r}: the expression must be a string")
    try:
        next_tick(expression, datetime.now(UTC), tz)
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
    tz: str = "UTC",
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
    validate_zone(tz, name)
    validate_expression(expression, name, tz)
    encoded = task.encode_args(args)
    return CronSchedule(
        name=name,
        expression=expression,
        tz=tz,
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
    """Make sure every schedule has its row (a new or changed expression or time zone restarts
    its ticks)."""
    for schedule in schedules:
        if schedule.overlap == "buffer_one":
            await queries.concurrency_key_set_limit(conn, schedule.key, 1)
        first = next_tick(schedule.expression, now, schedule.tz)
        await queries.runtime.cron_upsert(
            conn, schedule.name, schedule.expression, schedule.tz, first
        )


async def enqueue_due(
    conn: Conn,
    queries: RuntimeQueries,
    schedule: CronSchedule,
    enqueue: Enqueue,
    *,
    now: datetime | None = None,
) -> bool:
    """Enqueue the schedule's due tick once, in one transaction on `conn`; whether a job was
    created (False also when nothing was due). `now` (tests) replaces the database's clock."""
    async with conn.transaction():
        due = await queries.cron_lock_due(conn, schedule.name, now)
        if due is None:
            return False
        tick, now = due
        # One job per tick even if two leaders ever overlap. The key is the tick's UTC instant,
        # so the two passes of a repeated local hour are two keys, whatever the zone.
        options: JobOptions = {
            "queue": schedule.queue,
            "idempotency_scope": "cron",
            "idempotency_key": f"{schedule.name}@{tick.astimezone(UTC).isoformat()}",
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
            next_tick(schedule.expression, now, schedule.tz),
        )
        return created
