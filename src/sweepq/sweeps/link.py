"""The link: one page of the walk per job.

A link reads its run, waits for room under the run's window, reads one page after the committed
cursor, and then, in one transaction holding the run's row lock, enqueues the page's leaves,
enqueues its successor (a full page) or marks the run draining (a short page), and records the
new cursor and counters. A crash before that commit leaves nothing behind and the link runs
again from the same cursor; a crash after it leaves a link that finds the run handed to its
successor and ends.

Only the run's current link (`sweep_runs.link_job`) acts, so at most one link of a run reads and
fans out at a time, whatever the number of workers. The last link (draining) stays on to end
the run once no leaf is outstanding.

Before it reads a page, the link runs the sweep's throttle checks (`Sweep.throttle`): one that
asks for a wait ends the execution with a `Snooze` of that long whose reason ("throttled: ...")
goes into the link job's history by the same write, which is how status tells why the run waits.

Waiting writes nothing: the link polls the run's outstanding count (the core's count of the job
group of its leaves) while holding its slot, and only after `WAIT_BOUND` seconds, or
`STALL_BOUND` seconds without any leaf finishing, or `HAND_BACK_SECONDS` during which every slot
of its worker was taken and none by a leaf of its run though some were due, does it end the
execution with a `Snooze` (one row update, no attempt charged): it never holds a slot for ever,
nor one its leaves need (links of many runs would otherwise hold every slot).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ..core.context import Context
from ..core.decision import MAX_REASON_LENGTH, Cancel, Decision, Snooze
from ..core.enqueue import JobSpec
from ..core.errors import DuplicateJobError, SweepqError, TransientError
from ..core.events import emit
from ..core.jobs import JobId
from ..core.outage import unavailable_as_error
from ..core.tasks import Task
from ..throttle import first_wait
from .control import poll_run
from .ending import end_run, fail_run, over_budget, stopped_by_failures
from .errors import SweepFault
from .events import SweepLinkCommitted, SweepThrottled
from .layer import LINK_MAX_ATTEMPTS
from .naming import (
    dedup_key,
    encode_cursor,
    leaf_group,
    leaf_task_name,
    link_priority,
    link_scope,
    link_task_name,
    own_task,
)
from .queries import RunHead
from .runs import THROTTLED

if TYPE_CHECKING:
    from .layer import SweepsLayer
    from .sweep import Sweep

logger = logging.getLogger("sweepq.sweeps")

# A throttle check's wait is taken as it is, up to an hour: the link looks again at least that
# often (a check that asks for more is waited for in hour-long steps).
MAX_THROTTLE_SECONDS = 3600.0
WAITING_FOR_LEAVES = "waiting for the run's leaves to make room"
WAIT_BOUND = 20.0
HAND_BACK_SECONDS = 0.5
MAX_HAND_BACK_SECONDS = 30.0
STALL_BOUND = 5.0
SNOOZE_SECONDS = 1.0
POLL_FIRST = 0.02
POLL_MAX = 0.25


def make_link_task(layer: SweepsLayer, cls: type[Sweep]) -> Task:
    """The internal task whose jobs are the links of `cls`'s runs."""

    async def link(ctx: Context, run: int, after: Any = None) -> None:
        # `after` is the cursor the link was enqueued at, kept for people reading job lists;
        # the link works from the cursor committed on the run row.
        try:
            # A link's database work is the queue's own: losing the database is not its failure
            # (the worker hands it back without charging an attempt).
            async with unavailable_as_error(layer.core.display_dsn):
                await _run_link(layer, cls, ctx, run)
        except TransientError:
            raise  # the same page again, after the core's backoff
        except SweepqError as exc:
            # A fault of the pass itself (the cursor, the ceiling, the sweep's own data):
            # retrying cannot fix it, so the run fails now, visibly, and the link ends.
            await fail_run(layer, run, str(exc))  # which logs it, with the run's counts
            raise Cancel(f"sweep run {run} failed: {exc}") from None

    async def ended(ctx: Context, decision: Decision) -> None:
        # A link the core failed for good (its last attempt, its deadline) fails its run.
        run = ctx.args.get("run")
        if decision.state == "failed" and isinstance(run, int):
            why = decision.error.splitlines()[-1] if decision.error else decision.failure_reason
            await end_run(layer, run, "failed", f"link {ctx.job_id} failed for good: {why}")

    return own_task(
        cls,
        link,
        link_task_name(cls.name),
        max_attempts=LINK_MAX_ATTEMPTS,
        priority=link_priority(cls),
        on_outcome=ended,
        outcome_states=("failed",),
    )


