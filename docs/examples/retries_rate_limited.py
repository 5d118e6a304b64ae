"""The 429 answer: RetryAfter(..., consume_budget=False) waits as told and spends no attempt."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta

import sweepq


class TooManyRequests(Exception):
    """What an HTTP client raises on a 429, with the server's Retry-After in seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"429 Too Many Requests (Retry-After: {retry_after})")
        self.retry_after = retry_after


class PaymentsApi:
    """A stand-in for a partner API that refuses the first `refusals` calls with a 429."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.calls = 0

    async def charge(self, invoice: str) -> None:
        self.calls += 1
        if self.calls <= self.refusals:
            raise TooManyRequests(retry_after=0.02)  # seconds, in production more


async def run_until_finished(worker: sweepq.Worker, app: sweepq.App, job_id: int) -> sweepq.Job:
    """Work until the job is terminal (a rescheduled job is due again after its delay)."""
    async with asyncio.timeout(30):
        while True:
            await worker.run_until_idle()
            job = await app.get_job(job_id)
            assert job is not None
            if job.state.terminal:
                return job
            await asyncio.sleep(0.01)


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    api = PaymentsApi(refusals=6)

    @app.task(name="charge_invoice", max_attempts=3)
    async def charge_invoice(ctx: sweepq.Context, invoice: str) -> None:
        try:
            await api.charge(invoice)
        except TooManyRequests as exc:
            # The partner refused before doing anything: wait as told, spend no attempt.
            raise sweepq.RetryAfter(exc.retry_after, consume_budget=False) from exc

    @app.task(name="sync_ledger", max_attempts=2)
    async def sync_ledger(ctx: sweepq.Context, day: str) -> None:
        # The ledger ran and failed halfway: that is an attempt, spent (the default).
        raise sweepq.RetryAfter(timedelta(milliseconds=20))

    async with app:
        await app.migrate()
        async with sweepq.Worker(app, queues=["default"], concurrency=4) as worker:
            # Six 429s against a budget of three attempts, and the invoice is still charged:
            # the refusals were waits, not failures. The deadline bounds how long it may wait.
            charge = await app.enqueue(
                charge_invoice, {"invoice": "inv-1"}, deadline=timedelta(minutes=10)
            )
            job = await run_until_finished(worker, app, charge.job_id)
            assert job.state is sweepq.JobState.COMPLETED
            assert (job.attempt, job.snoozes, job.max_attempts) == (1, 6, 3)
            assert api.calls == 7

            # RetryAfter with the default consume_budget=True is a retry at a time you choose:
            # each one spends an attempt, and the last one fails the job.
            sync = await app.enqueue(sync_ledger, {"day": "2026-11-29"})
            job = await run_until_finished(worker, app, sync.job_id)
            assert job.state is sweepq.JobState.FAILED
            assert job.failure_reason == "max_attempts_exceeded"
            assert (job.attempt, job.snoozes) == (2, 0)
            assert [e.kind for e in job.errors] == ["retry_after", "retry_after"]


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
