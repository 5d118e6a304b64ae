"""One execution of a handler: the call, its timeout, the check of its result, the decision.

`execute` is the one place an execution runs, for the worker (`core/worker/execution.py`) and
for the testing kit's `perform` alike, so that what a test sees is what production does: the
same timeout, the same result checks, the same retry policy (the task's, else the App's) and the
same `decide()`.

An `async def` handler runs in the calling task, cut off at its timeout. A `def` handler runs in
a thread; a thread cannot be interrupted, so cancelling the caller tells it to stop
(`ctx.stopping`) and waits for it, and past its timeout the execution ends `timeout` at once
while the thread is told to stop and left to finish alone (what it ends with is not recorded).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from .context import Context
from .decision import Decision, ExecutionTimeout, Interrupted, decide
from .errors import InvalidResultError
from .results import encode_result
from .retry import RetryPolicy
from .tasks import Task

logger = logging.getLogger("sweepq.worker")


@dataclass(frozen=True, slots=True)
class Execution:
    """How one execution ended: what the handler returned or raised, and the decision."""

    decision: Decision
    returned: Any = None
    # What the handler raised, or what its execution failed with: its timeout, a result that
    # cannot be stored, the worker's stop.
    raised: BaseException | None = None


def policy_of(task: Task | None, default: RetryPolicy | None) -> RetryPolicy | None:
    """The retry policy an execution of `task` is decided with: its own, else the App's."""
    return (task.retry if task is not None else None) or default


async def execute(
    task: Task,
    ctx: Context,
    kwargs: dict[str, Any],
    *,
    time_limit: float | None,
    deadline: float | None,
    policy: RetryPolicy | None,
    result_max_bytes: int,
    threads: anyio.CapacityLimiter | None = None,
    stopped: Callable[[], bool] = lambda: False,
) -> Execution:
    """Run `task`'s handler once with `ctx` and `kwargs`, and decide how its execution ended.

    Args:
        task: the task whose handler runs.
        ctx: the handler's context (its attempt and budget are the execution's).
        kwargs: the handler's decoded arguments.
        time_limit: the most seconds it may run, the job's timeout (None: no limit).
        deadline: the job's deadline on anyio's clock (`anyio.current_time()`), or None.
        policy: the retry policy to decide with (`policy_of`).
        result_max_bytes: the App's limit on a stored result.
        threads: the limiter of `def` handlers' threads (None: anyio's default).
        stopped: whether the caller told the execution to stop; a handler that then ends with
            an error of its own is handed back (`Interrupted`), as a cancelled one is.

    Raises:
        The caller's own cancellation (its stop, a lost lease), never what the handler raises:
        `SystemExit`, `KeyboardInterrupt` and a cancellation of the handler's own end its
        execution like any other exception.
    """
    returned: Any = None
    raised: BaseException | None = None
    try:
        if not task.is_async:
            returned, raised = await _in_thread(task, ctx, kwargs, time_limit, threads)
        elif time_limit is None:
            returned = await task.fn(ctx, **kwargs)
        else:
            with anyio.move_on_after(time_limit) as timer:
                returned = await task.fn(ctx, **kwargs)
            if timer.cancelled_caught:
                raised = ExecutionTimeout(time_limit)
    except BaseException as exc:
        if own_cancellation(exc):
            raise
        raised = exc
    if raised is not None and stopped() and not isinstance(raised, ExecutionTimeout):
        raised = Interrupted("the worker stopped while the job ran")
    result = None
    if returned is not None and raised is None:
        try:
            result = encode_result(returned, task=task.name, max_bytes=result_max_bytes)
        except InvalidResultError as exc:
            raised = exc  # as if the handler had raised it
    deadline_in = None if deadline is None else deadline - anyio.current_time()
    decision = decide(
        raised, attempt=ctx.attempt, max_attempts=ctx.max_attempts, deadline_in=deadline_in,
        policy=policy, result=result,
    )  # fmt: skip
    return Execution(decision, returned, raised)


async def _in_thread(
    task: Task,
    ctx: Context,
    kwargs: dict[str, Any],
    time_limit: float | None,
    threads: anyio.CapacityLimiter | None,
) -> tuple[Any, BaseException | None]:
    """Run a `def` handler in a thread, to its end or to its time limit: (returned, raised)."""
    call = functools.partial(task.fn, ctx, **kwargs)
    if time_limit is None:
        with anyio.CancelScope(shield=True):
            returned = await anyio.to_thread.run_sync(call, limiter=threads)
        return returned, None
    returned = None
    with anyio.CancelScope(shield=True), anyio.move_on_after(time_limit) as timer:
        returned = await anyio.to_thread.run_sync(call, limiter=threads, abandon_on_cancel=True)
    if not timer.cancelled_caught:
        return returned, None
    ctx.stop()
    logger.warning(
        "job %s (%s): its def handler ran past its timeout of %gs; the thread cannot be "
        "interrupted: it is told to stop (ctx.stopping) and left to finish alone",
        ctx.job_id, task.name, time_limit,
        extra={"job_id": ctx.job_id, "task": task.name, "outcome": "timeout"},
    )  # fmt: skip
    return None, ExecutionTimeout(time_limit)


def own_cancellation(exc: BaseException) -> bool:
    """Whether `exc` is this task being cancelled (by a cancel scope of the caller's, or the
    caller's own cancellation) rather than a handler raising a cancellation error itself."""
    if not isinstance(exc, anyio.get_cancelled_exc_class()):
        return False
    current = asyncio.current_task()
    return current is None or current.cancelling() > 0