async def step(layer: SweepsLayer, run_id: int) -> bool:
    """Act once as the run's current link, in this task and without a worker (for tests): fan
    out the next page, or end a drained run. Nothing happens (False) when the run is not
    running, its window has no room for a page, or it drains with leaves still outstanding.

    The link job that was stepped is cancelled once the run has moved past it (to its successor,
    or to its end): a worker would find nothing left for it to do. A link that stays on to end
    its draining run is left to a worker (or to the next step).
    """
    head = await layer.queries.sweep_run_head(layer.core.pool, run_id)
    polled = await poll_run(layer, run_id)
    if head is None or polled is None or head.state != "running" or head.link_job is None:
        return False
    cls = layer.get(head.sweep)
    outstanding = polled[1].outstanding
    if outstanding > (0 if head.draining else cls.window - cls.page_size):
        return False
    job = await layer.core.get_job(head.link_job)
    ctx = Context(
        layer.core, job_id=JobId(head.link_job), task=link_task_name(cls.name), queue=head.queue,
        attempt=job.attempt + 1 if job else 1, max_attempts=LINK_MAX_ATTEMPTS, snoozes=0,
        worker_id="sweepq.testing", args={"run": run_id},
    )  # fmt: skip
    # A short page leaves the run draining: the next step ends it once its leaves are done.
    try:
        await _run_link(layer, cls, ctx, run_id, stay=False)
    except Snooze:
        return False  # a throttle check asked the walk to wait
    after = await layer.queries.sweep_run_head(layer.core.pool, run_id)
    if after is None or after.state != "running" or after.link_job != head.link_job:
        await layer.core.cancel(head.link_job, reason="stepped: the run moved past this link")
    return True


async def _run_link(
    layer: SweepsLayer, cls: type[Sweep], ctx: Context, run_id: int, *, stay: bool = True
) -> None:
    head = await layer.queries.sweep_run_head(layer.core.pool, run_id)
    if head is None:
        raise Cancel(f"sweep run {run_id} no longer exists")
    if head.state != "running" or head.link_job != ctx.job_id:
        return  # paused, ended, or handed on: this link has nothing left to do
    sweep = layer.for_head(cls, head)
    if head.draining:
        await _finish(layer, sweep, ctx, head)
        return
    # The ceiling the run started with, or the sweep's own if it was raised since.
    ceiling = max(head.max_links, cls.max_links or 0)
    if head.links >= ceiling:
        raise SweepFault(
            f"sweep {cls.name!r} reached max_links={ceiling} links in run {run_id} "
            f"(cursor {head.cursor!r}) without reaching the end; if the population really is "
            f"that large raise the sweep's max_links, deploy, and `sweepq sweep resume {run_id}`; "
            "else the walk is looping (does the handler write the key?)"
        )
    # Room for a full page: the window bounds the outstanding leaves at every moment.
    room = cls.window - cls.page_size
    if not await _wait(layer, sweep, ctx, head, lambda outstanding: outstanding <= room):
        return
    after = None if head.cursor is None else tuple(head.cursor)
    async with layer.core.pool.acquire() as conn:
        await _throttle(layer, sweep, conn, run_id)
        await sweep.prepare(conn)
        items = list(await sweep.page(conn, after, cls.page_size))
    if len(items) > cls.page_size:
        raise SweepFault(
            f"sweep {cls.name!r}: page() returned {len(items)} items for limit {cls.page_size}"
        )
    cursor = _advance(sweep, after, items)
    full = len(items) == cls.page_size
    if await _commit(layer, sweep, ctx, head, items, cursor, full=full) and not full and stay:
        await _finish(layer, sweep, ctx, head)


