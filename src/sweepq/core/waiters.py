"""Waiting for a job to finish (`App.wait_for`): woken by LISTEN/NOTIFY, not by polling.

A waiter works on a connection of its own (autocommit, READ COMMITTED), in this order:

1. it LISTENs on the schema's "finished" channel (`finished_channel`);
2. it inserts its row into `job_waiters` (committed at once);
3. it reads the job through `job_settled`, which reads its row `FOR SHARE`, and so waits for a
   transaction that is ending the job to commit: a terminal job is the answer; otherwise it
   waits for a notification naming the job, and reads it again.

Every statement that makes a job terminal (the worker's outcomes, `cancel`, rescue of a lapsed
lease past its last attempt, deadline expiry by maintenance or by a claim) calls
`job_waiters_notify` with the jobs it changed, after its UPDATE; that function reads
`job_waiters` with a fresh snapshot and notifies only the jobs that have a waiter row, so a job
nobody waits for costs no NOTIFY. Why no finish can slip between the read and the wait: if the
finishing statement updated the job first, the waiter's read waits for it to commit and sees the
job terminal; if the waiter read it first, the update waits for that read's lock to go, and then
its fresh snapshot has the waiter's row (committed before the read), so it notifies, and the
waiter has been LISTENing since before it inserted that row. Core migration 0010 says the same
beside the SQL. The share lock is rolled back with a subtransaction the moment the row is read:
a waiter never holds it (whatever its own transaction does next), and a claim (`SKIP LOCKED`)
skips the job only for that instant. No lock that another role could take is involved.

While it waits, a waiter renews its row every `RENEW_SECONDS`; retention prunes only rows not
renewed for `WAITER_MIN_AGE_SECONDS` (those of waiters that died).
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import asyncpg

from .errors import DatabaseUnavailableError, UnknownJobError
from .jobs import Job, JobState
from .queries import Conn, Queries

RENEW_SECONDS = 300.0
WAITER_MIN_AGE_SECONDS = 3_600.0
# The least time a read of the job gets, even when the wait's time is up (`timeout=0`).
_READ_SECONDS = 1.0


class TimedOut(Exception):
    """The wait ran out of time; the message says where the job is. (Not a TimeoutError here:
    that is an OSError, which the caller's outage handling would take for a lost database.)"""


class _Wake:
    """What the connection's callbacks report: a notification naming the job, or the loss of
    the connection; `arm()` before each read, so that one arriving during the read counts."""

    def __init__(self, job_id: int) -> None:
        self.wanted = str(job_id)
        self.event = anyio.Event()
        self.lost = False

    def arm(self) -> anyio.Event:
        self.event = anyio.Event()
        return self.event

    def heard(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        if isinstance(payload, str) and self.wanted in payload.split(","):
            self.event.set()

    def closed(self, _conn: Any) -> None:
        self.lost = True
        self.event.set()


async def wait(
    conn: Conn, queries: Queries, job_id: int, seconds: float | None, *, where: str
) -> Job:
    """Wait on `conn` (a connection of the caller's, used for nothing else meanwhile) until job
    `job_id` is terminal, and return it.

    Raises:
        UnknownJobError: there is no such job (or it was removed while waited for).
        TimedOut: it was not terminal within `seconds` (None: no limit).
        DatabaseUnavailableError: the connection was lost while waiting.
    """
    wake = _Wake(job_id)
    conn.add_termination_listener(wake.closed)
    await conn.add_listener(queries.finished_channel, wake.heard)
    waiter = await queries.job_waiter_add(conn, job_id)
    try:
        return await _watch(conn, queries, job_id, waiter, seconds, wake, where)
    finally:
        # Best effort: a row left behind only costs a notification until it is pruned.
        quiet = contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError)
        if not wake.lost:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5), quiet:
                await queries.job_waiter_remove(conn, waiter)


async def _watch(
    conn: Conn,
    queries: Queries,
    job_id: int,
    waiter: int,
    seconds: float | None,
    wake: _Wake,
    where: str,
) -> Job:
    now = anyio.current_time()
    ends = float("inf") if seconds is None else now + seconds
    renew_at = now + RENEW_SECONDS
    job: Job | None = None
    while True:
        woken = wake.arm()
        # A read waits for uncommitted writers of jobs' ends (job_settled): bounded by the time
        # left, but never so tightly that `timeout=0` could not look once.
        with anyio.move_on_after(max(ends - anyio.current_time(), _READ_SECONDS)) as reading:
            found = await queries.job_get_settled(conn, job_id)
        if reading.cancelled_caught:
            raise TimedOut(_timed_out(job_id, job, seconds or 0.0))
        if found is None:
            raise UnknownJobError(job_id, queries.schema)
        job = found
        if job.state.terminal:
            return job
        now = anyio.current_time()
        if now >= ends:
            raise TimedOut(_timed_out(job_id, job, seconds or 0.0))
        with anyio.move_on_after(min(ends, renew_at) - now):
            await woken.wait()
        if wake.lost:
            raise DatabaseUnavailableError(
                where, ConnectionError(f"the connection closed while waiting for job {job_id}")
            )
        if anyio.current_time() >= renew_at:
            await queries.job_waiter_renew(conn, waiter)
            renew_at = anyio.current_time() + RENEW_SECONDS


def _timed_out(job_id: int, job: Job | None, seconds: float) -> str:
    if job is None:
        now = (
            "unreadable meanwhile: a transaction that is ending it has not committed (a wait "
            "in the transaction that cancels the job, say, waits for its own commit)"
        )
    elif job.state is JobState.RUNNING:
        now = f"running (attempt {job.attempt} of {job.max_attempts}, on {job.worker_id})"
    else:
        now = f"available (attempt {job.attempt} of {job.max_attempts} so far)"
    task = "" if job is None else f" ({job.task})"
    return (
        f"job {job_id}{task} did not finish within {seconds:g}s: it is {now}; wait again, or "
        f"read it later with get_job({job_id})"
    )
