"""The dashboard's actions: each a POST the page confirmed first, one library call, a line in
the log (logger `sweepq.web`, INFO) saying who did it, and a redirect back with a message.
"""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.responses import Response

from sweepq.core import browse
from sweepq.core.jobs import JobState

from . import forms
from .site import Visit


def _form_fields(form: FormData) -> dict[str, str]:
    return {k: v for k, v in form.items() if isinstance(v, str)}


def _job_target(visit: Visit, form: FormData) -> tuple[int, str]:
    """The job a job's action names in its path, and where to go back to (its page)."""
    job_id = forms.row_id(visit.request.path_params["job_id"])
    return job_id, visit.back(form, f"/jobs/{job_id}")


async def retry_job(visit: Visit, form: FormData) -> Response:
    job_id, back = _job_target(visit, form)
    job = await visit.app.retry(job_id)
    if job is None:
        return visit.redirect(back, f"There is no job {job_id}.", ok=False)
    if job.state == JobState.RUNNING:
        return visit.redirect(back, f"Job {job_id} is running: not retried.", ok=False)
    visit.log("retried job %d", job_id, job_id=job_id)
    return visit.redirect(back, f"Job {job_id} retried: {job.state}.")


async def cancel_job(visit: Visit, form: FormData) -> Response:
    job_id, back = _job_target(visit, form)
    before = await visit.app.get_job(job_id)
    if before is None:
        return visit.redirect(back, f"There is no job {job_id}.", ok=False)
    if before.state.terminal:
        return visit.redirect(
            back, f"Job {job_id} has ended ({before.state}): not cancelled.", ok=False
        )
    job = await visit.app.cancel(job_id, reason=f"cancelled by {visit.user} (dashboard)")
    visit.log("cancelled job %d", job_id, job_id=job_id)
    state = job.state if job is not None else "pruned"
    return visit.redirect(back, f"Job {job_id} cancelled: {state}.")


def _described(fields: dict[str, str]) -> str:
    shown = " ".join(f"{k}={v}" for k, v in forms.filter_fields(fields).items())
    return shown or "(no filter)"


async def retry_jobs(visit: Visit, form: FormData) -> Response:
    fields = _form_fields(form)
    job_filter = forms.job_filter(fields)
    retried = await browse.retry_matching(
        visit.app, job_filter, limit=browse.BATCH_LIMIT, scan=browse.BATCH_SCAN
    )
    described = _described(fields)
    visit.log("retried %d jobs matching %s", len(retried), described, jobs=len(retried))
    return visit.redirect(
        visit.url("/jobs", **forms.filter_fields(fields)),
        f"Retried {len(retried):,} jobs matching {described}.",
    )


async def cancel_jobs(visit: Visit, form: FormData) -> Response:
    fields = _form_fields(form)
    job_filter = forms.job_filter(fields)
    cancelled = await browse.cancel_matching(
        visit.app,
        job_filter,
        reason=f"cancelled by {visit.user} (dashboard)",
        limit=browse.BATCH_LIMIT,
        scan=browse.BATCH_SCAN,
    )
    described = _described(fields)
    visit.log("cancelled %d jobs matching %s", len(cancelled), described, jobs=len(cancelled))
    return visit.redirect(
        visit.url("/jobs", **forms.filter_fields(fields)),
        f"Cancelled {len(cancelled):,} jobs matching {described}.",
    )


SWEEP_ACTIONS = ("pause", "resume", "cancel", "retry-failed")


async def sweep_action(visit: Visit, form: FormData) -> Response:
    run_id = forms.row_id(visit.request.path_params["run_id"], "sweep run id")
    verb = visit.request.path_params["verb"]
    back = visit.back(form, f"/sweeps/{run_id}")
    app = visit.app
    if verb == "retry-failed":
        if await app.sweep_status(run_id) is None:
            return visit.redirect(back, f"There is no sweep run {run_id}.", ok=False)
        count = await app.retry_sweep_failures(run_id)
        visit.log("retried %d failed items of sweep run %d", count, run_id, run_id=run_id)
        return visit.redirect(back, f"Run {run_id}: {count:,} failed or cancelled items retried.")
    if verb == "pause":
        run = await app.pause_sweep(run_id)
        done = "paused"
    elif verb == "resume":
        run = await app.resume_sweep(run_id)
        done = "resumed"
    elif verb == "cancel":
        run = await app.cancel_sweep(run_id)
        done = "cancelled"
    else:
        raise forms.BadInput(f"there is no action {verb!r} on a sweep run")
    if run is None:
        return visit.redirect(back, f"There is no sweep run {run_id}.", ok=False)
    visit.log("%s sweep run %d", done, run_id, run_id=run_id)
    return visit.redirect(back, f"Run {run_id} {done}: now {run.state}.")


async def queue_action(visit: Visit, form: FormData) -> Response:
    """Pause or resume the queue named in the path, for every worker."""
    params = visit.request.path_params
    queue = forms.text(params["queue"], "queue")
    if queue is None:
        raise forms.BadInput("a queue is needed")
    back = visit.back(form, "/queues")
    verb = params["verb"]
    if verb not in ("pause", "resume"):
        raise forms.BadInput(f"there is no action {verb!r} on a queue")
    if verb == "pause":
        changed = await visit.app.pause_queue(queue, reason=f"paused by {visit.user} (dashboard)")
        visit.log("paused queue %r", queue, queue=queue)
        said = "paused: no worker starts its jobs" if changed else "was paused already"
    else:
        changed = await visit.app.resume_queue(queue)
        visit.log("resumed queue %r", queue, queue=queue)
        said = "resumed" if changed else "was not paused"
    return visit.redirect(back, f"Queue {queue!r} {said}.", ok=changed)


async def key_limit(visit: Visit, form: FormData) -> Response:
    key = forms.text(visit.request.path_params["key"], "concurrency key")
    named = form.get("key")
    if key == "-" and isinstance(named, str):  # the form that names any key
        key = forms.text(named, "concurrency key")
    if key is None:
        raise forms.BadInput("a concurrency key is needed")
    raw = form.get("limit")
    limit = forms.limit(raw if isinstance(raw, str) else None)
    await visit.app.set_concurrency_limit(key, limit)
    shown = "no limit" if limit is None else str(limit)
    visit.log("set the limit of concurrency key %r to %s", key, shown, key=key, limit=limit)
    return visit.redirect(visit.back(form, "/keys"), f"Key {key!r}: limit set to {shown}.")
