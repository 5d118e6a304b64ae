"""The worker's statements called directly, for tests that step through claims and outcomes."""

from __future__ import annotations

from collections.abc import Sequence

import sweepq
from sweepq.core.decision import Decision
from sweepq.core.ident import ident
from sweepq.core.queries import Conn, Executor
from sweepq.core.rows import Claimed, FinishBatch


async def claim(
    app: sweepq.App,
    limit: int = 1,
    *,
    worker: str = "w",
    lease: float = 30.0,
    queues: Sequence[str] = ("default",),
    on: Executor | None = None,
) -> list[Claimed]:
    """Claim as a worker does: again at once while a claim woke keys (at most a few times)."""
    executor = on or app.pool
    jobs: list[Claimed] = []
    for _ in range(4):
        batch = await app.queries.job_claim(
            executor, list(queues), limit - len(jobs), worker, lease
        )
        jobs.extend(batch.jobs)
        if not batch.woke or len(jobs) >= limit:
            break
    return jobs


async def finish(
    app: sweepq.App,
    job: Claimed,
    state: str = "completed",
    *,
    delay: float = 0.0,
    worker: str = "w",
    on: Executor | None = None,
) -> bool:
    """Record one outcome of `job`'s claim by `worker`; whether it was recorded."""
    out = FinishBatch()
    if state == "failed":
        out.add(job.token, Decision(state="failed", failure_reason="error", error="x"))
    else:
        out.add(job.token, Decision(state=state, delay=delay))  # type: ignore[arg-type]  # tests
    return job.token in (await app.queries.job_finish_many(on or app.pool, worker, out)).tokens


async def job_counts(app: sweepq.App, conn: Conn | None = None) -> dict[str, int]:
    """Jobs per state (the whole table: tests only)."""
    sql = f"SELECT state::text, count(*) FROM {ident(app.schema)}.jobs GROUP BY state"
    rows = await (conn or app.pool).fetch(sql)
    return {r[0]: r[1] for r in rows}


async def make_due(
    app: sweepq.App, job_id: int | None = None, *, on: Executor | None = None
) -> int:
    """Make available jobs (all, or one) due now, skipping their backoffs and snoozes; their
    concurrency keys get a wake-up, as they would from the queue's own statements."""
    schema = ident(app.schema)
    return int(
        await (on or app.pool).fetchval(
            f"""
            WITH due AS (
                UPDATE {schema}.jobs SET run_at = now()
                WHERE state = 'available' AND ($1::bigint IS NULL OR id = $1)
                RETURNING concurrency_key
            ),
            woken AS (
                INSERT INTO {schema}.concurrency_wakeups (key, run_at)
                SELECT DISTINCT concurrency_key, now() FROM due WHERE concurrency_key IS NOT NULL
            )
            SELECT count(*) FROM due
            """,
            job_id,
        )
    )


async def leader(app: sweepq.App, role: str = "maintenance") -> str | None:
    """The worker holding `role` now (its term not expired), or None."""
    holder = await app.pool.fetchval(
        f"SELECT worker_id FROM {ident(app.schema)}.leaders"
        " WHERE role = $1 AND expires_at >= now()",
        role,
    )
    return None if holder is None else str(holder)


async def row_versions(app: sweepq.App, table: str, on: Executor | None = None) -> set[str]:
    """Every row's (xmin, ctid): a write to a row gives it a new ctid."""
    rows = await (on or app.pool).fetch(
        f"SELECT xmin::text || '/' || ctid::text FROM {ident(app.schema)}.{ident(table)}"
    )
    return {r[0] for r in rows}
