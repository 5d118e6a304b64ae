"""The life of a run: start (single flight), pause, resume, retry its failures, list them; its
ending (a cancel among them) is in `ending.py`.

Every change of a run's state happens in a transaction holding its row lock, the same lock a
link holds when it commits a page, so a link never fans out into a run that has just ended.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import asyncpg
import msgspec

from ..core.jobs import GroupProgress, Job
from ..core.queries import Conn
from .done import has_on_complete
from .errors import SweepError
from .naming import (
    encode_params,
    leaf_group,
    link_priority,
    link_scope,
    link_task_name,
    run_of_group,
)
from .queries import Poll, RunHead, RunStart
from .runs import SweepFailure, SweepStarted

if TYPE_CHECKING:
    from .layer import SweepsLayer
    from .sweep import Sweep

_INT32_MAX = 2**31 - 1
_START_ROUNDS = 5
UNBOUNDED_MAX_LINKS = 1_000_000

logger = logging.getLogger("sweepq.sweeps")


def derive_max_links(estimate: int | None, page_size: int) -> int:
    """A generous link ceiling: ten times the pages of the estimate, at least 1,000."""
    if estimate is None:
        return UNBOUNDED_MAX_LINKS
    return min(max(1_000, 10 * (estimate // page_size + 1)), _INT32_MAX)


async def start_run(
    layer: SweepsLayer, cls: type[Sweep], params: Mapping[str, Any] | None, conn: Conn | None
) -> SweepStarted:
    """Insert the run and enqueue its root link in one transaction, unless a run is active."""
    queries = layer.queries
    params_text, params_hash = encode_params(cls.name, params)
    async with layer.core.connection(conn) as c:
        sweep = layer.instance(cls, msgspec.json.decode(params_text))
        await sweep.prepare(c)
        total = await sweep.count(c)
        counted = total is not None
        if total is None:
            total = await sweep.estimate(c)
        start = RunStart(
            sweep=cls.name,
            params=params_text,
            params_hash=params_hash,
            max_links=cls.max_links or derive_max_links(total, cls.page_size),
            total=total,
            counted=counted,
            queue=cls.queue,
            link_priority=link_priority(cls),
            on_complete=has_on_complete(cls),
        )
        for _ in range(_START_ROUNDS):
            async with c.transaction():
                run_id = await queries.sweep_run_insert(c, start)
                if run_id is not None:
                    root = await layer.core.enqueue(
                        link_task_name(cls.name), {"run": run_id},
                        idempotency_scope=link_scope(run_id), idempotency_key="root", conn=c,
                        on_behalf_of=layer,
                    )  # fmt: skip
                    await queries.sweep_run_set_link(c, run_id, root.job_id)
                    logger.info(
                        "sweep %r run %s started (%s items%s)", cls.name, run_id,
                        "?" if total is None else f"{total:,}", "" if counted else ", estimated",
                        extra={"sweep": cls.name, "run_id": run_id, "total": total},
                    )  # fmt: skip
                    return SweepStarted(run_id, "started")
            # A new statement sees the active run we collided with (unless it just ended).
            active = await queries.sweep_run_find_active(c, cls.name, params_hash)
            if active is not None:
                return SweepStarted(active, "already_running")
    raise SweepError(
        f"sweep {cls.name!r}: could not settle the start after {_START_ROUNDS} rounds of "
        "runs starting and ending concurrently; start it again"
    )


async def pause_run(layer: SweepsLayer, run_id: int, conn: Conn | None) -> None:
    await layer.queries.sweep_run_pause(conn or layer.core.pool, run_id)


async def resume_run(layer: SweepsLayer, run_id: int, conn: Conn | None) -> None:
    """Continue a run from its committed cursor: a paused one, or one that failed or was
    cancelled (its failed and cancelled items run again, with a fresh failure budget)."""
    queries = layer.queries
    async with layer.core.connection(conn) as c, c.transaction():
        head = await queries.sweep_run_lock(c, run_id)
        if head is None:
            return
        if head.state == "paused":
            link = await _enqueue_link(layer, head, c)
            await queries.sweep_run_resume(c, run_id, link)
        elif head.state in ("failed", "cancelled"):
            await layer.core.retry_group_failures(
                leaf_group(run_id), include_cancelled=True, conn=c
            )
            await _reopen(layer, c, head, resume=True)


async def retry_failures(layer: SweepsLayer, run_id: int, conn: Conn | None) -> int:
    """Run a run's failed and cancelled items again; an ended run runs again (draining) until
    they are done, without walking on (`resume_run` does that).

    Returns how many items were retried (0: none failed or was cancelled, or no such run).
    """
    queries = layer.queries
    async with layer.core.connection(conn) as c, c.transaction():
        head = await queries.sweep_run_lock(c, run_id)
        if head is None:
            return 0
        retried = await layer.core.retry_group_failures(
            leaf_group(run_id), include_cancelled=True, conn=c
        )
        if retried and head.state not in ("running", "paused"):
            await _reopen(layer, c, head, resume=False)
        return retried


async def retry_item(
    layer: SweepsLayer,
    job_id: int,
    conn: Conn | None,
    retry: Callable[[int, Conn], Awaitable[Job | None]],
) -> Job | None:
    """`App.retry` of a job that may be one of a run's items: `retry(job_id, conn)` does the
    core's retry; an item of a run that has ended also makes the run run again (draining),
    so that its counters are recounted when the item is done."""
    async with layer.core.connection(conn) as c, c.transaction():
        job = await layer.core.get_job(job_id, conn=c)
        run_id = run_of_group(job.group) if job is not None else None
        head = None if run_id is None else await layer.queries.sweep_run_lock(c, run_id)
        retried = await retry(job_id, c)
        if (
            head is not None
            and head.state not in ("running", "paused")
            and retried is not None
            and not retried.state.terminal
        ):
            await _reopen(layer, c, head, resume=False)
        return retried


async def _reopen(layer: SweepsLayer, conn: Conn, head: RunHead, *, resume: bool) -> None:
    """Make an ended run run again with a new link and a fresh failure budget (see the
    `sweep_run_reopen` statement), its job group open again for its next end; the items to run
    again have been retried already."""
    group = leaf_group(head.id)
    await layer.core.reopen_group(group, conn=conn, on_behalf_of=layer)
    live = (await layer.core.group_progress([group], conn=conn))[group]
    link = await _enqueue_link(layer, head, conn)
    try:
        async with conn.transaction():
            await layer.queries.sweep_run_reopen(
                conn, head.id, link, resume=resume, failed=live.failed,
                done=head.enqueued - live.outstanding,
            )  # fmt: skip
    except asyncpg.UniqueViolationError:
        raise SweepError(
            f"sweep run {head.id} cannot run again while another run of sweep {head.sweep!r} "
            "with the same params is active; let that one end first"
        ) from None


async def _enqueue_link(layer: SweepsLayer, head: RunHead, conn: Conn) -> int:
    """A new link of the run, on the queue its sweep runs on (known here or not)."""
    link = await layer.core.enqueue(
        layer.link_task(head), {"run": head.id, "after": head.cursor}, conn=conn
    )
    return link.job_id


async def poll_run(layer: SweepsLayer, run_id: int) -> tuple[Poll, GroupProgress] | None:
    """The run as a waiting link sees it, and its leaves' counts; None if it is gone."""
    poll = await layer.queries.sweep_run_poll(layer.core.pool, run_id)
    if poll is None:
        return None
    group = leaf_group(run_id)
    return poll, (await layer.core.group_progress([group]))[group]


async def failures(layer: SweepsLayer, run_id: int, limit: int) -> list[SweepFailure]:
    """The run's items that failed for good, newest first, then those that were cancelled (a
    run that stopped cancels its outstanding items: the failures say why it stopped)."""
    group = leaf_group(run_id)
    failed = await layer.core.group_jobs(group, "failed", limit=limit)
    cancelled = await layer.core.group_jobs(group, "cancelled", limit=max(limit - len(failed), 1))
    return [_failure(job) for job in [*failed, *cancelled][:limit]]


def _failure(job: Job) -> SweepFailure:
    text = job.idempotency_key or ""
    key: list[Any] | str = text  # a digest, when the key was too long to be the key itself
    with contextlib.suppress(msgspec.DecodeError):
        decoded = msgspec.json.decode(text)
        key = decoded if isinstance(decoded, list) else text
    last = job.errors[-1] if job.errors else None
    return SweepFailure(
        key=key,
        item=job.args.get("item"),
        job_id=job.id,
        state=str(job.state),
        attempts=job.attempt,
        failure_reason=job.failure_reason,
        error=None if last is None else last.error,
        failed_at=job.finished_at,
    )
