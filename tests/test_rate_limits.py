"""Rate limits per concurrency key, admitted in the claim (`App.set_rate_limit`).

At most `count` jobs of a key start per window of `per` (windows aligned on multiples of `per`
since the epoch), across every worker; a job over the rate stays `available`, holds no slot, and
nothing is written while it waits; the key is read again when its window ends, not per claim.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import anyio
import httpx
import pytest

import sweepq
from runtime_workers import runtime_workers
from statements import claim, finish, row_versions
from sweepq.core.admin import top_concurrency_key_busiest
from sweepq.core.doctor import diagnose
from sweepq.core.ident import ident
from sweepq.core.rows import ConcurrencyKey
from sweepq.sweeps.app import App
from sweepq.web import create_app

HOUR = timedelta(hours=1)


def _register(app: sweepq.App) -> sweepq.Task:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    return t


async def _key(app: sweepq.App, key: str) -> ConcurrencyKey:
    return next(k for k in await app.concurrency_keys() if k.key == key)


async def test_at_most_count_jobs_start_per_window_and_the_key_waits_for_its_end(
    app: sweepq.App,
) -> None:
    t = _register(app)
    await app.set_rate_limit("api", 3, per=HOUR)
    await app.enqueue_many([sweepq.JobSpec(t, concurrency_key="api") for _ in range(10)])
    started = await claim(app, 10)
    assert len(started) == 3
    assert await claim(app, 10) == []
    key = await _key(app, "api")
    assert (key.rate_count, key.rate_seconds, key.rate_used) == (3, 3600.0, 3)
    assert key.waiting == 7
    # The key's place is the end of its window: the claim's walk does not read it before.
    place = await app.pool.fetchval(
        f"SELECT next_run_at - date_trunc('hour', now()) FROM {ident(app.schema)}"
        ".concurrency_keys WHERE key = 'api'"
    )
    assert place == HOUR

    # Its jobs ending (one completed, one retried at once) free slots, not the rate: the retry
    # does not bring the key back into the walk before the window ends.
    assert await finish(app, started[0])
    assert await finish(app, started[1], "available")
    assert await claim(app, 10) == []
    assert (await _key(app, "api")).rate_used == 3

    # The next window (moved into the past here, as an hour would): three more.
    await app.pool.execute(
        f"UPDATE {ident(app.schema)}.concurrency_keys"
        " SET rate_window = rate_window - interval '1 hour', next_run_at = now() WHERE key = 'api'"
    )
    assert len(await claim(app, 10)) == 3
    assert (await _key(app, "api")).rate_used == 3


async def test_nothing_is_written_while_jobs_wait_for_the_rate(app: sweepq.App) -> None:
    t = _register(app)
    await app.set_rate_limit("api", 1, per=HOUR)
    await app.enqueue_many([sweepq.JobSpec(t, concurrency_key="api") for _ in range(50)])
    assert len(await claim(app, 10)) == 1
    assert await claim(app, 10) == []  # folds what is left to fold
    jobs, keys = await row_versions(app, "jobs"), await row_versions(app, "concurrency_keys")
    for _ in range(20):
        assert await claim(app, 10) == []
    assert await row_versions(app, "jobs") == jobs
    assert await row_versions(app, "concurrency_keys") == keys


async def test_a_limit_and_a_rate_combine_on_one_key(app: sweepq.App) -> None:
    t = _register(app)
    await app.set_concurrency_limit("api", 1)
    await app.set_rate_limit("api", 2, per=HOUR)
    await app.enqueue_many([sweepq.JobSpec(t, concurrency_key="api") for _ in range(5)])
    first = await claim(app, 10)
    assert len(first) == 1  # the limit
    assert await claim(app, 10) == []
    assert await finish(app, first[0])
    second = await claim(app, 10)
    assert len(second) == 1
    assert await finish(app, second[0])
    assert await claim(app, 10) == []  # the rate: two this hour
    key = await _key(app, "api")
    assert (key.max_running, key.running, key.rate_used, key.waiting) == (1, 0, 2, 3)


async def test_new_jobs_of_a_spent_key_wait_and_plain_jobs_do_not(app: sweepq.App) -> None:
    t = _register(app)
    await app.set_rate_limit("api", 1, per=HOUR)
    await app.enqueue(t, concurrency_key="api")
    assert len(await claim(app, 10)) == 1
    # A new enqueue leaves a wake-up; folding it keeps the key's place at its window's end.
    await app.enqueue(t, concurrency_key="api")
    plain = await app.enqueue(t)
    assert [j.id for j in await claim(app, 10)] == [plain.job_id]
    assert await claim(app, 10) == []
    assert (await _key(app, "api")).waiting == 1


async def test_removing_the_rate_lets_the_waiting_jobs_start(app: sweepq.App) -> None:
    t = _register(app)
    await app.set_rate_limit("api", 1, per=HOUR)
    await app.enqueue_many([sweepq.JobSpec(t, concurrency_key="api") for _ in range(3)])
    assert len(await claim(app, 10)) == 1
    assert await claim(app, 10) == []
    await app.set_rate_limit("api", None)
    assert len(await claim(app, 10)) == 2
    key = await _key(app, "api")
    assert (key.rate_count, key.rate_seconds) == (None, None)


@pytest.mark.parametrize(
    ("count", "per", "message"),
    [
        (0, 1.0, "count must be an int >= 1"),
        (True, 1.0, "count must be an int >= 1"),
        (2, None, "per is required with a count"),
        (2, 0, "per must be"),
        (2, 0.0001, "per must be at least 1 ms"),
        (2, "1m", "per must be"),
    ],
)
async def test_a_bad_rate_is_refused_and_writes_nothing(
    app: sweepq.App, count: object, per: object, message: str
) -> None:
    with pytest.raises(sweepq.InvalidJobOptionError, match=message):
        await app.set_rate_limit("api", count, per=per)  # type: ignore[arg-type]
    assert await app.concurrency_keys() == []


async def test_the_claim_reads_no_key_whose_rate_is_spent(app: sweepq.App) -> None:
    """2,000 keys whose rate is spent, each with jobs waiting: a claim of plain jobs reads none
    of them (their places are their windows' end), so its cost does not grow with them."""
    t = _register(app)
    schema = ident(app.schema)
    await app.pool.execute(
        f"INSERT INTO {schema}.concurrency_keys (key, rate_count, rate_period, rate_window,"
        "                                        rate_starts, next_run_at)"
        " SELECT 'spent-' || g, 1, interval '1 hour', date_trunc('hour', now()), 1,"
        "        date_trunc('hour', now()) + interval '1 hour'"
        " FROM generate_series(1, 2000) AS g"
    )
    await app.enqueue_many(
        [sweepq.JobSpec(t, concurrency_key=f"spent-{n}") for n in range(1, 2001)]
        + [sweepq.JobSpec(t) for _ in range(10)]
    )
    await app.queries.concurrency_wakeup_apply(app.pool, 100_000)
    await app.pool.execute(f"ANALYZE {schema}.concurrency_keys")
    keys = await row_versions(app, "concurrency_keys")
    async with app.pool.acquire() as c:
        tx = c.transaction()
        await tx.start()
        try:
            plan = await c.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + app.queries.sql["job_claim"],
                ["default"], 10, "w", 30.0, True,
            )  # fmt: skip
        finally:
            await tx.rollback()
    assert '"Relation Name": "concurrency_keys"' in plan
    # The walk's index scan returns no key (every spent key lies past now()).
    assert '"Index Name": "concurrency_keys_ready"' in plan
    assert await row_versions(app, "concurrency_keys") == keys  # the wake-ups left them in place
    assert len(await claim(app, 10)) == 10


