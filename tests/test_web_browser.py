"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright, against the
site of tests/web_site.py (jobs in every state, a key at its limit, cron schedules, a sweep run
that workers move along, served by uvicorn with a token).

As a person would: each page and what it shows; retry and cancel clicked, the confirmation
accepted (or dismissed), and the database read; a sweep's progress moving with no reload;
without the token, every page and action refused; a form posted from a page of another origin
refused.

Chromium is the system's (`/usr/bin/chromium`; Playwright downloads nothing): without it the
module fails under CI and is skipped elsewhere, saying why. One site and one browser serve the
whole module, in one xdist process.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Dialog,
    Page,
    Route,
    expect,
    sync_playwright,
)

from web_site import CHROMIUM, CRON, DONE_SWEEP, KEY, SWEEP, Site, chromium, signed_in

pytestmark = [pytest.mark.committed, pytest.mark.xdist_group("browser")]

WAIT_MS = 15_000  # the longest a page is given to show what it should


class Dialogs:
    """The page's confirm() dialogs: their questions, each accepted unless told otherwise."""

    def __init__(self, page: Page) -> None:
        self.questions: list[str] = []
        self.accept = True
        page.on("dialog", self._answer)

    def _answer(self, dialog: Dialog) -> None:
        self.questions.append(dialog.message)
        if self.accept:
            dialog.accept()
        else:
            dialog.dismiss()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing: the browser tests use Debian's (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with sync_playwright() as playwright:
        launched = chromium(playwright)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def site(dsn: str, browser: Browser) -> Iterator[Site]:
    with Site(dsn) as started:
        yield started


@pytest.fixture(scope="module")
def signed(browser: Browser, site: Site) -> Iterator[BrowserContext]:
    """Signed in through the login form, as `ada`."""
    context = signed_in(browser, site, name="ada")
    yield context
    context.close()


@pytest.fixture
def page(signed: BrowserContext) -> Iterator[Page]:
    opened = signed.new_page()
    yield opened
    opened.close()


def row(page: Page, text: str) -> str:
    """The text of the table row that holds `text` (the first)."""
    return page.locator("tr", has_text=text).first.inner_text()


# pages ------------------------------------------------------------------------------------------


