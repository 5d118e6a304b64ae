"""The dashboard's pages, and the live fragments their script swaps in.

Each page reads one snapshot (`reads`) and renders its template; a page with live figures
includes them from `fragments/<name>.html`, which `GET /fragments/<name>` renders alone from
the same read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import HTMLResponse, Response

from sweepq.core import browse
from sweepq.core.jobs import JobState

from . import forms, reads
from .charts import minute_chart
from .forms import BadInput
from .site import Visit, login_page

Context = dict[str, Any]


# the reads behind each live part --------------------------------------------------------------


async def overview_context(visit: Visit) -> Context:
    view = await reads.overview(visit.app)
    return {"view": view, "chart": minute_chart(view.series, view.at)}


async def queues_context(visit: Visit) -> Context:
    return {"view": await reads.queues(visit.app)}


async def sweeps_context(visit: Visit) -> Context:
    runs = await visit.app.list_sweep_runs(reads.RUNS_PAGE)
    return {"runs": runs}


async def sweep_context(visit: Visit) -> Context:
    run_id = forms.row_id(
        visit.request.path_params.get("run_id") or visit.request.query_params.get("id"),
        "sweep run id",
    )
    run = await visit.app.sweep_status(run_id)
    if run is None:
        return {"run": None, "run_id": run_id, "failures": [], "links": []}
    failures = await visit.app.sweep_failures(run_id, limit=reads.RUN_FAILURES)
    links = await reads.run_links(visit.app, run_id)
    return {"run": run, "run_id": run_id, "failures": failures, "links": links}


async def job_context(visit: Visit) -> Context:
    job_id = forms.row_id(
        visit.request.path_params.get("job_id") or visit.request.query_params.get("id")
    )
    return {"job": await visit.app.get_job(job_id), "job_id": job_id}


async def keys_context(visit: Visit) -> Context:
    after = forms.text(visit.request.query_params.get("after"), "key to start after")
    return {"view": await reads.keys(visit.app, after=after)}


async def cron_context(visit: Visit) -> Context:
    return {"schedules": await visit.app.cron_schedules()}


Reader = Callable[[Visit], Awaitable[Context]]

# The read behind each fragment, by name: `GET /fragments/<name>` renders `fragments/<name>.html`.
FRAGMENTS: dict[str, Reader] = {
    "overview": overview_context,
    "queues": queues_context,
    "sweeps": sweeps_context,
    "sweep": sweep_context,
    "job": job_context,
    "keys": keys_context,
    "cron": cron_context,
}


# pages ----------------------------------------------------------------------------------------


def live_page(
    visit: Visit, fragment: str, context: Context, *, title: str, nav: str, item: int | None = None
) -> Response:
    """A page that is one live fragment, `fragments/<fragment>.html` (`item`: the id it is of)."""
    return visit.render(
        "live_page.html", nav=nav, title=title, fragment=fragment, fragment_id=item, **context
    )


async def overview(visit: Visit) -> Response:
    context = await overview_context(visit)
    return live_page(visit, "overview", context, title="Overview", nav="overview")


async def queues(visit: Visit) -> Response:
    context = await queues_context(visit)
    return live_page(visit, "queues", context, title="Queues", nav="queues")


async def sweeps(visit: Visit) -> Response:
    context = await sweeps_context(visit)
    return live_page(visit, "sweeps", context, title="Sweeps", nav="sweeps")


async def sweep(visit: Visit) -> Response:
    context = await sweep_context(visit)
    run_id = context["run_id"]
    if context["run"] is None:
        return visit.error(404, f"There is no sweep run {run_id}.")
    return live_page(
        visit, "sweep", context, title=f"Sweep run {run_id}", nav="sweeps", item=run_id
    )


async def job(visit: Visit) -> Response:
    context = await job_context(visit)
    if context["job"] is None:
        return visit.error(404, f"There is no job {context['job_id']} (or it was pruned).")
    return visit.render("job.html", nav="jobs", **context)


async def keys(visit: Visit) -> Response:
    return visit.render("keys.html", nav="keys", **await keys_context(visit))


async def cron(visit: Visit) -> Response:
    context = await cron_context(visit)
    return live_page(visit, "cron", context, title="Cron", nav="cron")


async def jobs(visit: Visit) -> Response:
    params = visit.request.query_params
    job_filter = forms.job_filter(params)
    before = params.get("before")
    listing = await reads.jobs(
        visit.app, job_filter, before=None if not before else forms.row_id(before, "cursor")
    )
    fields = forms.filter_fields(params)
    return visit.render(
        "jobs.html",
        nav="jobs",
        listing=listing,
        fields=fields,
        states=[s.value for s in JobState],
        before=before,
        scan=browse.PAGE_SCAN,
    )


async def fragment(visit: Visit) -> Response:
    name = visit.request.path_params["name"]
    reader = FRAGMENTS.get(name)
    if reader is None:
        raise BadInput(f"there is no fragment {name!r} (fragments: {', '.join(FRAGMENTS)})")
    template = visit.dashboard.templates.get_template(f"fragments/{name}.html")
    context = await reader(visit)
    here = visit.request.query_params.get("here")
    values = {
        **visit.common(),
        "here": here if here and visit.ours(here) else visit.url("/"),
        **context,
    }
    html = template.render(values)
    return HTMLResponse(html)


# bulk actions: the count first ------------------------------------------------------------------

BULK = {
    "retry": (browse.RETRYABLE, "retry", "Retry", "failed or cancelled"),
    "cancel": (browse.CANCELLABLE, "cancel", "Cancel", "available or running"),
}


async def bulk_confirm(visit: Visit) -> Response:
    """The count of jobs a batch action will touch, and the form that confirms it."""
    if visit.dashboard.read_only:
        return visit.error(403, "This dashboard is read-only.")
    verb = visit.request.url.path.rstrip("/").rsplit("/", 1)[-1]
    states, _, label, which = BULK[verb]
    params = visit.request.query_params
    job_filter = forms.job_filter(params)
    ids = await browse.matching(
        visit.app, job_filter, states, limit=browse.BATCH_LIMIT, scan=browse.BATCH_SCAN
    )
    return visit.render(
        "confirm.html",
        nav="jobs",
        verb=verb,
        label=label,
        which=which,
        count=len(ids),
        limit=browse.BATCH_LIMIT,
        scan=browse.BATCH_SCAN,
        fields=forms.filter_fields(params),
    )


async def login(visit: Visit) -> Response:
    if visit.user is not None and visit.dashboard.mode != "auth":
        return visit.redirect(visit.url("/"), "You are signed in.")
    wanted = visit.request.query_params.get("next")
    return login_page(visit, to=wanted if wanted and visit.ours(wanted) else visit.url("/"))
