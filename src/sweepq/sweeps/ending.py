"""A run's ending: ended with exact counts (by its draining link, a cancel, its failures over
budget, or a fault of its walk), and failed when its link ended unseen.

A run ends in one transaction holding its row lock, the same lock a link holds when it commits a
page, so a link never fans out into a run that has just ended; that transaction also closes the
run's job group (see `done.py`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Literal

import anyio
import msgspec

from ..core.decision import error_line
from ..core.events import emit
from ..core.jobs import GroupProgress, Job
from ..core.queries import Conn
from .done import done_spec
from .events import SweepRunEnded
from .naming import leaf_group
from .queries import Counts, Poll, RunHead
from .runs import run_from_row

if TYPE_CHECKING:
    from .layer import SweepsLayer
    from .sweep import Sweep

FAIL_SETTLE_SECONDS = 30.0

EndResult = Literal["ended", "not_active", "busy"]

logger = logging.getLogger("sweepq.sweeps")


def over_budget(cls: type[Sweep], poll: Poll, live: GroupProgress) -> str | None:
    """Why the run's failures stop its walk, or None: more than `max_failures` items failed
    since it started or resumed, or more than `max_failure_rate` of its recent items (at
    least `failure_sample` of them: those done since the older sample its links took)."""
    failed = live.failed - poll.failed_base
    if cls.max_failures is not None and failed > cls.max_failures:
        return f"{failed:,} items failed, over max_failures={cls.max_failures:,}"
    rate = cls.max_failure_rate
    if rate is None or poll.fail_from_done is None or poll.fail_from_failed is None:
        return None
    items = poll.enqueued - live.outstanding - poll.fail_from_done
    failures = live.failed - poll.fail_from_failed
    if items >= cls.failure_sample and failures > rate * items:
        return (
            f"{failures:,} of the last {items:,} finished items failed "
            f"({failures / items:.0%}, over max_failure_rate={rate:g})"
        )
    return None


def stopped_by_failures(why: str, head: RunHead) -> str:
    """The failure of a run whose failures stopped it, and the one command that goes on."""
    run_id = head.id
    where = (
        "the walk had reached the end"
        if head.walked
        else f"the walk stopped at cursor {msgspec.json.encode(head.cursor).decode()} after "
        f"{head.enqueued:,} items"
    )
    return (
        f"{why}; {where}, and the items outstanding were cancelled. Fix the cause (see "
        f"`sweepq sweep failures {run_id}`), then `sweepq sweep resume {run_id}` runs the "
        "failed and cancelled items again" + ("" if head.walked else " and walks on from there")
    )


def undone_at_the_end(run_id: int, counts: Counts, enqueued: int) -> str:
    """The failure of a run that walked to the end with items failed or cancelled."""
    undone = " and ".join(
        part
        for part in (
            f"{counts.failed:,} failed" if counts.failed else "",
            f"{counts.cancelled:,} were cancelled" if counts.cancelled else "",
        )
        if part
    )
    return (
        f"the walk reached the end, but of its {enqueued:,} items {undone}. Fix the cause (see "
        f"`sweepq sweep failures {run_id}`), then `sweepq sweep retry-failed {run_id}` runs "
        "them again"
    )


async def end_run(
    layer: SweepsLayer,
    run_id: int,
    state: Literal["completed", "failed", "cancelled"],
    failure: str | None = None,
    *,
    link_job: int | None = None,
    conn: Conn | None = None,
) -> EndResult:
    """End an active run and store its exact counters, counted from its leaf jobs.

    Ending as `failed` or `cancelled` first cancels the run's outstanding leaves. Ending as
    `completed` (by its draining link, `link_job`) needs no leaf outstanding, else it returns
    "busy"; the run then ends `completed` only if its walk reached the end and every item
    completed: else `failed`, or as its walk stopped before (see `_verdict`). With `link_job`,
    the run ends only if it is still running with that link (checked under the run's lock).
    """
    queries = layer.queries
    group = leaf_group(run_id)
    async with layer.core.connection(conn) as c, c.transaction():
        head = await queries.sweep_run_lock(c, run_id)
        if head is None or head.state not in ("running", "paused"):
            return "not_active"
        if (link_job is not None or state == "completed") and (
            head.state != "running" or head.link_job != link_job
        ):
            return "not_active"
        if state == "completed":
            if (await layer.core.group_outstanding([group], conn=c))[group] > 0:
                return "busy"
        else:
            reason = f"sweep run {run_id} {state}" + (f": {failure}" if failure else "")
            await layer.core.cancel_group(group, include_running=True, reason=reason, conn=c)
            if link_job is None and head.link_job is not None:
                # The run's link has nothing left to do; on a queue no worker serves, it would
                # wait there for ever.
                await layer.core.cancel(head.link_job, reason=reason, conn=c)
        counts = await _exact_counts(layer, c, head)
        stopped: tuple[str, str | None] | None = None
        if state == "completed":
            state, failure, stopped = _verdict(head, counts)
        elif not head.walked:
            stopped = (state, failure)
        await queries.sweep_run_end(c, run_id, state, failure, counts, stopped)
        await _close(layer, c, head)
    logger.log(
        logging.ERROR if state == "failed" else logging.INFO,
        "sweep %r run %s %s: %s completed, %s failed, %s cancelled%s", head.sweep, run_id, state,
        f"{counts.completed:,}", f"{counts.failed:,}", f"{counts.cancelled:,}",
        f" ({failure})" if failure else "",
        extra={
            "sweep": head.sweep, "run_id": run_id, "state": state, "completed": counts.completed,
            "failed": counts.failed, "cancelled": counts.cancelled, "failure": failure,
        },
    )  # fmt: skip
    if layer.core.observers:
        emit(layer.core.observers, SweepRunEnded(
            run_id=run_id, sweep=head.sweep, state=state, completed=counts.completed,
            failed=counts.failed, cancelled=counts.cancelled, failure=failure,
        ))  # fmt: skip
    return "ended"


async def fail_run(layer: SweepsLayer, run_id: int, failure: str) -> EndResult:
    """End a run as `failed` because of a fault of the walk, keeping its counters exact.

    Leaves that wait are cancelled at once, so nothing new starts; running leaves get up to
    `FAIL_SETTLE_SECONDS` to finish, so that one whose handler has returned but whose outcome
    its worker has not recorded yet is counted as what it did, not as cancelled. The wait reads
    one count per poll and writes nothing.
    """
    group = leaf_group(run_id)
    await layer.core.cancel_group(group, reason=f"sweep run {run_id} failed: {failure}")
    with anyio.move_on_after(FAIL_SETTLE_SECONDS):
        while (await layer.core.group_outstanding([group]))[group]:  # noqa: ASYNC110  # a count to poll
            await anyio.sleep(0.05)
    return await end_run(layer, run_id, "failed", failure)


def _verdict(
    head: RunHead, counts: Counts
) -> tuple[Literal["completed", "failed", "cancelled"], str | None, tuple[str, str | None] | None]:
    """How a run whose leaves are all done ends: `completed` only if its walk reached the end
    and every item completed; else `failed`, saying what is undone; a run whose walk had
    stopped before (and that ran again for its failed items only) ends as it stopped."""
    if head.walked:
        if counts.failed or counts.cancelled:
            return "failed", undone_at_the_end(head.id, counts, head.enqueued), None
        return "completed", None, None
    state: Literal["failed", "cancelled"] = (
        "cancelled" if head.stopped_as == "cancelled" else "failed"
    )
    return state, head.stop_reason, (state, head.stop_reason)


async def _exact_counts(layer: SweepsLayer, conn: Conn, head: RunHead) -> Counts:
    """Leaves per terminal state; leaves that retention removed already count as completed."""
    leaves = await layer.core.group_counts(leaf_group(head.id), conn=conn)
    pruned = max(head.enqueued - leaves.total, 0)
    return Counts(
        completed=leaves.completed + pruned, failed=leaves.failed, cancelled=leaves.cancelled
    )


async def _close(layer: SweepsLayer, conn: Conn, head: RunHead) -> None:
    """Close the run's job group as the run ends (in its transaction): no leaf gets in after
    the end, and, if the sweep has an on_complete, the group's `then` is the job that calls it
    for this end, enqueued right here since every leaf is terminal (see `done.py`)."""
    then = None
    if head.on_complete:
        (row,) = await layer.queries.sweep_run_list(conn, 1, False, None, head.id)
        then = done_spec(layer.done_task(head), run_from_row(row))
    await layer.core.close_group(leaf_group(head.id), then=then, conn=conn, on_behalf_of=layer)


async def fail_orphaned_runs(layer: SweepsLayer) -> int:
    """Fail the running runs whose link job ended without handing the run on: a link that the
    queue ended by itself (rescued past its last attempt, cancelled by hand) tells no one, and
    its run would wait for it for ever. Returns how many runs it failed.

    The list of runs is read before each link job: a run handed on meanwhile, its old link then
    completed, is left alone, because it is ended only if it still names that link under its
    lock."""
    failed = 0
    for run_id, sweep, link_job in await layer.queries.sweep_run_links_running(
        layer.core.pool, 1_000
    ):
        job = await layer.core.get_job(link_job)
        if job is not None and not job.state.terminal:
            continue
        if job is not None and _relink(job):
            # Two workers died running the link: the core blames it, as it would a leaf that
            # crashes its worker. A link is sweepq's own walk, more likely beside the culprit
            # than the culprit: it runs again, but not for ever.
            await layer.core.retry(link_job)
            logger.warning(
                "sweep %r run %s: its link job %s failed worker_died (its workers died while "
                "running it); running it again", sweep, run_id, link_job,
                extra={"sweep": sweep, "run_id": run_id, "job_id": link_job},
            )  # fmt: skip
            continue
        orphaned = _orphaned(run_id, link_job, job)
        if await end_run(layer, run_id, "failed", orphaned, link_job=link_job) == "ended":
            failed += 1
    return failed


# A link that failed `worker_died` runs again until this many of its workers died (its last ten
# errors hold them): three times two, so that a page query that kills every worker that reads it
# fails the run after the third round instead of taking down workers for ever.
LINK_DEATHS = 6


def _relink(job: Job) -> bool:
    """Whether a link job the queue failed `worker_died` should run again."""
    deaths = sum(1 for e in job.errors if e.kind == "worker_died")
    return job.failure_reason == "worker_died" and deaths < LINK_DEATHS


def _orphaned(run_id: int, link_job: int, job: Job | None) -> str:
    """Why a run whose link ended unseen failed."""
    if job is None:
        ended = "was pruned"
    else:
        last = error_line(job.errors[-1].error) if job.errors else ""
        ended = f"ended {job.state} ({job.failure_reason or last or 'no error recorded'})"
    return (
        f"its link job {link_job} {ended} without handing the run on; the queue ended it (a "
        f"rescue past its last attempt, or a cancel): `sweepq sweep resume {run_id}` goes on "
        "from its cursor"
    )
