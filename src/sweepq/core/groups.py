"""Closing a job group: sealing it against new jobs, and enqueueing its `then` once it has ended.

A group's row in `job_groups` (core migration 0011) is what closing works on. Every insert into
the jobs table locks the rows of its groups FOR KEY SHARE and is refused if one is sealed (the
table's trigger, so that every path obeys it). `close` seals the row and commits (which waits
for no enqueue, and has every later one refused), then runs the firing step, whose FOR UPDATE
waits for the enqueues that were in flight: their jobs are counted before anything fires.

Firing, in one READ COMMITTED transaction: find the groups with no job available or running
(a read that locks nothing: a group with jobs left is fired by whoever ends the last of them);
lock the sealed, unfired rows of those FOR UPDATE; in a new statement (a new snapshot: it sees
every finish committed before the lock was held), count again; enqueue the `then` jobs of those
still ended through the normal insert path and mark the rows fired. A second firer waits for
the row, then finds it fired.

Who fires, so that no ended group stays sealed and unfired: `close` itself (a group that is
empty when closed), the worker once it has recorded outcomes that ended jobs of a sealed group
(`job_finish_many` names them), the App's calls that end jobs (`cancel`, `cancel_group`,
`rescue_lapsed`, `expire_deadlines`), and the maintenance leader every round, for every sealed
group (`fire_waiting`): it catches what the others could not see (a finish whose statement began
before the close committed, a worker killed between its finish and its firing step).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

from . import enqueue
from .errors import GroupClosedError
from .jobs import GroupClosure, JobId
from .queries import Conn, Queries
from .rows import LockedGroup

logger = logging.getLogger("sweepq")


@contextlib.asynccontextmanager
async def transaction(conn: Conn) -> AsyncIterator[None]:
    """The caller's transaction if `conn` is in one, else a READ COMMITTED one of our own (the
    firing step's count must read a snapshot taken after its lock, whatever the default)."""
    if conn.is_in_transaction():
        yield
        return
    async with conn.transaction(isolation="read_committed"):
        yield


async def close(
    queries: Queries, conn: Conn, group: str, then_spec: str | None, then_group: str | None
) -> GroupClosure:
    """Seal `group` with `then_spec` (`enqueue.encode_spec`; its job's own group `then_group`),
    or find it sealed already; fire it if it has ended.

    Two transactions, unless `conn` is in one: the seal, which waits for no enqueue into the
    group and, once committed, has new ones refused at once; then the firing step, whose lock
    waits for the enqueues in flight when the seal committed. In one transaction (the caller's),
    the firing step's lock waits until no enqueue of the group is in flight at all.
    """
    async with transaction(conn):
        if then_group is not None:
            other = await queries.job_group_get(conn, then_group)
            if other is not None and other.sealed:
                raise GroupClosedError(then_group)  # `then` could never be enqueued
        sealed = await queries.job_group_seal(conn, group, then_spec)
        if not sealed:
            row = await queries.job_group_get(conn, group)
            assert row is not None  # the seal met it, and holds its lock
            if row.fired:
                return GroupClosure(group, row.then_job, fired=True, already_closed=True)
    async with transaction(conn):
        fired = await fire(queries, conn, [group])
        if group in fired:
            return GroupClosure(group, fired[group], fired=True, already_closed=not sealed)
        # Another firer may have fired it between the two transactions.
        row = await queries.job_group_get(conn, group)
    assert row is not None
    return GroupClosure(group, row.then_job, row.fired, already_closed=not sealed)


async def fire(
    queries: Queries, conn: Conn, groups: Sequence[str], *, skip_locked: bool = False
) -> dict[str, JobId | None]:
    """Fire those of `groups` that are sealed, unfired and ended; {group: its then job}.

    A read without a lock comes first: a group with jobs left is neither locked nor waited for
    (whoever ends its last job fires it). The others' rows are locked, waiting for their holders
    unless `skip_locked` (a held row is then left to its holder). `conn` is in a transaction;
    outside READ COMMITTED nothing fires (the maintenance leader does it). A `then` refused
    because its own group is closed leaves its group unfired, with a warning (a later firing
    tries again).
    """
    ended = await queries.job_group_ended(conn, sorted(set(groups)))
    if not ended:
        return {}
    lock = queries.job_group_lock_sealed_free if skip_locked else queries.job_group_lock_sealed
    return await _fire_locked(queries, conn, await lock(conn, sorted(ended)))


async def fire_now(queries: Queries, conn: Conn, groups: Sequence[str]) -> dict[str, JobId | None]:
    """`fire`, in a transaction of its own unless `conn` is in one. Outside one, the first read
    runs alone: a group with jobs left (what a worker's recorded batch usually finds) then
    costs one statement, and no transaction."""
    if not groups:
        return {}
    if not conn.is_in_transaction():
        groups = sorted(await queries.job_group_ended(conn, sorted(set(groups))))
        if not groups:
            return {}
    async with transaction(conn):
        return await fire(queries, conn, groups)


async def fire_waiting(queries: Queries, conn: Conn, limit: int) -> int:
    """The maintenance leader's sweep: fire every sealed, unfired group that has ended, reading
    `limit` of them at a time (each page its own transaction unless `conn` is in one); rows
    locked by someone else are skipped. Returns how many fired."""
    fired = 0
    after: str | None = None
    while True:
        async with transaction(conn):
            names = await queries.job_group_sealed_page(conn, after, limit)
            if names:
                fired += len(await fire(queries, conn, names, skip_locked=True))
        if len(names) < limit:
            return fired
        after = names[-1]


async def _fire_locked(
    queries: Queries, conn: Conn, locked: Sequence[LockedGroup]
) -> dict[str, JobId | None]:
    if not locked:
        return {}
    ended = await queries.job_group_ended(conn, [g.name for g in locked])
    ready = [g for g in locked if g.name in ended]
    if not ready:
        return {}
    with_then = [g for g in ready if g.then_spec is not None]
    then_jobs = await _enqueue_then(queries, conn, with_then)
    # A group whose `then` could not be enqueued stays unfired (the next firing tries again).
    fired = {
        g.name: then_jobs.get(g.name) for g in ready if g.then_spec is None or g.name in then_jobs
    }
    if fired:
        await queries.job_group_fired(conn, list(fired), list(fired.values()))
    return fired


async def _enqueue_then(
    queries: Queries, conn: Conn, groups: Sequence[LockedGroup]
) -> dict[str, JobId]:
    """Enqueue the `then` jobs of `groups` (ended), in one call; {group: the job's id}."""
    if not groups:
        return {}
    rows = enqueue.decode_specs([g.then_spec or "" for g in groups])
    try:
        async with conn.transaction():  # a savepoint: a refusal leaves the others to enqueue
            done = await enqueue.insert(queries, conn, rows)
        return {g.name: e.job_id for g, e in zip(groups, done, strict=True)}
    except GroupClosedError:
        if len(groups) == 1:
            _warn_closed(groups[0], rows)
            return {}
    found: dict[str, JobId] = {}
    for group in groups:
        one = enqueue.decode_specs([group.then_spec or ""])
        try:
            async with conn.transaction():
                found[group.name] = (await enqueue.insert(queries, conn, one))[0].job_id
        except GroupClosedError:
            _warn_closed(group, one)
    return found


def _warn_closed(group: LockedGroup, rows: enqueue.Rows) -> None:
    logger.warning(
        "group %r has ended, but its then job (task %s) cannot be enqueued: its own group %r "
        "is closed; reopen that group (app.reopen_group) and the maintenance leader enqueues it",
        group.name,
        rows.get("task", 0),
        rows.get("group", 0),
    )
