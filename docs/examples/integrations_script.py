"""A one-off script: enqueue a batch and exit; idempotency keys make running it again safe."""

from __future__ import annotations

import asyncio
import os
import sys

import sweepq

BATCH = "reindex-2026-12"  # names this batch in the jobs' idempotency keys and group


async def enqueue_batch(app: sweepq.App, document_ids: list[int]) -> tuple[int, int]:
    """One job per document, in one statement; (created, enqueued by an earlier run)."""
    results = await app.enqueue_many(
        [
            sweepq.JobSpec(
                "reindex_document",
                {"document_id": document_id},
                idempotency_key=f"{BATCH}:{document_id}",
                group=BATCH,  # to follow it: app.group_counts(BATCH)
            )
            for document_id in document_ids
        ]
    )
    created = sum(r.created for r in results)
    return created, len(results) - created


async def main(dsn: str, schema: str) -> None:
    # In your project: `from myproject.tasks import app`, the App the workers run.
    app = sweepq.App(dsn, schema=schema)

    @app.task(name="reindex_document", queue="maintenance")
    async def reindex_document(ctx: sweepq.Context, document_id: int) -> None:
        pass  # runs in the workers, not in this script

    async with app:  # opens the pool; closing it at the end is all the cleanup there is
        await app.migrate()
        document_ids = list(range(1, 101))  # e.g. SELECT id FROM documents WHERE ...
        created, existing = await enqueue_batch(app, document_ids)
        print(f"{created} enqueued, {existing} already enqueued by an earlier run")
        # Run again (after a crash half-way, or by mistake): nothing is enqueued twice.
        assert await enqueue_batch(app, document_ids) == (0, len(document_ids))
        assert (await app.group_counts(BATCH)).outstanding == len(document_ids)
    # The workers serving "maintenance" were woken at the commit; the script is done.


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