@pytest.mark.fault
async def test_two_worker_processes_never_start_more_than_the_rate_in_a_window(
    app: sweepq.App,
) -> None:
    """Two worker processes (4 slots each) work 24 jobs of a key limited to 4 starts per
    second: every one-second window (aligned on the second) holds at most 4 starts, by the
    start times the claims wrote, and the work spans at least 6 windows."""

    @app.task(name="noop")  # the workers' own (runtime_proc.py)
    async def noop(ctx: sweepq.Context) -> None:
        return None

    await app.set_rate_limit("api", 4, per=1.0)
    await app.enqueue_many(
        [sweepq.JobSpec("noop", concurrency_key="api") for _ in range(24)]
        + [sweepq.JobSpec("noop") for _ in range(20)]
    )
    with runtime_workers(app, 2):
        with anyio.fail_after(30):
            while await app.pool.fetchval(
                f"SELECT count(*) FROM {ident(app.schema)}.jobs WHERE state <> 'completed'"
            ):
                await anyio.sleep(0.1)
    starts = await app.pool.fetch(
        "SELECT floor(extract(epoch FROM attempted_at))::bigint"
        f" FROM {ident(app.schema)}.jobs WHERE concurrency_key = 'api'"
    )
    per_window = Counter(r[0] for r in starts)
    assert len(starts) == 24
    assert max(per_window.values()) <= 4, per_window
    assert len(per_window) >= 6, per_window


async def test_doctor_top_and_the_dashboard_show_a_spent_rate_and_the_oldest_wait(
    app: App,
) -> None:
    t = _register(app)
    await app.set_rate_limit("api", 2, per=HOUR)
    await app.enqueue_many([sweepq.JobSpec(t, concurrency_key="api") for _ in range(5)])
    await app.pool.execute(
        f"UPDATE {ident(app.schema)}.jobs SET run_at = now() - interval '10 minutes'"
    )
    assert len(await claim(app, 10)) == 2

    diagnosis = await diagnose(app)
    [key] = diagnosis.keys
    assert (key.rate_count, key.rate_seconds, key.rate_used, key.due) == (2, 3600.0, 2, 3)
    assert key.rate_binding
    assert key.oldest_due_seconds is not None
    assert 590 <= key.oldest_due_seconds <= 900
    assert any("rate spent for this window (2/2 per 1.0h): 3 due jobs wait" in f.message
               for f in diagnosis.findings)  # fmt: skip

    [busiest] = await top_concurrency_key_busiest(app.queries, app.pool)
    assert (busiest.rate_used, busiest.rate_count, busiest.rate_binding) == (2, 2, True)
    assert busiest.oldest_due_seconds == pytest.approx(key.oldest_due_seconds, abs=60)

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(app)), base_url="http://127.0.0.1:8080"
    ) as c:
        page = await c.get("/keys")
    assert page.status_code == 200
    assert "rate spent" in page.text
    assert "2/2 per 1.0h" in page.text
