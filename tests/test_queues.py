"""Pausing a queue holds for every worker, writes nothing while its jobs wait, and a resume wakes
the workers at once (`App.pause_queue`, `App.resume_queue`, `App.queues`)."""

from __future__ import annotations

import logging

import anyio
import pytest

import sweepq
from factories import count_jobs
from statements import claim, row_versions
from waiting import wait_until


def register(app: sweepq.App, ran: list[str]) -> tuple[sweepq.Task, sweepq.Task]:
    @app.task(name="mail", queue="mail")
    async def mail(ctx: sweepq.Context, n: int) -> None:
        ran.append(f"mail:{n}")

    @app.task(name="report", queue="reports")
    async def report(ctx: sweepq.Context, n: int) -> None:
        ran.append(f"report:{n}")

    return mail, report


async def test_a_paused_queues_jobs_stay_available_while_other_queues_run(app: sweepq.App) -> None:
    ran: list[str] = []
    mail, report = register(app, ran)
    assert await app.pause_queue("mail", reason="smtp provider down") is True
    for n in range(3):
        await app.enqueue(mail, {"n": n})
        await app.enqueue(report, {"n": n})
    async with sweepq.Worker(app, queues=["mail", "reports"], concurrency=4) as worker:
        assert await worker.run_until_idle() == 3
    assert sorted(ran) == ["report:0", "report:1", "report:2"]
    assert await count_jobs(app, "available") == 3
    [mail_queue] = await app.queues()  # the reports queue has no live job left
    assert (mail_queue.queue, mail_queue.due, mail_queue.running) == ("mail", 3, 0)
    assert mail_queue.pause is not None
    assert mail_queue.pause.reason == "smtp provider down"

    assert await app.resume_queue("mail") is True
    async with sweepq.Worker(app, queues=["mail", "reports"], concurrency=4) as worker:
        assert await worker.run_until_idle() == 3
    assert sorted(ran)[:3] == ["mail:0", "mail:1", "mail:2"]
    assert await app.queues() == []  # no live job, no pause: nothing to list


async def test_claims_of_a_paused_queue_write_nothing_for_plain_or_keyed_jobs(
    app: sweepq.App,
) -> None:
    ran: list[str] = []
    mail, _ = register(app, ran)
    await app.set_concurrency_limit("smtp", 2)
    await app.pause_queue("mail")
    for n in range(5):
        await app.enqueue(mail, {"n": n})
        await app.enqueue(mail, {"n": 10 + n}, concurrency_key="smtp")
    assert await claim(app, 10, queues=["mail"]) == []  # folds the enqueues' wake-ups once
    jobs, keys = await row_versions(app, "jobs"), await row_versions(app, "concurrency_keys")
    for _ in range(20):
        assert await claim(app, 10, queues=["mail"]) == []
    assert await row_versions(app, "jobs") == jobs
    assert await row_versions(app, "concurrency_keys") == keys
    assert await row_versions(app, "queue_pauses") != set()  # the pause itself, written once
    await app.resume_queue("mail")
    assert len(await claim(app, 10, queues=["mail"])) == 7  # 5 plain, 2 of the key's limit


async def test_a_pause_holds_for_every_worker_and_a_resume_wakes_them_at_once(
    app: sweepq.App, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []
    mail, _ = register(app, ran)
    caplog.set_level(logging.INFO, logger="sweepq.worker")
    await app.pause_queue("mail", reason="maintenance window")
    # A long poll: only the resume's notification can wake the workers within the test.
    workers = [
        sweepq.Worker(app, queues=["mail"], concurrency=2, poll_seconds=60) for _ in range(2)
    ]
    async with anyio.create_task_group() as tg:
        for w in workers:
            await tg.start(_serve, w)
        await wait_until(lambda: _all_listening(workers), what="both workers listen")
        for n in range(4):
            await app.enqueue(mail, {"n": n})
        # Notified of every enqueue, both claim at once and find nothing: a window in which a
        # worker that ignored the pause would start the jobs (the claim's reading of the pause
        # is tested without a window above, claim by claim).
        await anyio.sleep(0.3)
        assert ran == []
        assert await count_jobs(app, "available") == 4
        assert await app.resume_queue("mail") is True
        with anyio.fail_after(5):  # far below the 60 s poll: woken by the resume
            while len(ran) < 4:
                await anyio.sleep(0.02)
        for w in workers:
            w.stop()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("'mail' is paused since" in m and "maintenance window" in m for m in messages) == 2
    assert sum(m == "queue 'mail' resumed" for m in messages) == 2


async def _serve(worker: sweepq.Worker, *, task_status: anyio.abc.TaskStatus[None]) -> None:
    async with worker:
        task_status.started()
        await worker.run()


async def _all_listening(workers: list[sweepq.Worker]) -> bool:
    return all(w.listening for w in workers)


async def test_a_pause_in_a_rolled_back_transaction_never_held(app: sweepq.App) -> None:
    async with app.pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        assert await app.pause_queue("mail", conn=conn) is True
        await tx.rollback()
    assert await app.queues() == []
    assert await app.resume_queue("mail") is False


async def test_a_second_pause_keeps_the_first_and_a_resume_of_an_active_queue_says_so(
    app: sweepq.App,
) -> None:
    assert await app.pause_queue("mail", reason="first") is True
    assert await app.pause_queue("mail", reason="second") is False
    [state] = await app.queues()
    assert state.pause is not None
    assert state.pause.reason == "first"
    assert await app.resume_queue("mail") is True
    assert await app.resume_queue("mail") is False


@pytest.mark.parametrize(
    ("queue", "reason", "error"),
    [
        ("", None, sweepq.InvalidIdentifierError),
        ("-mail", None, sweepq.InvalidIdentifierError),
        ("!paused:mail", None, sweepq.InvalidIdentifierError),
        ("mail", "x" * 513, sweepq.InvalidJobOptionError),
        ("mail", "a\x00b", sweepq.InvalidJobOptionError),
    ],
)
async def test_a_bad_queue_name_or_reason_is_refused_and_nothing_is_paused(
    app: sweepq.App, queue: str, reason: str | None, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await app.pause_queue(queue, reason=reason)
    assert await row_versions(app, "queue_pauses") == set()
    with pytest.raises(sweepq.InvalidIdentifierError):
        await app.resume_queue("")
