"""Rate limits: at most N jobs of a key start per window; the others wait, writing nothing."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from datetime import timedelta

import sweepq


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    started: list[int] = []

    @app.task(name="sync_account")
    async def sync_account(ctx: sweepq.Context, account: int) -> None:
        started.append(account)  # the call to the partner's API

    async with app:
        await app.migrate()
        # The partner allows 5 syncs an hour per tenant: the tenant is the key (a new one each
        # run of this example: a key's starts count for its whole window).
        tenant = f"tenant-{uuid.uuid4().hex[:8]}"
        await app.set_rate_limit(tenant, 5, per=timedelta(hours=1))
        # A limit and a rate combine on one key: also at most 2 at once.
        await app.set_concurrency_limit(tenant, 2)
        await app.enqueue_many(
            [sweepq.JobSpec(sync_account, {"account": n}, concurrency_key=tenant) for n in range(8)]
        )
        async with sweepq.Worker(app, queues=["default"], concurrency=10) as worker:
            assert await worker.run_until_idle() == 5  # this hour's five
            [key] = [k for k in await app.concurrency_keys() if k.key == tenant]
            assert (key.rate_count, key.rate_seconds, key.rate_used) == (5, 3600.0, 5)
            # The other three wait `available`: no attempt spent, no snooze, nothing written.
            assert key.waiting == 3

            # Removing the rate (count None) lets them start at once.
            await app.set_rate_limit(tenant, None)
            assert await worker.run_until_idle() == 3
        assert sorted(started) == list(range(8))


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
