"""Pausing and resuming queues for every worker at once (`App.pause_queue`, `sweepq queues`).

A pause is a row of `queue_pauses`; the claim leaves paused queues out of what it reads, so a
paused queue's jobs stay `available` and nothing is written while they wait. Pausing and
resuming notify the workers' channel: a worker logs a pause or a resume of one of its queues,
and a resume wakes it to claim at once. A row lives from its pause to its resume.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from . import admin, checks, ident
from .database import Database
from .queries import Conn, Executor, Queries

# Notifications on the workers' channel other than a queue's name start with '!', which no
# queue name can (`ident.queue_name`): workers of every version tell them apart.
PAUSED = "!paused:"
RESUMED = "!resumed:"
MAX_REASON_LENGTH = 512


class QueuePause(msgspec.Struct, frozen=True):
    """A paused queue: since when, and why (None if no reason was given)."""

    queue: str
    paused_at: datetime
    reason: str | None


class QueueState(msgspec.Struct, frozen=True, kw_only=True):
    """A queue as `sweepq queues list` shows it: its live jobs and whether it is paused.

    Attributes:
        queue: the queue's name.
        due: available jobs whose time has come (waiting for a slot, or for the resume).
        scheduled: available jobs scheduled later.
        running: jobs running now.
        oldest_due_seconds: how long the oldest due job has been due, None if none is.
        pause: the queue's pause, None if it is not paused.
    """

    queue: str
    due: int = 0
    scheduled: int = 0
    running: int = 0
    oldest_due_seconds: float | None = None
    pause: QueuePause | None = None


def check_pause(queue: object, reason: object) -> tuple[str, str | None]:
    """The arguments of `App.pause_queue`, checked."""
    name = ident.queue_name(queue)
    if reason is None:
        return name, None
    return name, checks.text(reason, "reason", empty_ok=True, longest=MAX_REASON_LENGTH)


async def pause(db: Database, queue: str, reason: str | None, conn: Conn | None) -> bool:
    queue, reason = check_pause(queue, reason)
    async with db.own_connection(conn) as c:
        paused: bool = await c.fetchval(
            db.queries.sql["queue_pause"], queue, reason, db.queries.channel
        )
    return paused


async def resume(db: Database, queue: str, conn: Conn | None) -> bool:
    queue = ident.queue_name(queue)
    async with db.own_connection(conn) as c:
        resumed: bool = await c.fetchval(db.queries.sql["queue_resume"], queue, db.queries.channel)
    return resumed


async def pauses(queries: Queries, conn: Executor) -> list[QueuePause]:
    """Every paused queue, oldest pause first."""
    return [QueuePause(*r) for r in await conn.fetch(queries.sql["queue_pause_list"])]


async def states(db: Database, conn: Conn | None) -> list[QueueState]:
    """Every queue with live jobs or a pause, by name."""
    async with db.own_connection(conn) as c:
        live = await admin.top_job_live(db.queries, c)
        paused = {p.queue: p for p in await pauses(db.queries, c)}
    found = {
        q.queue: QueueState(
            queue=q.queue,
            due=q.due,
            scheduled=q.scheduled,
            running=q.running,
            oldest_due_seconds=q.oldest_due_seconds,
            pause=paused.get(q.queue),
        )
        for q in live
    }
    for name, pause_ in paused.items():
        found.setdefault(name, QueueState(queue=name, pause=pause_))
    return [found[name] for name in sorted(found)]
