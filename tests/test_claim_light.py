"""The light claim (`job_claim_light`): the plain claim while no concurrency key is in play.

It must take exactly what the full claim takes when no key is in play, and nothing at all when
one is (a key with room whose place is due, or a wake-up not yet folded), saying so; a worker
switches between the two without a round trip of its own.
"""

from __future__ import annotations

from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sweepq
from statements import claim, finish
from sweepq.core.ident import ident
from sweepq.core.queries import Conn
from sweepq.core.rows import ClaimBatch

QUEUES = ["a", "b", "c"]


class Rollback(Exception):
    """Raised to roll a savepoint back."""


async def _claim_rolled_back(
    app: sweepq.App, conn: Conn, *, light: bool, limit: int, suspect_ok: bool
) -> tuple[list[int], list[int], ClaimBatch]:
    """One claim inside a savepoint that is rolled back: the ids started, the ids failed past
    their deadline, and the batch."""
    schema = ident(app.schema)
    try:
        async with conn.transaction():
            batch = await app.queries.job_claim(
                conn, QUEUES, limit, "w", 30.0, suspect_ok, light=light
            )
            failed = await conn.fetch(
                f"SELECT id FROM {schema}.jobs WHERE failure_reason = 'deadline_exceeded'"
                " ORDER BY id"
            )
            raise Rollback((sorted(j.id for j in batch.jobs), [r[0] for r in failed], batch))
    except Rollback as done:
        return done.args[0]  # type: ignore[no-any-return]


_jobs = st.lists(
    st.fixed_dictionaries(
        {
            "queue": st.sampled_from(QUEUES),
            "priority": st.integers(0, 3),
            # seconds from now: due (<= 0) or scheduled later
            "run_at": st.sampled_from([-60, -1, 0, 30]),
            "deadline": st.sampled_from([None, -5, 3600]),
            "crashes": st.sampled_from([0, 0, 0, 1]),
        }
    ),
    max_size=30,
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    jobs=_jobs,
    paused=st.sets(st.sampled_from(QUEUES), max_size=2),
    limit=st.integers(1, 12),
    suspect_ok=st.booleans(),
)
async def test_with_no_key_in_play_the_light_claim_takes_what_the_full_claim_takes(
    tx_app: sweepq.App,
    conn: Conn,
    jobs: list[dict[str, Any]],
    paused: set[str],
    limit: int,
    suspect_ok: bool,
) -> None:
    schema = ident(tx_app.schema)
    try:
        async with conn.transaction():
            for job in jobs:
                await conn.execute(
                    f"INSERT INTO {schema}.jobs (task, queue, priority, args, max_attempts,"
                    "                            run_at, deadline_at, crashes)"
                    " VALUES ('t', $1, $2, '{}', 5, now() + make_interval(secs => $3),"
                    "         now() + make_interval(secs => $4), $5)",
                    job["queue"], job["priority"], job["run_at"], job["deadline"], job["crashes"],
                )  # fmt: skip
            for queue in paused:
                await conn.execute(f"INSERT INTO {schema}.queue_pauses (queue) VALUES ($1)", queue)
            full = await _claim_rolled_back(
                tx_app, conn, light=False, limit=limit, suspect_ok=suspect_ok
            )
            light = await _claim_rolled_back(
                tx_app, conn, light=True, limit=limit, suspect_ok=suspect_ok
            )
            assert light[:2] == full[:2]
            # Neither saw a key in play: each advises the light claim next.
            assert full[2].light
            assert light[2].light
            assert not full[2].woke
            assert not light[2].woke
            raise Rollback
    except Rollback:
        pass


async def _light(app: sweepq.App, limit: int = 10) -> ClaimBatch:
    return await app.queries.job_claim(app.pool, ["default"], limit, "w", 30.0, light=True)


async def _full(app: sweepq.App, limit: int = 10) -> ClaimBatch:
    return await app.queries.job_claim(app.pool, ["default"], limit, "w", 30.0)


