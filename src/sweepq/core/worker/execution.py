"""The runners: one long-lived task per slot, each running claimed jobs one after another
through the shared `execute()` (core/execution.py), then deciding endings no handler reached (no
handler, args that do not fit, the worker's stop), telling the task's outcome hook, and queueing
the outcome for the recorder.

What the handler raises never ends the worker; only the worker's own cancellation of a slot
(stop, a lost lease) goes on up.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import msgspec

from ..app import App
from ..checks import MAX_JSON_DEPTH
from ..context import Context
from ..decision import (
    Decision,
    Interrupted,
    NotRunnable,
    UnknownTask,
    decide,
    error_line,
    outcome_of,
)
from ..events import JobFinished, JobStarted, emit
from ..execution import execute, own_cancellation, policy_of
from ..logs import log_execution
from ..tasks import Task
from .state import Shared, Slot

logger = logging.getLogger("sweepq.worker")

HOOK_SECONDS = 5.0  # the most an outcome hook may take


class Runners:
    """Runs the claimed jobs of `Shared.ready` in the worker's slots."""

    def __init__(self, app: App, threads: int, shared: Shared) -> None:
        self.app = app
        self.shared = shared
        self.threads = anyio.CapacityLimiter(threads)

    async def runner(self) -> None:
        """Run claimed jobs one after another, for as long as the worker runs."""
        shared = self.shared
        ready = shared.ready
        while True:
            if ready:
                await self._run(ready.popleft())
            else:
                await shared.ready_event.wait()

    async def _run(self, slot: Slot) -> None:
        shared = self.shared
        try:
            with slot.scope:
                await self._call(slot)
            if slot.scope.cancelled_caught and not slot.lost and not slot.ended:
                self.end(slot, Interrupted("the worker stopped while the job ran"))
        except anyio.get_cancelled_exc_class():
            if not slot.lost and not slot.ended:
                self.end(slot, Interrupted("the worker stopped while the job ran"))
            raise
        except Exception as exc:
            # A fault around the handler (what the handler raises is decided in `_call`): the
            # execution ends as if the handler had raised it, and this slot goes on.
            logger.exception(
                "job %s (%s): the worker failed around its handler",
                slot.job.id,
                slot.job.task,
                extra={"job_id": slot.job.id, "task": slot.job.task},
            )
            if not slot.lost and not slot.ended:
                self.end(slot, exc)
        finally:
            del shared.slots[slot.token]
            shared.suspects -= slot.job.crashes > 0
            shared.processed += 1
            shared.signal()

    def end(self, slot: Slot, raised: BaseException) -> None:
        """Decide an ending no handler reached and queue the outcome."""
        self._queue(slot, self._decide(slot, raised), raised)

    def _decide(self, slot: Slot, raised: BaseException, task: Task | None = None) -> Decision:
        job = slot.job
        deadline_in = None
        if job.deadline_in is not None:
            deadline_in = job.deadline_in - (anyio.current_time() - slot.claimed_at)
        return decide(
            raised, attempt=job.attempt, max_attempts=job.max_attempts, deadline_in=deadline_in,
            policy=policy_of(task, self.app.retry_policy),
        )  # fmt: skip

    def _queue(self, slot: Slot, decision: Decision, raised: BaseException | None) -> None:
        """Queue an outcome to record; the job's lease is renewed until it is recorded."""
        shared = self.shared
        # Into `shared.pending` as it is now: the flusher swaps the batch while handlers run.
        shared.pending.add(slot.token, decision)
        shared.unrecorded.add(slot.token)
        slot.ended = True
        outcome = outcome_of(decision)
        shared.outcomes[outcome] += 1
        job = slot.job
        duration = anyio.current_time() - slot.claimed_at
        log_execution(
            job_id=job.id, task=job.task, queue=job.queue, attempt=job.attempt,
            max_attempts=job.max_attempts, decision=decision, outcome=outcome, duration=duration,
            raised=raised,
        )  # fmt: skip
        if self.app.observers:
            emit(self.app.observers, JobFinished(
                job_id=job.id, task=job.task, queue=job.queue, attempt=job.attempt,
                worker_id=shared.worker_id, outcome=outcome, duration=duration,
                failure_reason=decision.failure_reason,
                error=error_line(decision.error) or None,
            ))  # fmt: skip

    async def _call(self, slot: Slot) -> None:
        job = slot.job
        app = self.app
        task = app.tasks.get(job.task)
        if task is None:
            self.end(slot, UnknownTask(job.task, job.handbacks))
            return
        kwargs: dict[str, Any] = {}
        unfit: NotRunnable | None = None
        try:
            kwargs = task.decode_args(job.args)
        except Exception as exc:  # not fitting the handler, not JSON, nested too deep to decode
            unfit = NotRunnable(_unfit_args(task, exc), reason="invalid_args")
        ctx = Context(
            app,
            job_id=job.id,
            task=job.task,
            queue=job.queue,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            snoozes=job.snoozes,
            worker_id=self.shared.worker_id,
            group=job.group,
            args=kwargs,
            busy=self.shared.busy,
        )
        slot.ctx = ctx
        if app.observers:
            emit(app.observers, JobStarted(
                job_id=job.id, task=job.task, queue=job.queue, attempt=job.attempt,
                worker_id=self.shared.worker_id, trace_context=job.trace_context,
            ))  # fmt: skip
        raised: BaseException | None = unfit
        if unfit is not None:
            decision = self._decide(slot, unfit, task)
        else:
            deadline = None if job.deadline_in is None else slot.claimed_at + job.deadline_in
            execution = await execute(
                task, ctx, kwargs, time_limit=job.timeout, deadline=deadline,
                policy=policy_of(task, app.retry_policy), result_max_bytes=app.result_max_bytes,
                threads=self.threads, stopped=lambda: slot.scope.cancel_called,
            )  # fmt: skip
            if slot.lost:
                return  # its lease was lost meanwhile: the job is not ours now
            decision, raised = execution.decision, execution.raised
        if task.on_outcome is not None and (
            task.outcome_states is None or decision.state in task.outcome_states
        ):
            # Before the outcome is recorded: whoever reads the hook's effects (a sweep's live
            # counts) once the job is terminal finds them there.
            await _tell(task, ctx, decision)
        self._queue(slot, decision, raised)


async def _tell(task: Task, ctx: Context, decision: Decision) -> None:
    """Tell a task's outcome hook; its failure is logged, never the execution's. The handler
    has ended: stopping the worker does not cut the hook short (it gets a few seconds)."""
    assert task.on_outcome is not None
    try:
        with anyio.CancelScope(shield=True), anyio.fail_after(HOOK_SECONDS):
            await task.on_outcome(ctx, decision)
    except BaseException as exc:
        if own_cancellation(exc):
            raise
        logger.exception("the outcome hook of task %r failed for job %s", task.name, ctx.job_id)


def _unfit_args(task: Task, exc: Exception) -> str:
    """Why stored args cannot be handed to the handler, and what to do."""
    if isinstance(exc, msgspec.ValidationError):
        accepted = ", ".join(task.args_type.__struct_fields__) or "none"
        why = f"do not fit the handler of task {task.name!r}: {exc} (it accepts: {accepted})"
    elif isinstance(exc, RecursionError):
        why = (
            f"of task {task.name!r} are JSON nested too deep to decode (sweepq refuses more "
            f"than {MAX_JSON_DEPTH} levels at enqueue)"
        )
    else:
        why = f"of task {task.name!r} cannot be decoded ({type(exc).__name__}: {exc})"
    return f"the stored args {why}; the enqueuer must pass args the handler accepts"
