"""The web dashboard over HTTP (its ASGI application, in the test's event loop): every page
against jobs in every state and a running sweep, filters and keyset paging, escaping, actions
and what they write, who may do what (token, auth callable, read-only), CSRF and cross-site
refusals, bad input, and the command that serves it."""

from __future__ import annotations

import contextlib
import logging
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.testclient import TestClient
from typer.testing import CliRunner

import sweepq
from factories import backdate_jobs, count_jobs, create_items
from sweepq.cli import cli, plugins
from sweepq.core import browse
from sweepq.core.ident import ident
from sweepq.core.jobs import JobId
from sweepq.sweeps.app import App
from sweepq.testing import drain
from sweepq.web import create_app, serve
from sweepq.web.charts import minute_chart
from sweepq.web.security import read_session
from sweepq.web.server import check_host, is_loopback

TOKEN = "s3cret-token-for-tests"
ORIGIN = "http://127.0.0.1:8080"
PAGES = ["/", "/jobs", "/sweeps", "/keys", "/cron", "/queues"]
FRAGMENTS = ["overview", "queues", "sweeps", "keys", "cron"]
ARGS_WITH_SCRIPT = {"note": "<script>alert('x')</script>"}


@contextlib.asynccontextmanager
async def client(web: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """A client of `web`, as a browser on the same origin would be (no lifespan: the test's App
    is open already)."""
    transport = httpx.ASGITransport(app=web)
    async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as c:
        yield c


def csrf_of(html: str) -> str:
    """The session's CSRF token, as the page gives it to its forms (and in its head)."""
    found = re.search(r'name="csrf" (?:value|content)="([^"]+)"', html)
    assert found is not None, "the page has no CSRF token"
    return found.group(1)


async def csrf(c: httpx.AsyncClient, path: str = "/jobs") -> str:
    page = await c.get(path)
    assert page.status_code == 200, page.text
    return csrf_of(page.text)


def flash(html: str) -> str | None:
    found = re.search(r'<p class="flash [a-z]+" role="status">([^<]*)</p>', html)
    return found.group(1) if found else None


def ids_in(html: str) -> list[int]:
    """The job ids a listing shows, in order."""
    return [int(i) for i in re.findall(r'<td class="num"><a href="[^"]*/jobs/(\d+)">', html)]


def register_tasks(app: App) -> None:
    @app.task(name="ok")
    async def ok(ctx: sweepq.Context, note: str = "") -> None:
        return None

    @app.task(name="boom", max_attempts=1)
    async def boom(ctx: sweepq.Context, note: str = "") -> None:
        raise RuntimeError("boom <b>bold</b>")


class Touch(sweepq.TableSweep):
    name = "touch"
    key = ("id",)
    queue = "sweeps"

    async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
        return None


async def start_sweep(app: App, items: int = 50) -> int:
    """A running sweep run (no worker serves its queue, so it stays at its first link)."""
    await create_items(app, items)
    app.register_sweep(type("Touch", (Touch,), {"table": f"{app.schema}.items"}))
    return (await app.start_sweep("touch")).run_id


async def finished_jobs(app: App) -> dict[str, list[JobId]]:
    """Completed, failed (one with `<script>` in its args) and cancelled jobs, by state."""
    register_tasks(app)
    done = [(await app.enqueue("ok")).job_id for _ in range(3)]
    failed = [(await app.enqueue("boom", ARGS_WITH_SCRIPT)).job_id for _ in range(2)]
    assert await drain(app, queues=["default"]) == {"completed": 3, "failed": 2}
    cancelled = (await app.enqueue("ok", queue="mail")).job_id
    await app.cancel(cancelled)
    return {"completed": done, "failed": failed, "cancelled": [cancelled]}


@contextlib.asynccontextmanager
async def everything(app: App) -> AsyncIterator[dict[str, Any]]:
    """Jobs in every state (a running one held by a live worker), a key at its limit, a
    running sweep run; their ids."""
    made: dict[str, Any] = await finished_jobs(app)
    gate = anyio.Event()

    @app.task(name="pay", queue="payments")
    async def pay(ctx: sweepq.Context) -> None:
        await gate.wait()

    made["available"] = [(await app.enqueue("ok", queue="mail")).job_id]
    made["scheduled"] = [(await app.enqueue("ok", queue="mail", delay=3600)).job_id]
    await app.set_concurrency_limit("stripe", 1)
    made["keyed"] = [(await app.enqueue("pay", concurrency_key="stripe")).job_id for _ in range(3)]
    made["run"] = await start_sweep(app)
    worker = sweepq.Worker(
        app, queues=["payments"], concurrency=1, poll_seconds=0.1, maintenance_seconds=0.2,
        leader_ttl_seconds=2.0,
    )  # fmt: skip
    async with worker, anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        with anyio.fail_after(30):
            while await count_jobs(app, "running") != 1:
                await anyio.sleep(0.05)
        try:
            yield made
        finally:
            gate.set()
            worker.stop()


# pages ------------------------------------------------------------------------------------------


async def test_every_page_renders_with_jobs_in_every_state_and_a_running_sweep(
    app: App,
) -> None:
    async with everything(app) as made, client(create_app(app)) as c:
        await app.pool.execute(f"ANALYZE {ident(app.schema)}.jobs")  # for the estimate
        run = made["run"]
        failed = made["failed"][0]
        pages = {path: await c.get(path) for path in [*PAGES, f"/sweeps/{run}", f"/jobs/{failed}"]}
        for path, page in pages.items():
            assert page.status_code == 200, (path, page.text)
            assert page.headers["content-type"].startswith("text/html")
        overview = pages["/"].text
        for queue in ("default", "mail", "payments", "sweeps"):
            assert f">{queue}</a>" in overview
        assert "stripe" in overview
        assert "at its limit" in overview
        assert "<svg" in overview
        assert "≈" in overview
        assert f'href="/sweeps/{run}"' in overview
        assert "touch" in overview
        assert "leader" in overview  # the worker that leads maintenance
        states = re.findall(r'class="state state-([a-z]+)"', pages["/jobs"].text)
        assert {"available", "running", "completed", "failed", "cancelled"} <= set(states)
        assert "touch" in pages["/sweeps"].text
        assert "<progress" in pages["/sweeps"].text
        assert "Pause" in pages[f"/sweeps/{run}"].text
        link = await app.pool.fetchval(
            f"SELECT id FROM {ident(app.schema)}.jobs WHERE idempotency_scope = $1",
            f"sweep-link:{run}",
        )
        assert f'<a href="/jobs/{link}">{link}</a>' in pages[f"/sweeps/{run}"].text
        assert "stripe" in pages["/keys"].text
        for name in FRAGMENTS:
            fragment = await c.get(f"/fragments/{name}")
            assert fragment.status_code == 200, (name, fragment.text)
            assert "<html" not in fragment.text
        for name, query in (("sweep", f"id={run}"), ("job", f"id={failed}")):
            assert (await c.get(f"/fragments/{name}?{query}")).status_code == 200


async def test_pages_of_an_empty_schema_say_there_is_nothing_yet(app: App) -> None:
    async with client(create_app(app)) as c:
        for path in PAGES:
            page = await c.get(path)
            assert page.status_code == 200, (path, page.text)
        assert "No job matches" in (await c.get("/jobs")).text
        assert "No sweep has run" in (await c.get("/sweeps")).text
        assert "No cron schedule" in (await c.get("/cron")).text


async def test_a_job_page_shows_args_results_and_errors_as_text(app: App) -> None:
    made = await finished_jobs(app)
    async with client(create_app(app)) as c:
        page = (await c.get(f"/jobs/{made['failed'][0]}")).text
        listing = (await c.get("/jobs?state=failed")).text
    assert "<script>alert" not in page
    assert "<b>bold</b>" not in page
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page
    assert "RuntimeError: boom &lt;b&gt;bold&lt;/b&gt;" in page  # the traceback, escaped
    assert "Traceback (most recent call last)" in page
    assert "<b>bold</b>" not in listing
    assert "&lt;b&gt;bold" in listing


async def test_pages_send_security_headers_and_never_show_the_dsn(app: App) -> None:
    async with client(create_app(app)) as c:
        for path in [*PAGES, "/static/sweepq.js", "/jobs/999999", "/no-such-page"]:
            response = await c.get(path)
            headers = response.headers
            assert "script-src 'self'" in headers["content-security-policy"], path
            assert "unsafe-inline" not in headers["content-security-policy"]
            assert headers["x-frame-options"] == "DENY"
            assert headers["referrer-policy"] == "same-origin"
            assert app.dsn not in response.text
            assert "postgres@" not in response.text
            assert "<script>" not in response.text  # no inline script: only src= files


async def test_the_page_script_polls_fragments_only_while_the_tab_is_visible(app: App) -> None:
    async with client(create_app(app)) as c:
        script = (await c.get("/static/sweepq.js")).text
        overview = (await c.get("/")).text
    assert "document.hidden" in script
    assert "visibilitychange" in script
    assert "data-confirm" in script
    assert "window.confirm" in script
    assert 'data-live="/fragments/overview' in overview


# jobs: filters and paging -----------------------------------------------------------------------


async def test_the_jobs_list_filters_by_state_queue_task_key_group_run_and_time(
    app: App,
) -> None:
    made = await finished_jobs(app)
    keyed = (await app.enqueue("ok", concurrency_key="acme", queue="mail")).job_id
    grouped = (await app.enqueue("ok", group="import-7")).job_id
    run = await start_sweep(app, items=3)
    async with client(create_app(app)) as c:

        async def shown(query: str) -> list[int]:
            page = await c.get(f"/jobs?{query}")
            assert page.status_code == 200, page.text
            return ids_in(page.text)

        assert await shown("state=failed") == sorted(made["failed"], reverse=True)
        assert await shown("state=completed&task=ok") == sorted(made["completed"], reverse=True)
        assert await shown("state=cancelled") == made["cancelled"]
        assert await shown("state=available&queue=mail") == [keyed]
        assert await shown("key=acme") == [keyed]
        assert await shown("state=available&key=acme") == [keyed]
        assert await shown("group=import-7") == [grouped]
        assert await shown("task=boom&queue=mail") == []
        assert await shown(f"run={run}") == []  # the run has not fanned out yet: no leaves
        now = datetime.now(UTC)
        later = (now + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
        earlier = (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
        assert await shown(f"since={later}") == []
        assert len(await shown(f"since={earlier}")) == len(await shown(""))
        assert await shown(f"until={earlier}") == []


async def test_the_jobs_list_pages_by_keyset_from_the_last_id_shown(app: App) -> None:
    register_tasks(app)
    ids = [e.job_id for e in await app.enqueue_many([sweepq.JobSpec("ok", {})] * 120)]
    async with client(create_app(app)) as c:
        first = await c.get("/jobs")
        cursor = re.search(r'href="/jobs\?before=(\d+)">older', first.text)
        assert cursor is not None
        second = await c.get(f"/jobs?before={cursor.group(1)}")
        third_cursor = re.search(r'href="/jobs\?before=(\d+)">older', second.text)
        assert third_cursor is not None
        third = await c.get(f"/jobs?before={third_cursor.group(1)}")
    shown = ids_in(first.text) + ids_in(second.text) + ids_in(third.text)
    assert shown == sorted(ids, reverse=True)
    assert "older" not in third.text.split("pager")[-1]  # the end


async def test_a_listing_stops_its_walk_at_its_bound_and_goes_on_from_there(app: App) -> None:
    made = await finished_jobs(app)
    await app.enqueue_many([sweepq.JobSpec("ok", {})] * 30)  # newer, none of them failed
    async with app.connection() as conn:
        page = await browse.job_browse(
            app.queries, conn, browse.JobFilter(state=sweepq.JobState.FAILED), scan=10
        )
        assert page.rows == []
        assert page.scanned == 10
        assert page.next_before is not None
        rest = await browse.job_browse(
            app.queries,
            conn,
            browse.JobFilter(state=sweepq.JobState.FAILED),
            before=page.next_before,
            scan=100,
        )
    assert [r.id for r in rest.rows] == sorted(made["failed"], reverse=True)
    assert rest.next_before is None  # the walk reached the first job


async def test_a_short_page_links_to_where_its_walk_stopped(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = await finished_jobs(app)
    newer = await app.enqueue_many([sweepq.JobSpec("ok", {})] * 10)
    monkeypatch.setattr(browse, "PAGE_SCAN", 5)
    async with client(create_app(app)) as c:
        page = (await c.get("/jobs?state=failed")).text
        assert ids_in(page) == []
        assert "searched" in page
        cursor = re.search(r'href="/jobs\?before=(\d+)&amp;state=failed">older', page)
        assert cursor is not None
        assert int(cursor.group(1)) == newer[-5].job_id
        monkeypatch.setattr(browse, "PAGE_SCAN", 100)
        rest = (await c.get(f"/jobs?before={cursor.group(1)}&state=failed")).text
    assert ids_in(rest) == sorted(made["failed"], reverse=True)


async def test_a_groups_failed_jobs_are_listed_however_old_from_the_groups_index(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    register_tasks(app)
    specs = [sweepq.JobSpec("boom", {}, group="import-7")] * 3
    old = [e.job_id for e in await app.enqueue_many(specs)]
    await drain(app)
    await app.enqueue_many([sweepq.JobSpec("ok", {}, group="import-7")] * 20)
    monkeypatch.setattr(browse, "PAGE_SCAN", 5)
    async with client(create_app(app)) as c:
        page = (await c.get("/jobs?group=import-7&state=failed")).text
        assert ids_in(page) == sorted(old, reverse=True)
        assert "searched" not in page
        walked = (await c.get("/jobs?group=import-7&state=completed")).text
        assert len(ids_in(walked)) == 0  # the 20 newest are available: not completed


async def test_the_chart_marks_the_part_of_the_hour_it_did_not_read(app: App) -> None:
    made = await finished_jobs(app)  # finished in the last hour: 3 completed, 2 failed
    await backdate_jobs(app, timedelta(minutes=30), "finished_at", ids=made["completed"])
    async with app.connection() as conn:
        whole = await browse.job_finished_per_minute(app.queries, conn, limit=100)
        part = await browse.job_finished_per_minute(app.queries, conn, limit=3)
        at = await conn.fetchval("SELECT now()")
    assert whole.cut is None
    assert sum(m.completed for m in whole.minutes) == 3
    assert sum(m.failed for m in whole.minutes) == 2
    assert part.cut is not None  # the first jobs of the hour were not among the 3 read
    assert minute_chart(whole, at).unread_width == 0
    assert minute_chart(part, at).unread_width > 0


# actions ----------------------------------------------------------------------------------------


async def test_retry_and_cancel_of_a_job_change_the_database_and_log_who_did_it(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    made = await finished_jobs(app)
    failed = made["failed"][0]
    waiting = (await app.enqueue("ok", queue="mail")).job_id
    caplog.set_level(logging.INFO, logger="sweepq.web")
    async with client(create_app(app)) as c:
        token = await csrf(c, f"/jobs/{failed}")
        retried = await c.post(f"/jobs/{failed}/retry", data={"csrf": token})
        assert retried.status_code == 303
        assert retried.headers["location"] == f"/jobs/{failed}"
        assert flash((await c.get(f"/jobs/{failed}")).text) == f"Job {failed} retried: available."
        cancelled = await c.post(
            f"/jobs/{waiting}/cancel", data={"csrf": token, "back": "/jobs?queue=mail"}
        )
        assert cancelled.headers["location"] == "/jobs?queue=mail"
        again = await c.post(f"/jobs/{waiting}/cancel", data={"csrf": token})
        assert "not cancelled" in (flash((await c.get("/jobs")).text) or "")
        assert again.status_code == 303
    job = await app.get_job(failed)
    assert job is not None
    assert job.state == "available"
    assert job.attempt == 0
    ended = await app.get_job(waiting)
    assert ended is not None
    assert ended.state == "cancelled"
    lines = [r.getMessage() for r in caplog.records if r.name == "sweepq.web"]
    assert f"user local retried job {failed}" in lines
    assert f"user local cancelled job {waiting}" in lines


async def test_an_action_goes_back_only_to_a_page_of_the_dashboard(app: App) -> None:
    made = await finished_jobs(app)
    job = made["failed"][0]
    async with client(create_app(app)) as c:
        token = await csrf(c)
        for elsewhere in ("https://evil.example/", "//evil.example/x", "/\\evil.example"):
            answer = await c.post(f"/jobs/{job}/retry", data={"csrf": token, "back": elsewhere})
            assert answer.headers["location"] == f"/jobs/{job}"


async def test_batch_actions_show_their_count_first_and_touch_only_the_filters_jobs(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    made = await finished_jobs(app)
    other = (await app.enqueue("boom", {}, queue="mail")).job_id
    await drain(app, queues=["mail"])
    waiting = [(await app.enqueue("ok", queue="mail")).job_id for _ in range(3)]
    kept = (await app.enqueue("ok", queue="default")).job_id
    caplog.set_level(logging.INFO, logger="sweepq.web")
    async with client(create_app(app)) as c:
        confirm = await c.get("/jobs/retry?state=failed&queue=default")
        assert confirm.status_code == 200
        assert "<strong>2</strong> failed or cancelled jobs will be retried" in confirm.text
        token = csrf_of(confirm.text)
        assert 'name="queue" value="default"' in confirm.text
        answer = await c.post(
            "/jobs/retry", data={"csrf": token, "state": "failed", "queue": "default"}
        )
        assert answer.status_code == 303
        assert answer.headers["location"] == "/jobs?state=failed&queue=default"
        assert "Retried 2 jobs" in (flash((await c.get("/jobs")).text) or "")
        cancel = await c.get("/jobs/cancel?queue=mail")
        assert "<strong>3</strong> available or running jobs" in cancel.text
        await c.post("/jobs/cancel", data={"csrf": token, "queue": "mail"})
    for job_id in made["failed"]:
        job = await app.get_job(job_id)
        assert job is not None
        assert job.state == "available"
    failed_elsewhere = await app.get_job(other)
    assert failed_elsewhere is not None
    assert failed_elsewhere.state == "failed"
    for job_id in waiting:
        job = await app.get_job(job_id)
        assert job is not None
        assert job.state == "cancelled"
    untouched = await app.get_job(kept)
    assert untouched is not None
    assert untouched.state == "available"
    lines = [r.getMessage() for r in caplog.records if r.name == "sweepq.web"]
    assert "user local retried 2 jobs matching state=failed queue=default" in lines
    assert "user local cancelled 3 jobs matching queue=mail" in lines


async def test_a_batch_action_changes_at_most_one_batch(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    register_tasks(app)
    await app.enqueue_many([sweepq.JobSpec("ok", {}, queue="mail")] * 5)
    monkeypatch.setattr(browse, "BATCH_LIMIT", 2)
    async with client(create_app(app)) as c:
        confirm = (await c.get("/jobs/cancel?queue=mail")).text
        assert "<strong>2</strong>" in confirm
        assert "repeat for the rest" in confirm
        await c.post("/jobs/cancel", data={"csrf": csrf_of(confirm), "queue": "mail"})
    assert await count_jobs(app, "cancelled") == 2
    assert await count_jobs(app, "available") == 3


async def test_sweep_runs_pause_resume_and_cancel_from_their_page(app: App) -> None:
    run = await start_sweep(app)
    async with client(create_app(app)) as c:
        token = await csrf(c, f"/sweeps/{run}")
        for verb, state in (("pause", "paused"), ("resume", "running"), ("cancel", "cancelled")):
            answer = await c.post(f"/sweeps/{run}/{verb}", data={"csrf": token})
            assert answer.status_code == 303
            assert answer.headers["location"] == f"/sweeps/{run}"
            status = await app.sweep_status(run)
            assert status is not None
            assert status.state == state
        retried = await c.post(f"/sweeps/{run}/retry-failed", data={"csrf": token})
        assert retried.status_code == 303
        assert "0 failed or cancelled items retried" in (flash((await c.get("/")).text) or "")
        unknown = await c.post(f"/sweeps/{run}/explode", data={"csrf": token})
        assert unknown.status_code == 400
        missing = await c.post("/sweeps/424242/pause", data={"csrf": token})
        assert "There is no sweep run 424242" in (flash((await c.get("/")).text) or "")
        assert missing.status_code == 303


async def test_a_concurrency_limit_is_set_from_the_keys_page(app: App) -> None:
    await app.set_concurrency_limit("acme/eu", 3)
    async with client(create_app(app)) as c:
        page = (await c.get("/keys")).text
        assert 'action="/keys/acme/eu/limit"' in page
        token = csrf_of(page)
        await c.post("/keys/acme/eu/limit", data={"csrf": token, "limit": "7"})
        await c.post("/keys/-/limit", data={"csrf": token, "key": "stripe", "limit": "2"})
        limits = {k.key: k.max_running for k in await app.concurrency_keys()}
        assert limits == {"acme/eu": 7, "stripe": 2}
        await c.post("/keys/stripe/limit", data={"csrf": token, "limit": ""})
        bad = await c.post("/keys/stripe/limit", data={"csrf": token, "limit": "-1"})
        assert bad.status_code == 400
    limits = {k.key: k.max_running for k in await app.concurrency_keys()}
    assert limits == {"acme/eu": 7, "stripe": None}


async def test_a_queue_is_paused_and_resumed_from_the_queues_page(app: App) -> None:
    @app.task(name="mail", queue="mail")
    async def mail(ctx: sweepq.Context) -> None:
        return None

    await app.enqueue(mail)
    async with client(create_app(app)) as c:
        page = (await c.get("/queues")).text
        assert 'action="/queues/mail/pause"' in page
        token = csrf_of(page)
        paused = await c.post("/queues/mail/pause", data={"csrf": token}, follow_redirects=True)
        assert "Queue &#39;mail&#39; paused" in paused.text
        [state] = await app.queues()
        assert state.pause is not None
        assert state.pause.reason == "paused by local (dashboard)"
        for path in ("/queues", "/"):
            shown = (await c.get(path)).text
            assert ">paused</span>" in shown, path
            assert 'action="/queues/mail/resume"' in shown, path
        bad = await c.post("/queues/mail/drop", data={"csrf": token})
        assert bad.status_code == 400
        await c.post("/queues/mail/resume", data={"csrf": token})
    assert (await app.queues())[0].pause is None


# who may do what --------------------------------------------------------------------------------


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SWEEPQ_WEB_TOKEN", TOKEN)
    return TOKEN


async def test_without_the_token_every_page_and_action_is_refused(app: App, token: str) -> None:
    made = await finished_jobs(app)
    failed = made["failed"][0]
    run = await start_sweep(app)
    async with client(create_app(app)) as c:
        for path in [*PAGES, f"/jobs/{failed}", f"/sweeps/{run}", "/jobs/retry"]:
            page = await c.get(path)
            assert page.status_code == 401, path
            assert 'name="token"' in page.text
            assert "RuntimeError" not in page.text
        for name in FRAGMENTS:
            assert (await c.get(f"/fragments/{name}")).status_code == 401
        token_field = csrf_of((await c.get("/login")).text)
        for path, data in [
            (f"/jobs/{failed}/retry", {}),
            (f"/jobs/{failed}/cancel", {}),
            ("/jobs/retry", {"state": "failed"}),
            ("/jobs/cancel", {}),
            (f"/sweeps/{run}/pause", {}),
            (f"/sweeps/{run}/cancel", {}),
            ("/keys/stripe/limit", {"limit": "1"}),
        ]:
            answer = await c.post(path, data={"csrf": token_field, **data})
            assert answer.status_code == 401, path
        wrong = await c.get("/jobs", headers={"authorization": "Bearer not-the-token"})
        assert wrong.status_code == 401
    job = await app.get_job(failed)
    assert job is not None
    assert job.state == "failed"
    status = await app.sweep_status(run)
    assert status is not None
    assert status.state == "running"
    assert await app.concurrency_keys() == []


async def test_without_sign_in_the_dashboard_answers_only_to_a_loopback_host(app: App) -> None:
    made = await finished_jobs(app)
    job = made["failed"][0]
    async with client(create_app(app)) as c:
        token = await csrf(c)
        for host in ("evil.example", "evil.example:8080", "192.0.2.1:8080", "localhost.evil"):
            page = await c.get("/jobs", headers={"host": host})
            assert page.status_code == 403, host
            assert "answers only to a loopback address" in page.text
            answer = await c.post(
                f"/jobs/{job}/retry", data={"csrf": token}, headers={"host": host}
            )
            assert answer.status_code == 403, host
        for host in ("localhost:8080", "[::1]:8080", "127.0.0.2", "app.localhost"):
            assert (await c.get("/jobs", headers={"host": host})).status_code == 200, host
    assert await count_jobs(app, "failed") == len(made["failed"])


async def test_the_token_signs_in_by_the_login_form_or_a_bearer_header(
    app: App, token: str, caplog: pytest.LogCaptureFixture
) -> None:
    made = await finished_jobs(app)
    caplog.set_level(logging.INFO, logger="sweepq.web")
    async with client(create_app(app)) as c:
        form = csrf_of((await c.get("/login?next=/jobs")).text)
        wrong = await c.post("/login", data={"csrf": form, "token": "nope", "next": "/jobs"})
        assert wrong.status_code == 401
        assert "not right" in wrong.text
        signed = await c.post(
            "/login", data={"csrf": form, "token": token, "name": "ada", "next": "/jobs"}
        )
        assert signed.status_code == 303
        assert signed.headers["location"] == "/jobs"
        cookie = signed.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=lax" in cookie
        assert "Path=/" in cookie
        page = await c.get("/jobs")
        assert page.status_code == 200
        assert "ada" in page.text
        await c.post(f"/jobs/{made['failed'][0]}/retry", data={"csrf": csrf_of(page.text)})
        out = await c.post("/logout", data={"csrf": csrf_of(page.text)})
        assert out.status_code == 303
        assert (await c.get("/jobs")).status_code == 401
    async with client(create_app(app)) as script:
        bearer = {"authorization": f"Bearer {token}"}
        assert (await script.get("/jobs", headers=bearer)).status_code == 200
        job = made["failed"][1]
        answer = await script.post(f"/jobs/{job}/retry", headers=bearer)  # no form: no CSRF
        assert answer.status_code == 303
    lines = [r.getMessage() for r in caplog.records if r.name == "sweepq.web"]
    assert f"user ada retried job {made['failed'][0]}" in lines
    assert f"user token retried job {made['failed'][1]}" in lines


async def test_a_session_cookie_signed_by_another_key_is_not_a_session(
    app: App, token: str
) -> None:
    async with client(create_app(app)) as c:
        form = csrf_of((await c.get("/login")).text)
        await c.post("/login", data={"csrf": form, "token": token})
        assert (await c.get("/jobs")).status_code == 200
        value = c.cookies["sweepq_session"]
        data, _, mac = value.partition(".")
        c.cookies.set("sweepq_session", f"{data}.{mac[::-1]}")
        assert (await c.get("/jobs")).status_code == 401


async def test_an_auth_callable_decides_who_may_use_the_dashboard(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    made = await finished_jobs(app)

    async def auth(request: Request) -> str | None:
        return request.headers.get("x-user")

    caplog.set_level(logging.INFO, logger="sweepq.web")
    async with client(create_app(app, auth=auth)) as c:
        refused = await c.get("/jobs")
        assert refused.status_code == 401
        assert "sign in there" in refused.text
        assert (await c.get("/fragments/overview")).status_code == 401
        grace = {"x-user": "grace"}
        page = await c.get("/jobs", headers=grace)
        assert page.status_code == 200
        assert "grace" in page.text
        job = made["failed"][0]
        anonymous = await c.post(f"/jobs/{job}/retry", data={"csrf": csrf_of(page.text)})
        assert anonymous.status_code == 401
        await c.post(f"/jobs/{job}/retry", data={"csrf": csrf_of(page.text)}, headers=grace)
    assert f"user grace retried job {job}" in [r.getMessage() for r in caplog.records]


async def test_a_cross_site_post_and_a_post_without_its_csrf_token_are_refused_and_write_nothing(
    app: App,
) -> None:
    made = await finished_jobs(app)
    job = made["failed"][0]
    async with client(create_app(app)) as c:
        token = await csrf(c)
        attempts: list[tuple[dict[str, str], Mapping[str, str]]] = [
            ({}, {}),  # no token
            ({"csrf": "forged"}, {}),
            ({"csrf": token}, {"origin": "https://evil.example"}),
            ({"csrf": token}, {"origin": "null"}),
            ({"csrf": token}, {"sec-fetch-site": "cross-site"}),
            ({"csrf": token}, {"sec-fetch-site": "same-site"}),
        ]
        for data, headers in attempts:
            for path in (f"/jobs/{job}/retry", "/jobs/retry", "/keys/stripe/limit"):
                answer = await c.post(path, data=data, headers=headers)
                assert answer.status_code == 403, (path, data, headers)
                assert "Refused" in answer.text
        same = await c.post(
            f"/jobs/{job}/retry",
            data={"csrf": token},
            headers={"origin": ORIGIN, "sec-fetch-site": "same-origin"},
        )
        assert same.status_code == 303
        proxied = await c.post(  # a proxy that rewrote Host, and said which it was
            f"/jobs/{job}/retry",
            data={"csrf": token},
            headers={"origin": "https://ops.example.com", "x-forwarded-host": "ops.example.com"},
        )
        assert proxied.status_code == 303
    async with client(create_app(app)) as stranger:  # another browser: its own session
        answer = await stranger.post(f"/jobs/{made['failed'][1]}/retry", data={"csrf": token})
        assert answer.status_code == 403
    assert await count_jobs(app, "failed") == 1
    assert await app.concurrency_keys() == []


async def test_every_process_serving_a_dashboard_accepts_the_forms_of_the_others(
    app: App,
) -> None:
    made = await finished_jobs(app)
    async with client(create_app(app)) as first, client(create_app(app)) as second:
        token = await csrf(first)
        second.cookies = first.cookies
        answer = await second.post(f"/jobs/{made['failed'][0]}/retry", data={"csrf": token})
        assert answer.status_code == 303
    assert await count_jobs(app, "failed") == 1


async def test_read_only_hides_every_action_and_refuses_their_posts(app: App) -> None:
    made = await finished_jobs(app)
    run = await start_sweep(app)
    waiting = (await app.enqueue("ok", queue="mail")).job_id
    web = create_app(app, read_only=True)
    async with client(web) as c:
        pages = [*PAGES, f"/jobs/{made['failed'][0]}", f"/jobs/{waiting}", f"/sweeps/{run}"]
        for path in pages:
            page = (await c.get(path)).text
            assert 'method="post"' not in page, path
            assert "Retry" not in page, path
            assert "Pause" not in page, path
            assert "read-only" in page
        # Read-only pages carry no form: the session's token, as a form would carry it.
        signer = web.state.dashboard.signer
        session = read_session(signer, Request({"type": "http", "headers": cookie_of(c)}))
        assert session is not None
        for path in (
            f"/jobs/{made['failed'][0]}/retry",
            f"/jobs/{waiting}/cancel",
            "/jobs/cancel",
            f"/sweeps/{run}/cancel",
            "/keys/stripe/limit",
            "/queues/mail/pause",
        ):
            answer = await c.post(path, data={"csrf": signer.csrf(session)})
            assert answer.status_code == 403, path
            assert "read-only" in answer.text
        for path in ("/jobs/retry?state=failed", "/jobs/cancel"):
            assert (await c.get(path)).status_code == 403
    assert await count_jobs(app, "failed") == 2
    assert await count_jobs(app, "available") == 2  # the one waiting, and the run's link
    status = await app.sweep_status(run)
    assert status is not None
    assert status.state == "running"


def cookie_of(c: httpx.AsyncClient) -> list[tuple[bytes, bytes]]:
    value = c.cookies["sweepq_session"]
    return [(b"cookie", f"sweepq_session={value}".encode())]


# bad input --------------------------------------------------------------------------------------


async def test_bad_input_gets_a_clear_400_page_and_writes_nothing(app: App) -> None:
    made = await finished_jobs(app)
    async with client(create_app(app)) as c:
        token = await csrf(c)
        for path, says in [
            ("/jobs/abc", "the job id must be a whole number, got 'abc'"),
            ("/jobs/-3", "the job id must be a whole number"),
            ("/jobs/99999999999999999999", "the job id must be between 1 and"),
            ("/jobs?state=stuck", "there is no job state 'stuck' (states: available, running"),
            ("/jobs?before=x", "the cursor must be a whole number"),
            ("/jobs?run=seven", "the sweep run id must be a whole number"),
            ("/jobs?since=yesterday", "since must be a date and time like"),
            ("/jobs?since=2026-01-02T00:00&until=2026-01-01T00:00", "since must be before until"),
            ("/jobs?queue=" + "q" * 300, "the queue is longer than 200 characters"),
            ("/sweeps/x1", "the sweep run id must be a whole number"),
            ("/fragments/nope", "there is no fragment 'nope'"),
            ("/jobs/retry?state=nope", "there is no job state 'nope'"),
        ]:
            page = await c.get(path)
            assert page.status_code == 400, path
            assert "Bad request" in page.text, path
            assert says.replace("'", "&#39;") in page.text, path
        for path, data in [
            ("/jobs/abc/retry", {}),
            ("/jobs/0/cancel", {}),
            ("/jobs/retry", {"state": "stuck"}),
            ("/jobs/cancel", {"until": "soon"}),
            ("/sweeps/abc/pause", {}),
            ("/keys/stripe/limit", {"limit": "many"}),
        ]:
            answer = await c.post(path, data={"csrf": token, **data})
            assert answer.status_code == 400, path
        assert (await c.get("/jobs/424242")).status_code == 404
    assert await count_jobs(app, "failed") == len(made["failed"])
    assert await count_jobs(app, "available") == 0
    assert await app.concurrency_keys() == []


# serving ----------------------------------------------------------------------------------------


def test_sweepq_web_refuses_a_host_other_than_loopback_without_auth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SWEEPQ_WEB_TOKEN", raising=False)
    result = CliRunner().invoke(
        cli, ["web", "--dsn", "postgresql://u:hunter2@db.example/app", "--host", "0.0.0.0"]
    )
    assert result.exit_code == 2
    assert "refusing to serve the dashboard on '0.0.0.0' without auth" in result.output
    assert "SWEEPQ_WEB_TOKEN" in result.output
    assert "hunter2" not in result.output
    assert is_loopback("127.0.0.1")
    assert is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("192.0.2.10")
    check_host("0.0.0.0", auth_configured=True)  # a token or an auth callable: allowed


def test_serve_checks_the_host_and_shows_who_did_what_beside_uvicorns_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SWEEPQ_WEB_TOKEN", raising=False)
    served: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda web, **options: served.append(options))
    web_log = logging.getLogger("sweepq.web")
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # a process that set up nothing
    monkeypatch.setattr(web_log, "handlers", [])
    monkeypatch.setattr(web_log, "level", logging.NOTSET)
    with pytest.raises(sweepq.ConfigurationError, match="without auth"):
        serve("postgresql://u@db.example/app", host="0.0.0.0")
    assert served == []
    serve("postgresql://u@db.example/app", port=8123)
    assert served == [
        {"host": "127.0.0.1", "port": 8123, "log_level": "info", "proxy_headers": False}
    ]
    assert len(web_log.handlers) == 1
    assert web_log.getEffectiveLevel() == logging.INFO


def test_the_command_line_loads_no_web_framework_until_sweepq_web_runs() -> None:
    code = (
        "import sys, sweepq, sweepq.cli.main; "
        "print(sorted(m for m in ('starlette', 'jinja2', 'uvicorn', 'sweepq.web') "
        "if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert loaded.stdout.strip() == "[]"


def test_sweepq_web_finds_the_dashboard_by_its_entry_point_or_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert plugins.web_server() is serve

    def missing() -> plugins.WebServer:
        raise ImportError("No module named 'starlette'")

    monkeypatch.setattr(plugins, "web_server", missing)
    result = CliRunner().invoke(cli, ["web", "--dsn", "postgresql://u@db.example/app"])
    assert result.exit_code == 2
    assert "sweepq web needs the web extra" in result.output
    assert "pip install 'sweepq[web]'" in result.output


async def test_a_dashboard_given_a_dsn_opens_and_closes_its_own_app(dsn: str, app: App) -> None:
    web = create_app(dsn, schema=app.schema)
    own: App = web.state.dashboard.app

    def serve() -> int:
        with TestClient(web, base_url=ORIGIN) as c:  # its own event loop, in a thread
            assert own.pool is not None
            return c.get("/jobs").status_code

    assert await anyio.to_thread.run_sync(serve) == 200
    with pytest.raises(sweepq.ConfigurationError):
        _ = own.pool


async def test_an_unreachable_database_is_a_503_page_that_names_no_server() -> None:
    web = create_app("postgresql://ops:hunter2@127.0.0.1:9/app")  # nothing listens on port 9
    async with client(web) as c:
        for path in ("/", "/jobs", "/fragments/overview"):
            page = await c.get(path)
            assert page.status_code == 503, path
            assert "The database could not be reached" in page.text
            assert "hunter2" not in page.text
            assert "127.0.0.1:9" not in page.text


async def test_the_dashboard_serves_under_a_base_path_and_when_mounted(app: App) -> None:
    made = await finished_jobs(app)
    job = made["failed"][0]
    async with client(create_app(app, base_path="/ops/sweepq/")) as c:
        page = await c.get("/ops/sweepq/jobs")
        assert page.status_code == 200
        assert 'href="/ops/sweepq/static/sweepq.css"' in page.text
        assert f'href="/ops/sweepq/jobs/{job}"' in page.text
        answer = await c.post(f"/ops/sweepq/jobs/{job}/retry", data={"csrf": csrf_of(page.text)})
        assert answer.headers["location"] == f"/ops/sweepq/jobs/{job}"
        assert (await c.get("/")).headers["location"] == "/ops/sweepq/"
    host = Starlette()
    host.mount("/admin/queue", create_app(app))
    async with client(host) as c:
        page = await c.get("/admin/queue/")
        assert page.status_code == 200
        assert 'href="/admin/queue/jobs"' in page.text
        assert (await c.get("/admin/queue/static/sweepq.css")).status_code == 200


async def test_every_statement_of_the_pages_can_read_the_jobs_through_an_index(app: App) -> None:
    await finished_jobs(app)
    statements: list[tuple[str, list[object]]] = [
        ("job_browse", [None, 100, ["failed"], None, None, None, None, None, None, 50]),
        ("job_browse_available", [None, "mail", None, None, None, None, None, 50]),
        ("job_browse_running", [None, None, None, None, None, None, None, 50]),
        ("job_finished_per_minute", [1000]),
        ("concurrency_key_page", [None, 50, 1000]),
        ("job_list_by_scope", ["sweep-link:1", 8]),
        ("job_browse_group", ["g", ["failed"], None, None, None, None, None, None, 50]),
    ]
    async with app.connection() as conn:
        await conn.execute(f"ANALYZE {ident(app.schema)}.jobs")
        # As the worker's pool plans: a statement with no index path would still scan.
        await conn.execute("SET enable_seqscan = off")
        for name, args in statements:
            plan = "\n".join(
                r[0] for r in await conn.fetch(f"EXPLAIN {app.queries.sql[name]}", *args)
            )
            assert "Seq Scan on jobs" not in plan, (name, plan)
