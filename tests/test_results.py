"""Job results: a handler's JSON return value is kept with its completed job, bounded in size;
a value that cannot be kept fails the execution like an exception; retention removes it with
the job."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

import sweepq
from factories import backdate_jobs, count_rows
from sweepq.cli.main import cli
from sweepq.core.ident import ident
from sweepq.core.queries import Conn
from sweepq.core.results import DEFAULT_RESULT_MAX_BYTES, encode_result, result_max_bytes
from sweepq.testing import perform


@dataclasses.dataclass
class Size:
    width: int
    height: int


async def run_all(app: sweepq.App) -> int:
    async with sweepq.Worker(app, concurrency=4) as worker:
        return await worker.run_until_idle()


async def get(app: sweepq.App, job_id: int) -> sweepq.Job:
    job = await app.get_job(job_id)
    assert job is not None
    return job


@pytest.mark.parametrize(
    ("returned", "stored"),
    [
        (
            {"width": 640, "tags": ["a", "b"], "ok": True},
            {"width": 640, "tags": ["a", "b"], "ok": True},
        ),
        ([1, 2.5, None, "x"], [1, 2.5, None, "x"]),
        ("done", "done"),
        (0, 0),
        (False, False),
        (1.5e16, 1.5e16),
        ("a\x00b", "a\x00b"),
        ((1, 2), [1, 2]),
        (Size(640, 480), {"width": 640, "height": 480}),
        (None, None),
    ],
    ids=["dict", "list", "str", "zero", "false", "big-float", "nul", "tuple", "dataclass", "none"],
)
async def test_an_async_handlers_return_value_is_its_jobs_result(
    app: sweepq.App, returned: Any, stored: Any
) -> None:
    @app.task(name="make")
    async def make(ctx: sweepq.Context) -> Any:
        return returned

    r = await app.enqueue(make)
    assert (await get(app, r.job_id)).result is None  # nothing until it completes
    await run_all(app)
    job = await get(app, r.job_id)
    assert job.state is sweepq.JobState.COMPLETED
    assert job.result == stored
    assert type(job.result) is type(stored)


async def test_a_def_handlers_return_value_is_its_jobs_result(app: sweepq.App) -> None:
    @app.task(name="make")
    def make(ctx: sweepq.Context, n: int) -> dict[str, int]:
        return {"n": n, "square": n * n}

    jobs = await app.enqueue_many([sweepq.JobSpec(make, {"n": n}) for n in range(5)])
    await run_all(app)
    for n, r in enumerate(jobs):
        assert (await get(app, r.job_id)).result == {"n": n, "square": n * n}


async def test_a_result_with_a_timeout_set_is_kept_too(app: sweepq.App) -> None:
    @app.task(name="make", timeout=30)
    async def make(ctx: sweepq.Context) -> str:
        return "in time"

    r = await app.enqueue(make)
    await run_all(app)
    assert (await get(app, r.job_id)).result == "in time"


async def test_a_result_over_the_limit_fails_the_execution_with_the_sizes_and_the_fix(
    dsn: str, app: sweepq.App
) -> None:
    small = sweepq.App(dsn, schema=app.schema, result_max_bytes=100)

    @small.task(name="big", max_attempts=2)
    async def big(ctx: sweepq.Context) -> str:
        return "x" * 200

    async with small:
        r = await small.enqueue(big)
        await run_all(small)
        job = await get(small, r.job_id)
        assert job.state is sweepq.JobState.AVAILABLE  # retried, as an exception would be
        assert job.result is None
        (error,) = job.errors
        assert error.kind == "exception"
        assert "InvalidResultError" in error.error
        assert "202 bytes, over the limit of 100 bytes" in error.error
        assert "result_max_bytes" in error.error
        assert "SWEEPQ_RESULT_MAX_BYTES" in error.error
        await small.retry(r.job_id)  # run the last attempt now
        await run_all(small)
        job = await get(small, r.job_id)
        assert job.state is sweepq.JobState.FAILED
        assert job.failure_reason == "max_attempts_exceeded"
        assert job.result is None


async def test_a_value_that_is_not_json_fails_the_execution_and_says_so(app: sweepq.App) -> None:
    @app.task(name="odd", max_attempts=1)
    def odd(ctx: sweepq.Context) -> object:
        return object()

    r = await app.enqueue(odd)
    await run_all(app)
    job = await get(app, r.job_id)
    assert job.state is sweepq.JobState.FAILED
    assert "not JSON-encodable" in job.errors[-1].error
    assert "or None to store nothing" in job.errors[-1].error


async def test_a_retry_policy_can_discard_a_result_that_cannot_be_kept(app: sweepq.App) -> None:
    policy = sweepq.RetryPolicy(discard_on=(sweepq.InvalidResultError,))

    @app.task(name="odd", retry=policy)
    async def odd(ctx: sweepq.Context) -> object:
        return {1, object()}

    r = await app.enqueue(odd)
    await run_all(app)
    job = await get(app, r.job_id)
    assert (job.state, job.failure_reason, job.attempt) == (sweepq.JobState.FAILED, "error", 1)


async def test_a_retried_job_has_no_result_until_it_completes_again(app: sweepq.App) -> None:
    runs: list[int] = []

    @app.task(name="count")
    async def count(ctx: sweepq.Context) -> int:
        runs.append(1)
        return len(runs)

    r = await app.enqueue(count)
    await run_all(app)
    assert (await get(app, r.job_id)).result == 1
    retried = await app.retry(r.job_id)
    assert retried is not None
    assert (retried.state, retried.result) == (sweepq.JobState.AVAILABLE, None)
    await run_all(app)
    assert (await get(app, r.job_id)).result == 2


async def test_a_job_that_fails_or_snoozes_keeps_no_result(app: sweepq.App) -> None:
    @app.task(name="later")
    async def later(ctx: sweepq.Context) -> str:
        raise sweepq.Snooze(3600)

    r = await app.enqueue(later)
    await run_all(app)
    job = await get(app, r.job_id)
    assert (job.state, job.snoozes, job.result) == (sweepq.JobState.AVAILABLE, 1, None)


async def test_retention_removes_results_with_their_jobs_and_dead_waiters(app: sweepq.App) -> None:
    @app.task(name="make")
    async def make(ctx: sweepq.Context, n: int) -> dict[str, int]:
        return {"n": n}

    old, recent = await app.enqueue_many([sweepq.JobSpec(make, {"n": n}) for n in range(2)])
    await run_all(app)
    await backdate_jobs(app, timedelta(days=2), "finished_at", ids=[old.job_id])
    # A waiter that died long ago, and one that renewed its row just now.
    table = f"{ident(app.schema)}.job_waiters"
    await app.pool.execute(
        f"INSERT INTO {table} (job_id, renewed_at)"
        " VALUES ($1, now() - interval '2 days'), ($1, now())",
        recent.job_id,
    )
    removed = await app.prune(older_than=timedelta(days=1))
    assert (removed["jobs"], removed["job_waiters"]) == (1, 1)
    assert await app.get_job(old.job_id) is None
    assert (await get(app, recent.job_id)).result == {"n": 1}
    assert await count_rows(app, "job_waiters") == 1


async def test_a_live_waiter_is_never_pruned_even_by_a_zero_cutoff(
    tx_app: sweepq.App, conn: Conn
) -> None:
    table = f"{ident(tx_app.schema)}.job_waiters"
    await conn.execute(
        f"INSERT INTO {table} (job_id, renewed_at) VALUES (1, now() - interval '10 minutes')"
    )
    assert (await tx_app.prune(older_than=timedelta(0), conn=conn))["job_waiters"] == 0


async def test_get_job_reads_a_result_on_the_callers_connection(
    tx_app: sweepq.App, conn: Conn
) -> None:
    table = f"{ident(tx_app.schema)}.jobs"
    job_id = await conn.fetchval(
        f"INSERT INTO {table} (task, queue, max_attempts, state, finished_at, result)"
        """ VALUES ('t', 'default', 1, 'completed', now(), '{"b": 1, "a": [1.0, 2]}')"""
        " RETURNING id"
    )
    job = await tx_app.get_job(job_id, conn=conn)
    assert job is not None
    assert job.result == {"b": 1, "a": [1.0, 2]}
    assert list(job.result) == ["b", "a"]  # json, not jsonb: as written


def test_the_result_limit_defaults_to_64_kib_and_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SWEEPQ_RESULT_MAX_BYTES", raising=False)
    assert result_max_bytes(None) == DEFAULT_RESULT_MAX_BYTES == 65_536
    assert sweepq.App("postgresql://x/y").result_max_bytes == 65_536
    monkeypatch.setenv("SWEEPQ_RESULT_MAX_BYTES", "1000")
    assert sweepq.App("postgresql://x/y").result_max_bytes == 1000
    assert sweepq.App("postgresql://x/y", result_max_bytes=10).result_max_bytes == 10


@pytest.mark.parametrize(
    ("given", "env", "named"),
    [
        (0, None, "result_max_bytes"),
        (16 * 1_048_576 + 1, None, "result_max_bytes"),
        (1.5, None, "result_max_bytes"),
        (True, None, "result_max_bytes"),
        (None, "lots", "SWEEPQ_RESULT_MAX_BYTES"),
        (None, "-5", "SWEEPQ_RESULT_MAX_BYTES"),
        (None, "0", "SWEEPQ_RESULT_MAX_BYTES"),
    ],
)
def test_a_result_limit_out_of_range_is_refused_naming_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, given: object, env: str | None, named: str
) -> None:
    if env is None:
        monkeypatch.delenv("SWEEPQ_RESULT_MAX_BYTES", raising=False)
    else:
        monkeypatch.setenv("SWEEPQ_RESULT_MAX_BYTES", env)
    with pytest.raises(sweepq.ConfigurationError, match=rf"^{named} must be a whole number"):
        sweepq.App("postgresql://x/y", result_max_bytes=given)  # type: ignore[arg-type]  # bad on purpose


def test_encoding_a_result_keeps_none_as_nothing_and_checks_the_size() -> None:
    assert encode_result(None, task="t", max_bytes=1) is None
    assert encode_result({"a": 1}, task="t", max_bytes=7) == '{"a":1}'
    with pytest.raises(sweepq.InvalidResultError, match="8 bytes, over the limit of 7 bytes"):
        encode_result({"a": 10}, task="t", max_bytes=7)
    with pytest.raises(sweepq.InvalidResultError, match="UnicodeEncodeError"):
        encode_result("\ud800", task="t", max_bytes=100)
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(sweepq.InvalidResultError, match="RecursionError"):
        encode_result(looped, task="t", max_bytes=100)


async def test_perform_says_what_the_worker_would_do_with_a_result(app: sweepq.App) -> None:
    @app.task(name="fine")
    async def fine(ctx: sweepq.Context) -> dict[str, int]:
        return {"n": 1}

    @app.task(name="odd")
    async def odd(ctx: sweepq.Context) -> object:
        return object()

    performed = await perform(app, fine)
    assert (performed.outcome, performed.returned, performed.raised) == (
        "completed",
        {"n": 1},
        None,
    )
    performed = await perform(app, odd)
    assert performed.outcome == "retry"
    assert isinstance(performed.raised, sweepq.InvalidResultError)


async def test_sweepq_jobs_show_prints_the_result_as_json(app: sweepq.App) -> None:
    @app.task(name="make")
    async def make(ctx: sweepq.Context) -> dict[str, Any]:
        return {"width": 640, "tags": ["a"]}

    r = await app.enqueue(make)
    await run_all(app)
    runner = CliRunner(env={"SWEEPQ_DSN": None, "DATABASE_URL": None, "COLUMNS": "200"})
    args = ["jobs", "show", str(r.job_id), "--dsn", app.dsn, "--schema", app.schema]
    shown = await anyio.to_thread.run_sync(lambda: runner.invoke(cli, args))
    assert shown.exit_code == 0, shown.output
    lines = [line.split(maxsplit=1) for line in shown.stdout.splitlines()]
    assert ["result", '{"width":640,"tags":["a"]}'] in lines