def test_the_overview_shows_queues_chart_runs_workers_and_keys(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/")
    expect(page).to_have_title("Overview · sweepq")
    expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
    assert re.search(r"mail\s+3\s+1\s+0", row(page, "mail")), "3 available, 1 scheduled"
    assert re.search(r"payments\s+2\s+0\s+1", row(page, "payments")), "2 waiting, 1 running"
    assert re.search(r"default\s+0\s+0\s+0\s+(≥ )?3\b", row(page, "default")), "3 failed this hour"
    bars = page.locator("svg.chart rect.completed")
    # A bar per minute with completions: the site completed jobs in each of the last 60
    # minutes, and the oldest of them leaves the hour if a minute turned since it was made.
    assert bars.count() in (59, 60)
    heights = bars.evaluate_all("bars => bars.map(bar => Number(bar.getAttribute('height')))")
    assert sum(1 for h in heights if h > 0) > 40, "the hour's completions are drawn"
    expect(page.locator(f'a[href="/sweeps/{site.made.run}"]').first).to_be_visible()
    expect(page.get_by_text("Maintenance leader:")).to_be_visible()
    expect(page.locator("tr", has_text=KEY).first).to_contain_text("at its limit")
    expect(page.get_by_text("≈").first).to_be_visible()  # the total is labelled an estimate


def test_the_jobs_page_filters_each_state_from_its_form(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/jobs")
    expect(page).to_have_title("Jobs · sweepq")
    for state in ("available", "running", "completed", "failed", "cancelled"):
        page.get_by_label("state").select_option(state)
        page.get_by_role("button", name="Filter").click()
        page.wait_for_url(re.compile(rf"state={state}"))
        badges = page.locator("table.jobs td .state").all_inner_texts()
        assert badges, f"no {state} job is listed"
        assert set(badges) == {state}, (state, badges)
    # A job scheduled for later is available, its run at an hour away.
    page.goto(f"{site.url}/jobs?state=available&queue=mail")
    scheduled = page.locator("tr", has=page.locator(f'a[href="/jobs/{site.made.scheduled[0]}"]'))
    expect(scheduled).to_contain_text("available")
    page.goto(f"{site.url}/jobs?key={KEY}")
    shown = {int(i) for i in page.locator("table.jobs td.num a").all_inner_texts()}
    assert shown == {site.made.running, *site.made.waiting_on_key}


def test_a_failed_jobs_page_shows_its_traceback_and_its_args_as_text(
    page: Page, site: Site
) -> None:
    page.goto(f"{site.url}/jobs/{site.made.markup}")
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Job {site.made.markup}")
    expect(page.get_by_role("heading", level=1)).to_contain_text("failed")
    traceback = page.locator("pre.traceback").first
    expect(traceback).to_contain_text("Traceback (most recent call last)")
    expect(traceback).to_contain_text("ConnectionRefusedError: inventory service for 'oslo'")
    expect(page.locator("pre.json").first).to_contain_text('"note": "<script>x()</script>"')
    assert page.locator("script").count() == 1  # the page's own file, not the job's args
    expect(page.get_by_role("button", name="Retry")).to_be_visible()


def test_a_running_job_shows_its_lease_and_worker_and_a_result_is_shown(
    page: Page, site: Site
) -> None:
    page.goto(f"{site.url}/jobs/{site.made.running}")
    lease = page.locator("section.card", has_text="Lease")
    expect(lease).to_contain_text("worker")
    expect(lease).to_contain_text("lease until")
    expect(page.get_by_role("button", name="Cancel")).to_be_visible()
    page.goto(f"{site.url}/jobs/{site.made.with_result}")
    expect(page.locator("main")).to_contain_text("cat-640.jpg")


def test_the_sweep_pages_show_runs_progress_and_failures(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/sweeps")
    running = page.locator("tr", has_text=SWEEP)
    expect(running).to_contain_text("running")
    expect(running.locator("progress")).to_have_count(1)
    expect(page.locator("tr", has_text=DONE_SWEEP)).to_contain_text("completed")
    page.goto(f"{site.url}/sweeps/{site.made.run}")
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Run {site.made.run} of")
    expect(page.locator(".bigbar progress")).to_be_visible()
    for button in ("Pause", "Cancel"):
        expect(page.get_by_role("button", name=button)).to_be_visible()
    # Item 250 fails (its leaf has one attempt): the live part of the page shows it once the
    # walk is there.
    failures = page.locator("section.card", has_text="Failed and cancelled items")
    expect(failures).to_contain_text("product 250 has no category", timeout=WAIT_MS)


def test_keys_cron_and_queues_pages_show_their_rows(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/keys")
    expect(page.get_by_label(f"limit of {KEY}")).to_have_value("1")
    page.goto(f"{site.url}/cron")
    nightly = page.locator("tr", has_text=CRON[0])
    expect(nightly).to_contain_text("0 3 * * *")
    expect(nightly).to_contain_text("Europe/Paris")
    expect(page.locator("tr", has_text=CRON[1])).to_contain_text("*/15 * * * * *")
    page.goto(f"{site.url}/queues")
    for queue in ("default", "mail", "payments", "sweeps"):
        expect(page.get_by_role("link", name=queue, exact=True)).to_be_visible()


def set_hidden(page: Page, hidden: bool) -> None:
    """Tell the page its tab is hidden (or shown again), as the browser would."""
    page.evaluate(
        """hidden => {
            Object.defineProperty(document, "hidden", { configurable: true, get: () => hidden });
            document.dispatchEvent(new Event("visibilitychange"));
        }""",
        hidden,
    )


def test_live_parts_ask_nothing_while_the_tab_is_hidden(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/sweeps")
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/fragments/" in r.url else None)
    with page.expect_request(lambda r: "/fragments/sweeps" in r.url, timeout=WAIT_MS):
        pass  # it polls while shown
    set_hidden(page, True)
    asked.clear()
    page.wait_for_timeout(3_000)  # the scenario: longer than the 2.5 s period, with no request
    assert asked == []
    with page.expect_request(lambda r: "/fragments/sweeps" in r.url, timeout=1_000):
        set_hidden(page, False)  # shown again: refreshed at once


# actions ----------------------------------------------------------------------------------------


def test_retry_and_cancel_ask_first_and_write_what_was_confirmed(page: Page, site: Site) -> None:
    dialogs = Dialogs(page)
    retried, cancelled = site.made.to_retry, site.made.to_cancel

    page.goto(f"{site.url}/jobs/{retried}")
    page.get_by_role("button", name="Retry").click()
    expect(page.locator("p.flash")).to_contain_text(f"Job {retried} retried")
    assert dialogs.questions == [f"Retry job {retried} now?"]
    assert site.job_state(retried) == "available"  # its queue has no worker: it stays so

    page.goto(f"{site.url}/jobs/{cancelled}")
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    dialogs.accept = False
    page.get_by_role("button", name="Cancel").click()
    assert site.job_state(cancelled) == "available"
    dialogs.accept = True
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("p.flash")).to_contain_text(f"Job {cancelled} cancelled")
    assert dialogs.questions[1:] == [f"Cancel job {cancelled}?"] * 2
    assert posts == [f"{site.url}/jobs/{cancelled}/cancel"]  # the dismissed one posted nothing
    assert site.job_state(cancelled) == "cancelled"
    expect(page.get_by_role("heading", level=1)).to_contain_text("cancelled")

    page.goto(f"{site.url}/keys")
    form = page.locator("#any-key")
    form.get_by_label("key").fill("acme")
    form.get_by_label("limit").fill("5")
    form.get_by_role("button", name="Set").click()
    expect(page.locator("p.flash")).to_contain_text("limit set to 5")
    assert site.key_limit("acme") == 5


def test_retrying_a_filters_jobs_shows_their_count_first_then_retries_them(
    page: Page, site: Site
) -> None:
    failed_images = "SELECT count(*) FROM {schema}.jobs WHERE queue = 'images' AND state = %s"
    [(count,)] = site.execute(failed_images, "failed")
    assert count > 0
    dialogs = Dialogs(page)
    page.goto(f"{site.url}/jobs?state=failed&queue=images")
    page.get_by_role("link", name="Retry matching failed and cancelled jobs…").click()
    expect(page.locator("p.count")).to_contain_text(f"{count:,} failed or cancelled jobs")
    page.get_by_role("button", name=f"Retry {count:,} jobs").click()
    expect(page.locator("p.flash")).to_contain_text(f"Retried {count:,} jobs matching")
    assert dialogs.questions == [f"Retry {count} jobs?"]
    assert site.execute(failed_images, "failed") == [(0,)]
    assert site.execute(failed_images, "available") == [(count,)]  # no worker serves images


def test_a_sweeps_progress_moves_without_a_reload_and_it_pauses_and_resumes(
    page: Page, site: Site
) -> None:
    run = site.made.run
    dialogs = Dialogs(page)
    page.goto(f"{site.url}/sweeps/{run}")
    page.evaluate("window.loadedOnce = true")  # gone if the page reloads
    first = page.locator(".bigbar progress").evaluate("p => p.value")
    page.wait_for_function(
        "first => document.querySelector('.bigbar progress').value > first",
        arg=first,
        timeout=WAIT_MS,
    )
    assert page.evaluate("window.loadedOnce") is True
    assert page.locator("[data-live]").get_attribute("data-refreshed") is not None

    page.get_by_role("button", name="Pause").click()
    expect(page.locator("p.flash")).to_contain_text(f"Run {run} paused")
    assert site.sweep_state(run) == "paused"
    page.get_by_role("button", name="Resume").click()
    expect(page.locator("p.flash")).to_contain_text(f"Run {run} resumed")
    assert site.sweep_state(run) == "running"
    assert len(dialogs.questions) == 2


# refusals ---------------------------------------------------------------------------------------


def test_without_the_token_every_page_and_action_is_refused(browser: Browser, site: Site) -> None:
    made = site.made
    pages = ["/", "/jobs", f"/jobs/{made.failed[0]}", "/sweeps", f"/sweeps/{made.run}", "/keys",
             "/cron", "/queues", "/jobs/retry?state=failed"]  # fmt: skip
    context = browser.new_context()
    try:
        page = context.new_page()
        for path in pages:
            response = page.goto(f"{site.url}{path}")
            assert response is not None
            assert response.status == 401, path
            expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
            expect(page.locator("table")).to_have_count(0)
        for name in ("overview", "jobs", "sweeps", "keys", "cron", "queues"):
            fragment = context.request.get(f"{site.url}/fragments/{name}")
            assert fragment.status == 401, name
        # The login page gave this browser a session and its form's token: with both, each
        # action is still refused, for want of a sign-in.
        page.goto(f"{site.url}/login")
        csrf = page.locator('meta[name="csrf"]').get_attribute("content")
        assert csrf
        actions = [f"/jobs/{made.available[0]}/cancel", f"/jobs/{made.failed[0]}/retry",
                   "/jobs/cancel", "/jobs/retry", f"/sweeps/{made.run}/pause",
                   f"/sweeps/{made.run}/cancel", f"/sweeps/{made.done_run}/retry-failed",
                   f"/keys/{KEY}/limit"]  # fmt: skip
        for path in actions:
            answer = context.request.post(f"{site.url}{path}", form={"csrf": csrf, "limit": "9"})
            assert answer.status == 401, (path, answer.status)
        wrong = {"Authorization": "Bearer not-the-token"}
        assert context.request.get(f"{site.url}/jobs", headers=wrong).status == 401
        assert context.request.post(f"{site.url}/jobs/cancel", headers=wrong).status in (401, 403)
    finally:
        context.close()
    assert site.job_state(made.available[0]) == "available"
    assert site.job_state(made.failed[0]) == "failed"
    assert site.sweep_state(made.run) == "running"
    assert site.key_limit(KEY) == 1


def trap(page: Page, site: Site, origin: str, job_id: int) -> int:
    """Serve at `origin` a page whose button posts the cancel of `job_id` to the dashboard,
    with the form's real token (as if it had leaked); click it; the dashboard's status."""
    page.goto(f"{site.url}/jobs/{job_id}")
    csrf = page.locator('meta[name="csrf"]').get_attribute("content")
    html = (
        f'<form method="post" action="{site.url}/jobs/{job_id}/cancel">'
        f'<input type="hidden" name="csrf" value="{csrf}"><button>Win a prize</button></form>'
    )

    def serve_trap(route: Route) -> None:
        route.fulfill(status=200, content_type="text/html", body=html)

    page.route(f"{origin}/prize.html", serve_trap)
    page.goto(f"{origin}/prize.html")
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.get_by_role("button", name="Win a prize").click()
    return posted.value.status


@pytest.mark.parametrize(
    "origin",
    ["http://127.0.0.1:9", "http://elsewhere.localhost:9"],
    ids=["same-site-other-port", "cross-site"],
)
def test_a_form_posted_from_a_page_of_another_origin_is_refused(
    signed: BrowserContext, site: Site, origin: str
) -> None:
    victim = site.made.available[0]
    page = signed.new_page()
    try:
        assert trap(page, site, origin, victim) == 403
        expect(page.locator("main")).to_contain_text("comes from another site")
    finally:
        page.close()
    assert site.job_state(victim) == "available"


def test_the_same_form_from_the_dashboards_own_origin_is_accepted(
    browser: Browser, site: Site
) -> None:
    """The control of the test above: only the page's origin differs."""
    job_id = site.made.available[1]
    context = signed_in(browser, site)
    try:
        page = context.new_page()
        assert trap(page, site, site.url, job_id) == 303
        expect(page.locator("p.flash")).to_contain_text(f"Job {job_id} cancelled")
    finally:
        context.close()
    assert site.job_state(job_id) == "cancelled"


def test_a_link_from_another_site_opens_the_page_signed_in(browser: Browser, site: Site) -> None:
    context = signed_in(browser, site)
    try:
        page = context.new_page()
        chat = f'<a href="{site.url}/jobs?state=failed">the failed jobs</a>'
        page.route("http://chat.example:9/**", lambda route: route.fulfill(body=chat))
        page.goto("http://chat.example:9/room")
        with page.expect_navigation():
            page.get_by_role("link", name="the failed jobs").click()
        assert page.title() == "Jobs · sweepq"  # not "Sign in · sweepq"
    finally:
        context.close()


def test_a_refused_cross_site_post_leaves_its_user_signed_in(browser: Browser, site: Site) -> None:
    context = signed_in(browser, site)
    try:
        page = context.new_page()
        assert trap(page, site, "http://elsewhere.localhost:9", site.made.available[0]) == 403
        response = page.goto(f"{site.url}/jobs")
        assert response is not None
        assert response.status == 200
    finally:
        context.close()