async def _throttle(layer: SweepsLayer, sweep: Sweep, conn: Any, run_id: int) -> None:
    """Run the sweep's throttle checks (`sweepq.throttle.first_wait`); the first that asks for
    a wait ends this execution with a `Snooze` of that long, its reason in the link job's
    history (the same write as the snooze; the run and its leaves are not written), and the
    link looks again then."""
    checks = type(sweep).throttle
    if not checks:
        return
    wait = await first_wait(conn, checks)
    if wait is None:
        return
    seconds = min(wait.total_seconds(), MAX_THROTTLE_SECONDS)
    logger.info(
        "sweep %r run %s: throttled for %.1fs: %s", sweep.name, run_id, seconds, wait.reason,
        extra={"sweep": sweep.name, "run_id": run_id, "throttled": wait.reason, "seconds": seconds},
    )  # fmt: skip
    if layer.core.observers:
        emit(layer.core.observers, SweepThrottled(
            run_id=run_id, sweep=sweep.name, reason=wait.reason, seconds=seconds,
        ))  # fmt: skip
    raise Snooze(seconds, reason=f"{THROTTLED}{wait.reason}"[:MAX_REASON_LENGTH])


def _advance(
    sweep: Sweep, after: tuple[Any, ...] | None, items: Sequence[Any]
) -> tuple[Any, ...] | None:
    """The new cursor; refuse a page whose last key is not past the previous cursor."""
    if not items:
        return None
    cursor = sweep.cursor_of(items[-1])
    if after is not None and not sweep.advances(after, cursor):
        raise SweepFault(
            f"sweep {sweep.name!r}: the cursor did not advance: the page after {list(after)!r} "
            f"ended at key {list(cursor)!r}. page() must return items whose key is greater than "
            "`after`, in key order; a key that the handler writes (e.g. updated_at) does this "
            "too: key on columns the walk does not write"
        )
    return cursor


async def _commit(
    layer: SweepsLayer,
    sweep: Sweep,
    ctx: Context,
    head: RunHead,
    items: Sequence[Any],
    cursor: tuple[Any, ...] | None,
    *,
    full: bool,
) -> bool:
    """Fan out the page, enqueue the successor or drain, and move the cursor, atomically."""
    queries = layer.queries
    run_id = head.id
    leaf_task = leaf_task_name(sweep.name)
    identities = [sweep.identity(item) for item in items]
    specs = [
        JobSpec(
            leaf_task,
            {"run": run_id, "item": item},
            group=leaf_group(run_id),
            idempotency_scope=leaf_group(run_id),
            idempotency_key=dedup_key(identity),
        )
        for item, identity in zip(items, identities, strict=True)
    ]
    async with layer.core.pool.acquire() as conn, conn.transaction():
        locked = await queries.sweep_run_lock(conn, run_id)
        if locked is None or locked.state != "running" or locked.link_job != ctx.job_id:
            return False  # paused or cancelled while we read the page: nothing is written
        try:
            # Leaves are new by construction (the cursor only moves forward): sent by COPY, and
            # a duplicate is the walk serving an item again.
            await layer.core.enqueue_many(
                specs, conn=conn, on_duplicate="raise", on_behalf_of=layer
            )
        except DuplicateJobError as exc:
            repeated = _repeated(identities, exc.key)
            raise SweepFault(_served_twice(sweep, run_id, repeated)) from None
        next_link = ctx.job_id
        if full:
            assert cursor is not None
            # The successor's key is run + cursor, so a link re-run after this commit can never
            # enqueue a second successor. It carries no identity_key/unique_for: those would
            # match this very link, still running, and end the chain here.
            successor = await layer.core.enqueue(
                link_task_name(sweep.name), {"run": run_id, "after": list(cursor)},
                idempotency_scope=link_scope(run_id), idempotency_key=dedup_key(cursor),
                conn=conn, on_behalf_of=layer,
            )  # fmt: skip
            next_link = successor.job_id
        # Counted last, so that no reader can have been shown more done than this.
        group = leaf_group(run_id)
        live = (await layer.core.group_progress([group], conn=conn))[group]
        done = locked.enqueued + len(items) - live.outstanding
        await queries.sweep_run_advance(
            conn, run_id, encode_cursor(cursor), len(items), draining=not full,
            link_job=next_link, done=done, failed=live.failed, sample=sweep.failure_sample,
            completed=done - live.failed - live.cancelled,
        )  # fmt: skip
    if layer.core.observers:
        emit(layer.core.observers, SweepLinkCommitted(
            run_id=run_id, sweep=sweep.name, items=len(items),
            enqueued=locked.enqueued + len(items), draining=not full,
        ))  # fmt: skip
    return True


