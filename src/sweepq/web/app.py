"""`create_app`: the dashboard as an ASGI application (Starlette), and its routes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from sweepq.core.app import DEFAULT_SCHEMA
from sweepq.sweeps.app import App

from . import actions, forms, pages, security
from .security import Auth, SecurityHeaders
from .site import (
    Dashboard,
    action,
    logger,
    login_page,
    page,
    read_form,
    refuse_post,
    token_from_environment,
)


def create_app(
    app_or_dsn: App | str,
    *,
    schema: str = DEFAULT_SCHEMA,
    auth: Auth | None = None,
    read_only: bool = False,
    base_path: str = "/",
) -> Starlette:
    """The web dashboard of a sweepq database, as an ASGI application.

    Pages (rendered on the server): the overview, jobs (filtered, paged by keyset) and a job,
    sweep runs and a run, concurrency keys, cron schedules, queues; their live figures refresh
    every few seconds while the tab is visible. Actions (each confirmed, logged with who did
    it on logger `sweepq.web`): retry or cancel a job, or the jobs a filter matches in bounded
    batches; pause, resume, cancel a sweep run or retry its failures; set a concurrency limit.

    Who may use it: `auth` decides if given; else the token of `SWEEPQ_WEB_TOKEN` (read now)
    if set, posted to the login page or sent as `Authorization: Bearer <token>`; else anyone
    who can reach it, which `serve` allows only on a loopback address.

    Args:
        app_or_dsn: a `sweepq.App` the host opens and closes, or a DSN: the dashboard then
            opens its own App in the ASGI lifespan (or on first use, when mounted in an
            application that does not pass lifespan events on) and closes it at shutdown.
        schema: sweepq's schema, with a DSN (an App has its own).
        auth: the host's check of a request: the user's name (recorded with their actions),
            or None to refuse it (401, or the login page for a page). May be async.
        read_only: hide every action, and refuse their requests with 403.
        base_path: the path the dashboard is served under (`/sweepq` behind a proxy that
            passes the path on); when it is mounted (`app.mount("/sweepq", ...)`), leave it
            `/`: the mount's path is taken from the request.

    Returns:
        A Starlette application.

    Raises:
        TypeError: `app_or_dsn` is neither an App nor a DSN.
        ValueError: a `base_path` that is not a plain absolute path.

    Example:
        >>> from fastapi import FastAPI  # doctest: +SKIP
        >>> api = FastAPI()
        >>> api.mount("/sweepq", create_app(app, auth=lambda request: current_user(request)))
    """
    base = _base(base_path)
    dashboard = Dashboard(
        app_or_dsn,
        schema=schema,
        auth=auth,
        read_only=read_only,
        token=token_from_environment(),
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if dashboard.owned:
            await dashboard.ready()
        try:
            yield
        finally:
            await dashboard.close()

    routes: list[BaseRoute] = [*_routes(dashboard)]
    if base:
        routes = [
            Route("/", lambda _: RedirectResponse(f"{base}/", status_code=307)),
            Mount(base, routes=routes),
        ]
    web = Starlette(routes=routes, lifespan=lifespan)
    web.state.dashboard = dashboard
    web.add_middleware(SecurityHeaders)
    return web


def _base(base_path: str) -> str:
    base = base_path.rstrip("/")
    if base and (not base.startswith("/") or "//" in base or any(c in base for c in "?#\\ ")):
        raise ValueError(f"base_path must be a path like /sweepq, got {base_path!r}")
    return base


def _routes(d: Dashboard) -> list[BaseRoute]:
    return [
        Route("/", page(d, pages.overview)),
        Route("/jobs", page(d, pages.jobs)),
        Route("/jobs/retry", page(d, pages.bulk_confirm), methods=["GET"]),
        Route("/jobs/retry", action(d, actions.retry_jobs), methods=["POST"]),
        Route("/jobs/cancel", page(d, pages.bulk_confirm), methods=["GET"]),
        Route("/jobs/cancel", action(d, actions.cancel_jobs), methods=["POST"]),
        Route("/jobs/{job_id}", page(d, pages.job)),
        Route("/jobs/{job_id}/retry", action(d, actions.retry_job), methods=["POST"]),
        Route("/jobs/{job_id}/cancel", action(d, actions.cancel_job), methods=["POST"]),
        Route("/sweeps", page(d, pages.sweeps)),
        Route("/sweeps/{run_id}", page(d, pages.sweep)),
        Route("/sweeps/{run_id}/{verb}", action(d, actions.sweep_action), methods=["POST"]),
        Route("/keys", page(d, pages.keys)),
        Route("/keys/{key:path}/limit", action(d, actions.key_limit), methods=["POST"]),
        Route("/cron", page(d, pages.cron)),
        Route("/queues", page(d, pages.queues)),
        Route("/queues/{queue}/{verb:str}", action(d, actions.queue_action), methods=["POST"]),
        Route("/fragments/{name}", page(d, pages.fragment, fragment=True)),
        Route("/login", _login(d), methods=["GET", "POST"]),
        Route("/logout", _logout(d), methods=["POST"]),
        Mount("/static", StaticFiles(packages=[("sweepq.web", "static")]), name="static"),
    ]


Endpoint = Callable[[Request], Awaitable[Response]]

WRONG_TOKEN_PAUSE = 0.5  # seconds before a wrong token is answered


def _login(d: Dashboard) -> Endpoint:
    """The login form (GET), and the token posted to it (POST): a right token starts a signed
    session under the name given (else `token`) and goes on to `next`."""

    async def endpoint(request: Request) -> Response:
        visit = await d.visit(request)
        if request.method == "GET":
            return visit.finish(await pages.login(visit))
        form = await read_form(request)
        refusal = refuse_post(visit, form)
        if refusal is not None:
            return visit.finish(refusal)
        wanted = form.get("next")
        target = wanted if isinstance(wanted, str) and visit.ours(wanted) else visit.url("/")
        if d.token is None:
            return visit.finish(visit.error(400, "This dashboard is not signed in to by token."))
        given = form.get("token")
        if not isinstance(given, str) or not security.tokens_equal(given, d.token):
            await anyio.sleep(WRONG_TOKEN_PAUSE)  # a guess costs time, and tells nothing
            logger.warning("a sign-in with a wrong token from %s", _client(request))
            page = login_page(visit, status=401, message="That token is not right.", to=target)
            return visit.finish(page)
        name = form.get("name")
        try:
            user = forms.display_name(name if isinstance(name, str) else None)
        except forms.BadInput as exc:
            return visit.finish(login_page(visit, status=400, message=str(exc), to=target))
        session = security.new_session(user=user or security.TOKEN_USER)
        response = RedirectResponse(target, status_code=303)
        visit.set_session(response, session)
        logger.info("user %s signed in from %s", session.user, _client(request))
        return visit.finish(response)

    return endpoint


def _logout(d: Dashboard) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        visit = await d.visit(request)
        refusal = refuse_post(visit, await read_form(request))
        if refusal is not None:
            return visit.finish(refusal)
        response = RedirectResponse(visit.url("/login"), status_code=303)
        response.delete_cookie(
            security.SESSION_COOKIE, path=visit.base or "/", httponly=True, samesite="lax"
        )
        return response

    return endpoint


def _client(request: Request) -> str:
    return request.client.host if request.client is not None else "an unknown address"
