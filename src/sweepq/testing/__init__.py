"""Testing your own tasks and sweeps against a real PostgreSQL.

Enable the pytest plugin with `-p sweepq.testing.plugin` (or `pytest_plugins =
["sweepq.testing.plugin"]` in a conftest) for the `sweepq_dsn` and `sweepq_app` fixtures; the
helpers below work with any App:

- `perform(app, task, args)` runs one handler inline, with a real `Context`, and says what the
  queue would decide (`completed`, `retry`, `snooze`, `cancel`, `failed`);
- `drain(app)` works until nothing is left, making jobs scheduled for later due now, and counts
  the executions per outcome;
- `assert_enqueued(app, task, args=...)` and `refute_enqueued(...)` look at the jobs waiting;
- `step_sweep(app, run_id)` moves a sweep run one link on;
- `isolated(app, dsn)` points an App at a fresh migrated schema and drops it afterwards.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec

from ..core.context import Context
from ..core.decision import ExecutionOutcome, outcome_of
from ..core.errors import ConfigurationError
from ..core.execution import execute, policy_of
from ..core.ident import ident, queue_name
from ..core.jobs import FailureReason, Job, JobId
from ..core.tasks import Task
from ..core.worker import Worker
from ..sweeps import link
from ..sweeps.app import App
from ..sweeps.runs import SweepRun
from .database import NoDatabaseError, find_database

__all__ = [
    "NoDatabaseError",
    "Performed",
    "assert_enqueued",
    "drain",
    "find_database",
    "isolated",
    "perform",
    "refute_enqueued",
    "step_sweep",
]


@dataclass(frozen=True)
class Performed:
    """What `perform` saw: the handler's return value or exception, and the queue's decision.

    Attributes:
        outcome: `completed`, `retry`, `snooze`, `cancel` or `failed` (`handed_back` is what a
            worker that stops or loses the database does, never a handler).
        returned: what the handler returned (None when it raised); a worker stores it as the
            job's `result`.
        raised: what the handler raised, or None; or the `InvalidResultError` a worker would
            fail the execution with, when what it returned cannot be a result (not JSON, or
            over the App's `result_max_bytes`).
        delay: seconds until the job would run again (`retry` and `snooze`).
        failure_reason: why it would fail (`max_attempts_exceeded`, `deadline_exceeded`, ...).
        error: the error the job's history would record (a traceback, for an exception).
    """

    outcome: ExecutionOutcome
    returned: Any = None
    raised: BaseException | None = None
    delay: float = 0.0
    failure_reason: FailureReason | None = None
    error: str | None = None


async def perform(
    app: App,
    task: Task | str,
    args: Mapping[str, Any] | msgspec.Struct | None = None,
    *,
    attempt: int = 1,
    max_attempts: int | None = None,
    snoozes: int = 0,
    deadline_in: float | None = None,
) -> Performed:
    """Run one handler now, in this task, as a worker would, and say what the queue would
    decide; no job is written (what the handler itself does, say `ctx.app.enqueue`, is real).

    The args go through the same checks and JSON round trip as `enqueue`, so a test fails on
    args the queue would refuse. The execution is the worker's own (`core/execution.py`): a `def`
    handler runs in a thread, the task's timeout cuts it off, what it returns is checked as a
    result, and the decision follows the task's retry policy (else the App's): `discard_on`,
    `retry_on` and its backoff.

    Args:
        app: the App the handler's `ctx.app` is.
        task: the task, or its name.
        args: the handler's keyword arguments.
        attempt: the attempt number the handler sees (the last one is `max_attempts`).
        max_attempts: the budget (default: the task's).
        snoozes: how many times the job snoozed before.
        deadline_in: seconds left before the job's deadline (None: it has none).

    Raises:
        InvalidArgumentsError: args the handler does not accept, as `enqueue` would.

    Example:
        >>> performed = await perform(app, send_email, {"to": "a@example.com"})
        >>> assert performed.outcome == "completed"
    """
    found = app.get_task(task)
    budget = found.max_attempts if max_attempts is None else max_attempts
    kwargs = found.decode_args(found.encode_args(args))
    ctx = Context(
        app, job_id=JobId(0), task=found.name, queue=found.queue, attempt=attempt,
        max_attempts=budget, snoozes=snoozes, worker_id="sweepq.testing", args=kwargs,
    )  # fmt: skip
    deadline = None if deadline_in is None else anyio.current_time() + deadline_in
    execution = await execute(
        found, ctx, kwargs, time_limit=found.timeout, deadline=deadline,
        policy=policy_of(found, app.retry_policy), result_max_bytes=app.result_max_bytes,
    )  # fmt: skip
    decision = execution.decision
    return Performed(
        outcome=outcome_of(decision),
        returned=execution.returned,
        raised=execution.raised,
        delay=decision.delay,
        failure_reason=decision.failure_reason,
        error=decision.error,
    )


async def drain(
    app: App,
    *,
    queues: Sequence[str] | None = None,
    include_scheduled: bool = True,
    concurrency: int = 10,
    max_rounds: int = 100,
) -> dict[ExecutionOutcome, int]:
    """Work until no job of `queues` is left to run, and count the executions per outcome.

    With `include_scheduled`, jobs scheduled for later (retry backoffs, snoozes, delays) are
    made due at once, round after round, so that a job retried three times runs three times
    here without waiting. Without it, only jobs due now run. The app is opened if it is not.

    Args:
        app: the App whose tasks run.
        queues: the queues to work (default: every queue with jobs waiting).
        include_scheduled: make jobs scheduled for later due now.
        concurrency: the worker's slots.
        max_rounds: the rounds of "make due, work until idle" before giving up.

    Raises:
        AssertionError: jobs were still waiting after `max_rounds` rounds (a job that snoozes
            for ever, a concurrency key at its limit): the message says how many.

    Example:
        >>> counts = await drain(app)
        >>> assert counts == {"retry": 2, "completed": 1}
    """
    await app.open()
    given = None if queues is None else [queue_name(q) for q in queues]
    counts: Counter[ExecutionOutcome] = Counter()
    for _ in range(max_rounds):
        made_due = await app.queries.job_make_due(app.pool, given) if include_scheduled else 0
        names = given or await app.queries.job_queues_waiting(app.pool)
        if not names:
            return dict(counts)
        async with Worker(
            app, queues=names, concurrency=concurrency, poll_seconds=0.05, listen=False,
            prune_every=None,
        ) as worker:  # fmt: skip
            ran = await worker.run_until_idle()
        counts.update(worker.outcomes)
        if ran == 0 and made_due == 0:
            return dict(counts)
    raise AssertionError(
        f"drain: jobs still waited after {max_rounds} rounds ({dict(counts)} so far): a job "
        "that snoozes for ever, or a concurrency key at its limit?"
    )


async def assert_enqueued(
    app: App, task: Task | str, args: Mapping[str, Any] | None = None, **fields: Any
) -> Job:
    """The first job of `task` waiting to run (due or scheduled) whose args contain `args` and
    whose other fields equal `fields` (any `Job` attribute: queue, priority, group, ...).

    Raises:
        AssertionError: none matches; the message lists the jobs of `task` that wait.

    Example:
        >>> job = await assert_enqueued(app, "send_email", {"to": "a@example.com"}, queue="mail")
    """
    name, matching = await _enqueued(app, task, args, fields)
    if not matching:
        waiting = await app.queries.job_list_enqueued(app.pool, name, "{}", 10)
        shown = "\n".join(f"  {_describe(j, fields)}" for j in waiting) or "  (none)"
        raise AssertionError(
            f"no job of task {name!r} with args containing {dict(args or {})!r}"
            f"{_fields_text(fields)} is enqueued; the jobs of {name!r} waiting to run:\n{shown}"
        )
    return matching[0]


async def refute_enqueued(
    app: App, task: Task | str, args: Mapping[str, Any] | None = None, **fields: Any
) -> None:
    """Fail if a job of `task` waiting to run matches (as in `assert_enqueued`).

    Raises:
        AssertionError: some match; the message lists them.
    """
    name, matching = await _enqueued(app, task, args, fields)
    if matching:
        shown = "\n".join(f"  {_describe(j, fields)}" for j in matching[:10])
        raise AssertionError(
            f"{len(matching)} job(s) of task {name!r} with args containing "
            f"{dict(args or {})!r}{_fields_text(fields)} are enqueued:\n{shown}"
        )


async def step_sweep(app: App, run_id: int) -> SweepRun:
    """Move a sweep run on by one link, here and now: fan out its next page (its leaves are
    then enqueued, for `assert_enqueued`, `perform` or `drain`), or end it once it drains and
    its leaves are done. Returns the run afterwards; it is unchanged when the run is paused or
    ended, its window has no room for a page, or it drains with leaves outstanding.

    Example:
        >>> started = await app.start_sweep("reindex")
        >>> run = await step_sweep(app, started.run_id)  # the first page's leaves are enqueued
        >>> assert run.enqueued == Reindex.page_size
    """
    await app.open()
    await link.step(app.sweeps_layer, run_id)
    run = await app.sweep_status(run_id)
    if run is None:
        raise AssertionError(f"no sweep run {run_id}")
    return run


@contextlib.asynccontextmanager
async def isolated(
    app: App, dsn: str | None = None, *, schema: str | None = None
) -> AsyncIterator[App]:
    """Point `app` (not open) at a fresh schema of `dsn`, migrate it and open the app; on exit,
    close it, drop the schema and point the app back where it was.

    Example:
        >>> async with isolated(app, "postgresql://localhost/test") as app:
        ...     await app.enqueue(send_email, {"to": "a@example.com"})
    """
    previous_dsn, previous_schema = app.db.given_dsn, app.schema
    fresh = schema or f"sweepq_test_{uuid.uuid4().hex[:12]}"
    app.configure(dsn=dsn, schema=fresh)
    try:
        async with app:
            try:
                await app.migrate()
                yield app
            finally:
                with anyio.CancelScope(shield=True):
                    await app.pool.execute(f"DROP SCHEMA IF EXISTS {ident(fresh)} CASCADE")
    finally:
        app.configure(schema=previous_schema)
        app.db.given_dsn = previous_dsn


async def _enqueued(
    app: App, task: Task | str, args: Mapping[str, Any] | None, fields: Mapping[str, Any]
) -> tuple[str, list[Job]]:
    unknown = sorted(set(fields) - set(Job.__struct_fields__) - {"args"})
    if unknown:
        raise ConfigurationError(
            f"assert_enqueued: {', '.join(unknown)} is not a Job field "
            f"(fields: {', '.join(Job.__struct_fields__)})"
        )
    name = task.name if isinstance(task, Task) else task
    await app.open()
    contained = msgspec.json.encode(dict(args or {})).decode()
    with_args = await app.queries.job_list_enqueued(app.pool, name, contained, 1_000)
    matching = [j for j in with_args if all(getattr(j, f) == v for f, v in fields.items())]
    return name, matching


def _fields_text(fields: Mapping[str, Any]) -> str:
    return "".join(f", {k}={v!r}" for k, v in fields.items())


def _describe(job: Job, fields: Mapping[str, Any]) -> str:
    extra = "".join(f" {k}={getattr(job, k)!r}" for k in fields)
    return (
        f"job {job.id}: args={job.args!r} queue={job.queue!r} run_at={job.run_at:%H:%M:%S}{extra}"
    )
