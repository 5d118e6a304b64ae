from __future__ import annotations

import sweepq
from sweepq.core.queries import Conn


async def test_enqueue_in_a_rolled_back_transaction_is_visible_inside_it(
    tx_app: sweepq.App, conn: Conn
) -> None:
    @tx_app.task(name="noop")
    async def noop(ctx: sweepq.Context, n: int) -> None:
        return None

    result = await tx_app.enqueue(noop, {"n": 1}, conn=conn)
    job = await tx_app.get_job(result.job_id, conn=conn)
    assert job is not None
    assert job.state is sweepq.JobState.AVAILABLE
    assert job.args == {"n": 1}


async def test_worker_runs_jobs_until_idle(app: sweepq.App) -> None:
    seen: list[int] = []

    @app.task(name="record")
    async def record(ctx: sweepq.Context, n: int) -> None:
        seen.append(n)

    await app.enqueue_many([sweepq.JobSpec(record, {"n": i}) for i in range(50)])
    async with sweepq.Worker(app, concurrency=5) as worker:
        assert await worker.run_until_idle() == 50
    assert sorted(seen) == list(range(50))