async def test_a_light_claim_that_finds_a_key_in_play_claims_nothing_and_says_so(
    app: sweepq.App,
) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    await app.enqueue_many([sweepq.JobSpec(t) for _ in range(3)])
    assert (await _full(app, 1)).light  # no key anywhere

    # An enqueue of a keyed job leaves a wake-up: a key is in play.
    keyed = await app.enqueue(t, concurrency_key="tenant")
    batch = await _light(app)
    assert batch.jobs == []
    assert batch.woke
    assert not batch.light
    # The full claim folds the wake-up (the key is claimable from its next claim on)...
    batch = await _full(app)
    assert len(batch.jobs) == 2
    assert batch.woke
    assert not batch.light
    # ... which takes the keyed job.
    batch = await _full(app)
    assert [j.id for j in batch.jobs] == [keyed.job_id]
    assert not batch.light

    # The key, with nothing left waiting, is read once more and leaves the walk; then no key is
    # in play and the light claim is advised again.
    batch = await _full(app)
    assert batch.jobs == []
    assert not batch.light
    batch = await _full(app)
    assert batch.jobs == []
    assert batch.light


async def test_a_key_at_its_limit_leaves_the_claim_light_until_a_slot_frees(
    app: sweepq.App,
) -> None:
    @app.task(name="t")
    async def t(ctx: sweepq.Context) -> None:
        return None

    await app.set_concurrency_limit("one", 1)
    await app.enqueue_many([sweepq.JobSpec(t, concurrency_key="one") for _ in range(2)])
    running = await claim(app, 10)
    assert len(running) == 1
    while not (batch := await _full(app)).light:  # folds what is left, reads the key once
        assert batch.jobs == []

    # The key is at its limit with a job waiting: not in play, so plain jobs are claimed light.
    await app.enqueue(t)
    batch = await _light(app)
    assert len(batch.jobs) == 1
    assert batch.light

    # Its running job ends: the key has room and a due job, and the light claim gives way.
    assert await finish(app, running[0])
    batch = await _light(app)
    assert batch.jobs == []
    assert batch.woke
    assert not batch.light
    assert len((await _full(app)).jobs) == 1


async def test_a_worker_claims_light_on_plain_work_and_fully_while_keys_are_in_play(
    app: sweepq.App,
) -> None:
    done: list[str] = []
    running: set[str] = set()
    overlaps: list[str] = []

    @app.task(name="t")
    async def t(ctx: sweepq.Context, name: str) -> None:
        if name.startswith("keyed"):
            if running:
                overlaps.append(name)
            running.add(name)
            await anyio.sleep(0.01)
            running.discard(name)
        done.append(name)

    calls = {"light": 0, "full": 0}
    claim = app.queries.job_claim

    async def counted(*args: Any, light: bool = False, **kwargs: Any) -> ClaimBatch:
        calls["light" if light else "full"] += 1
        return await claim(*args, light=light, **kwargs)

    app.queries.job_claim = counted  # type: ignore[method-assign]  # on this instance only
    await app.set_concurrency_limit("one", 1)
    await app.enqueue_many([sweepq.JobSpec(t, {"name": f"plain-{i}"}) for i in range(300)])
    async with sweepq.Worker(app, concurrency=10) as worker:
        await worker.run_until_idle()
    plain_only = dict(calls)
    await app.enqueue_many(
        [sweepq.JobSpec(t, {"name": f"keyed-{i}"}, concurrency_key="one") for i in range(5)]
        + [sweepq.JobSpec(t, {"name": f"late-{i}"}) for i in range(100)]
    )
    async with sweepq.Worker(app, concurrency=10) as worker:
        await worker.run_until_idle()

    assert len(done) == 405
    assert overlaps == []
    # Plain work is claimed light after the first claim; keyed work brings full claims.
    assert plain_only["full"] <= 2, plain_only
    assert plain_only["light"] >= 25, plain_only
    assert calls["full"] - plain_only["full"] >= 5, calls