def _repeated(identities: Sequence[tuple[Any, ...]], reported: str) -> tuple[Any, ...] | None:
    """The identity whose dedup key the duplicate's report names (PostgreSQL's detail)."""
    for identity in identities:
        if f", {dedup_key(identity)})" in reported:
            return identity
    return None


def _served_twice(sweep: Sweep, run_id: int, identity: tuple[Any, ...] | None) -> str:
    key = getattr(type(sweep), "key", None)
    named = f" {key!r}" if isinstance(key, tuple) else ""
    item = "an item" if identity is None else f"item {list(identity)!r}"
    return (
        f"sweep {sweep.name!r} met {item} a second time in run {run_id}: the "
        f"walk is re-serving its own work. Its key{named} changed while the walk ran: a key "
        "the handler writes (e.g. updated_at) moves each handled row past the cursor, to be "
        "served again forever. Key on columns the walk does not write, e.g. ('created_at', "
        "'id') or ('id',)"
    )


async def _finish(layer: SweepsLayer, sweep: Sweep, ctx: Context, head: RunHead) -> None:
    """As the draining link: wait until no leaf is outstanding, then end the run."""
    while await _wait(layer, sweep, ctx, head, lambda outstanding: outstanding == 0):
        result = await end_run(layer, head.id, "completed", link_job=ctx.job_id)
        if result != "busy":
            return


async def _wait(
    layer: SweepsLayer, sweep: Sweep, ctx: Context, head: RunHead, ready: Callable[[int], bool]
) -> bool:
    """Poll until `ready(outstanding)`; False if this link should stop (paused, ended, handed on).

    Raises `SweepFault` once the failures are over the sweep's budget (`ending.over_budget`),
    and `Snooze` after waiting long (or without progress) so that the slot is given back.
    """
    started = anyio.current_time()
    best: int | None = None
    progressed = started
    starved: float | None = None  # since when the run's leaves are due, none runs, no slot free
    interval = POLL_FIRST
    while True:
        polled = await poll_run(layer, head.id)
        if polled is None:
            return False
        poll, live = polled
        if poll.state != "running" or poll.link_job != ctx.job_id:
            return False
        why = over_budget(type(sweep), poll, live)
        if why is not None:
            raise SweepFault(stopped_by_failures(why, head))
        outstanding = live.outstanding
        if ready(outstanding):
            return True
        now = anyio.current_time()
        if best is None or outstanding < best:
            best, progressed = outstanding, now
        starving = live.due > 0 and not live.running and ctx.worker_busy
        starved = (starved or now) if starving else None
        if starved is not None and now - starved >= HAND_BACK_SECONDS:
            # Every slot of this worker is taken, and none by a leaf of this run, though some
            # are due: links are claimed before leaves, so links of many runs waiting in every
            # slot would starve every leaf. This slot goes to them, for longer each time.
            raise Snooze(
                min(SNOOZE_SECONDS * 2 ** min(ctx.snoozes, 8), MAX_HAND_BACK_SECONDS),
                reason=WAITING_FOR_LEAVES,
            )
        if now - started >= WAIT_BOUND or now - progressed >= STALL_BOUND:
            # With its reason, which also replaces a throttle's as the newest in its history.
            raise Snooze(SNOOZE_SECONDS, reason=WAITING_FOR_LEAVES)
        await anyio.sleep(interval)
        interval = min(interval * 1.5, POLL_MAX)
