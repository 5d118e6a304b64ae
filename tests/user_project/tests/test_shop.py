"""The shop's tests, on the sweepq_app fixture (a fresh schema per test) and the testing kit."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from shop import tasks

import sweepq
from sweepq.testing import assert_enqueued, drain, perform, refute_enqueued, step_sweep


async def test_a_receipt_is_sent(sweepq_app: sweepq.App) -> None:
    performed = await perform(sweepq_app, "send_receipt", {"order_id": 1, "to": "a@example.com"})
    assert performed.outcome == "completed"
    assert performed.returned == "receipt 1 sent to a@example.com"


async def test_a_mail_outage_is_retried_with_a_backoff(sweepq_app: sweepq.App) -> None:
    tasks.MAIL_OUTAGES["b@example.com"] = 1
    performed = await perform(sweepq_app, "send_receipt", {"order_id": 2, "to": "b@example.com"})
    assert performed.outcome == "retry"
    assert performed.delay > 0


async def test_placing_an_order_enqueues_its_receipt(sweepq_app: sweepq.App) -> None:
    await perform(sweepq_app, tasks.place_order, {"order_id": 3, "email": "c@example.com"})
    job = await assert_enqueued(sweepq_app, "send_receipt", {"order_id": 3})
    assert job.args == {"order_id": 3, "to": "c@example.com"}
    await refute_enqueued(sweepq_app, "send_receipt", {"order_id": 4})


async def test_drain_sees_the_receipt_through_two_outages(sweepq_app: sweepq.App) -> None:
    tasks.MAIL_OUTAGES["d@example.com"] = 2
    await sweepq_app.enqueue(tasks.place_order, {"order_id": 5, "email": "d@example.com"})
    # The two retries' backoffs (about 1 s, then 2 s) are not waited for.
    assert await drain(sweepq_app) == {"completed": 2, "retry": 2}
    assert "d@example.com" in tasks.SENT


async def test_a_blocking_thumbnail_publishes_its_image(sweepq_app: sweepq.App) -> None:
    await sweepq_app.enqueue(tasks.make_thumbnail, {"image_id": 7})
    assert await drain(sweepq_app) == {"completed": 2}


@pytest.fixture
async def customers(sweepq_app: sweepq.App) -> AsyncIterator[None]:
    await sweepq_app.pool.execute(
        "CREATE TABLE shop_customers AS"
        " SELECT g AS id, 'c' || g || '@example.com' AS email FROM generate_series(1, 5) g;"
        " ALTER TABLE shop_customers ADD PRIMARY KEY (id)"
    )
    yield
    await sweepq_app.pool.execute("DROP TABLE shop_customers")


async def test_the_preferences_sweep_one_page_at_a_time(
    sweepq_app: sweepq.App, customers: None
) -> None:
    started = await sweepq_app.start_sweep("resend-preferences")
    run = await step_sweep(sweepq_app, started.run_id)
    assert (run.links, run.enqueued) == (1, 2)
    await assert_enqueued(sweepq_app, "sweepq.sweep.resend-preferences.leaf", {"item": {"id": 2}})
    await refute_enqueued(sweepq_app, "sweepq.sweep.resend-preferences.leaf", {"item": {"id": 3}})
    run = await step_sweep(sweepq_app, started.run_id)
    assert run.enqueued == 4
    counts = await drain(sweepq_app)
    assert counts["completed"] >= 5 + 5  # five leaves, five receipts (and the links)
    finished = await sweepq_app.sweep_status(started.run_id)
    assert finished is not None
    assert (finished.state, finished.completed) == (sweepq.SweepState.COMPLETED, 5)
