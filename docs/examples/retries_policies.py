"""Task policies: a timeout, a backoff of one's own, and exceptions that are not worth a retry."""

from __future__ import annotations

import asyncio
import os
import sys

import sweepq
from sweepq.testing import drain


class InvalidAddress(ValueError):
    """The API said 4xx: another attempt cannot fix the address."""


async def main(dsn: str, schema: str) -> None:
    # The default of every task: retry only network trouble, 5 s, 10 s, 20 s ... up to 10 min.
    app = sweepq.App(
        dsn,
        schema=schema,
        retry=sweepq.RetryPolicy(
            backoff=sweepq.backoff.exponential(base=5, cap=600),
            retry_on=(ConnectionError, TimeoutError),
        ),
    )
    attempts: dict[str, int] = {}

    # A task's own policy replaces the App's: here, a 4xx fails at once, anything else retries
    # every 30 s. The timeout cancels an execution that hangs, and counts as a failed attempt.
    @app.task(
        name="send_email",
        queue="policies-mail",
        max_attempts=4,
        timeout=0.5,
        retry=sweepq.RetryPolicy(backoff=sweepq.backoff.constant(30), discard_on=(InvalidAddress,)),
    )
    async def send_email(ctx: sweepq.Context, to: str) -> None:
        attempts[to] = ctx.attempt
        if to.endswith("@invalid"):
            raise InvalidAddress(f"422: {to} is not deliverable")
        if to.startswith("slow") and ctx.attempt < 3:
            await asyncio.sleep(60)  # the mail API hangs: cancelled after 0.5 s

    async with app:
        await app.migrate()
        bad = await app.enqueue(send_email, {"to": "x@invalid"})
        slow = await app.enqueue(send_email, {"to": "slow@example.com"})
        # drain() runs the queue's jobs, retries included, without waiting their backoffs.
        assert await drain(app, queues=["policies-mail"]) == {
            "failed": 1,
            "retry": 2,
            "completed": 1,
        }

        failed = await app.get_job(bad.job_id)
        assert failed is not None
        assert (failed.failure_reason, failed.attempt) == ("error", 1)  # discarded at once
        done = await app.get_job(slow.job_id)
        assert done is not None
        assert (done.state, done.attempt) == (sweepq.JobState.COMPLETED, 3)
        assert [e.kind for e in done.errors] == ["timeout", "timeout"]
        print(f"{bad.job_id}: {failed.failure_reason}; {slow.job_id}: completed on attempt 3")


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
