"""The dashboard's machinery shared by its pages and actions: the App it serves, who is asking
(`Visit`), rendering templates (their environment and filters are in `render`), and the guards
every GET and POST passes.

A page handler takes a `Visit` and returns a `Response`; `page()` and `action()` wrap it with
the checks: signed in, not cross-site, the CSRF token, not read-only, and a `BadInput` turned
into a 400 page that writes nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import anyio
import msgspec
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from sweepq.core.errors import DatabaseUnavailableError, SweepqError
from sweepq.core.outage import TRANSIENT_ERRORS
from sweepq.sweeps.app import App

from . import security
from .forms import BadInput, query
from .render import environment
from .security import Auth, Session, Signer

logger = logging.getLogger("sweepq.web")

TOKEN_VARIABLE = "SWEEPQ_WEB_TOKEN"


class Dashboard:
    """One dashboard: its App (opened here when it was given a DSN), its checks, its templates."""

    def __init__(
        self,
        app_or_dsn: App | str,
        *,
        schema: str,
        auth: Auth | None,
        read_only: bool,
        token: str | None,
    ) -> None:
        if isinstance(app_or_dsn, str):
            self.app = App(app_or_dsn, schema=schema, pool_min_size=1, pool_max_size=4)
            self.owned = True
        elif isinstance(app_or_dsn, App):
            self.app = app_or_dsn
            self.owned = False
        else:
            raise TypeError(
                f"create_app takes a sweepq.App or a DSN string, got {type(app_or_dsn).__name__}"
            )
        self.auth = auth
        self.token = None if auth is not None else token
        self.read_only = read_only
        self.signer = Signer.for_token(self.token, self.app.schema)
        self._open = False
        self._lock = anyio.Lock()
        self.templates = environment()

    @property
    def mode(self) -> str:
        """How users are checked: `auth` (the host's), `token`, or `open` (loopback only)."""
        if self.auth is not None:
            return "auth"
        return "token" if self.token is not None else "open"

    async def ready(self) -> App:
        """The App, opened on first use when the dashboard owns it (a mounted sub-application
        gets no lifespan events from its host)."""
        if self.owned and not self._open:
            async with self._lock:
                if not self._open:
                    await self.app.open()
                    self._open = True
        return self.app

    async def close(self) -> None:
        if self.owned and self._open:
            self._open = False
            await self.app.close()

    async def visit(self, request: Request) -> Visit:
        """Who is asking, and their session (a new one if they have none)."""
        session = security.read_session(self.signer, request)
        fresh = session is None
        if session is None:
            session = security.new_session()
        by_bearer = False
        user: str | None
        if self.auth is not None:
            user = await security.call_auth(self.auth, request)
        elif self.token is not None:
            given = security.bearer(request)
            if given is not None:
                by_bearer = security.tokens_equal(given, self.token)
                user = security.TOKEN_USER if by_bearer else None
            else:
                user = session.user
        else:
            # Nobody signs in, so only a loopback name is answered: a page elsewhere that
            # rebinds its own DNS name to 127.0.0.1 would otherwise be this dashboard's origin.
            user = security.OPEN_USER if security.loopback_host(request) else None
        flash = self.signer.unsign(request.cookies.get(security.FLASH_COOKIE))
        return Visit(
            dashboard=self,
            request=request,
            session=session,
            fresh=fresh,
            user=user,
            by_bearer=by_bearer,
            flash=flash if isinstance(flash, dict) else None,
        )


class Visit:
    """One request as the dashboard sees it: who, their session, and where the pages are."""

    def __init__(
        self,
        *,
        dashboard: Dashboard,
        request: Request,
        session: Session,
        fresh: bool,
        user: str | None,
        by_bearer: bool,
        flash: dict[str, Any] | None,
    ) -> None:
        self.dashboard = dashboard
        self.request = request
        self.session = session
        self.fresh = fresh
        self.user = user
        self.by_bearer = by_bearer
        self.flash = flash
        self.new_flash: dict[str, str] | None = None
        self.base = request.scope.get("root_path", "").rstrip("/")
        self.csrf = dashboard.signer.csrf(session)

    @property
    def app(self) -> App:
        return self.dashboard.app

    def url(self, path: str, **params: str | int | None) -> str:
        """A URL of the dashboard: `path` below its base, with the query `params` that are set."""
        return f"{self.base}{path}{query(params)}"

    def render(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        template = self.dashboard.templates.get_template(name)
        values = {"nav": None, **self.common(), **context}
        return HTMLResponse(template.render(values), status_code=status)

    def common(self) -> dict[str, Any]:
        """What every template, page or fragment, may use."""
        return {
            "base": self.base,
            "csrf": self.csrf,
            "user": self.user,
            "mode": self.dashboard.mode,
            "read_only": self.dashboard.read_only,
            "schema": self.app.schema,
            "flash": self.flash,
            "here": self.here(),
            "url": self.url,
        }

    def here(self) -> str:
        """This page's path and query, to come back to after an action."""
        request = self.request
        path: str = request.scope["path"]
        root: str = request.scope.get("root_path", "")
        if root and not path.startswith(root):  # a proxy that strips the prefix it adds
            path = root + path
        return path + (f"?{request.url.query}" if request.url.query else "")

    def back(self, form: Mapping[str, Any], default: str) -> str:
        """Where to go after an action: the form's `back` if it is a page of this dashboard."""
        wanted = form.get("back")
        if isinstance(wanted, str) and self.ours(wanted):
            return wanted
        return self.url(default)

    def ours(self, target: str) -> bool:
        """Whether `target` is a path below this dashboard's base (no other host, no scheme)."""
        parts = urlsplit(target)
        if parts.scheme or parts.netloc or not target.startswith("/") or "\\" in target:
            return False
        return target.startswith("//") is False and (
            parts.path == (self.base or "/") or parts.path.startswith(f"{self.base}/")
        )

    def finish(self, response: Response) -> Response:
        """Set the session cookie if it is new, and the flash cookie (or clear a shown one)."""
        path = self.base or "/"
        secure = self.request.url.scheme == "https"
        if self.fresh and not self.by_bearer and self.request.method == "GET":
            # A refused POST (a cross-site one arrives without the cookie) keeps the session
            # its browser already has: only a page, whose forms need one, starts a session.
            self.set_session(response, self.session)
        if self.new_flash is not None:
            response.set_cookie(
                security.FLASH_COOKIE, self.dashboard.signer.sign(self.new_flash),
                max_age=60, path=path, httponly=True, samesite="strict", secure=secure,
            )  # fmt: skip
        elif self.flash is not None:
            response.delete_cookie(
                security.FLASH_COOKIE, path=path, httponly=True, samesite="strict"
            )
        return response

    def set_session(self, response: Response, session: Session) -> None:
        response.set_cookie(
            security.SESSION_COOKIE,
            self.dashboard.signer.sign(msgspec.to_builtins(session)),
            max_age=security.SESSION_SECONDS,
            path=self.base or "/",
            httponly=True,
            samesite="lax",  # a link from elsewhere opens signed in; CSRF guards the POSTs
            secure=self.request.url.scheme == "https",
        )

    def redirect(self, target: str, message: str, *, ok: bool = True) -> Response:
        self.new_flash = {"text": message, "kind": "ok" if ok else "error"}
        return RedirectResponse(target, status_code=303)

    def error(self, status: int, message: str) -> HTMLResponse:
        return self.render("error.html", status=status, status_code=status, message=message)

    def log(self, message: str, *args: object, **fields: object) -> None:
        """Record an action with who did it: `user X retried job N`."""
        logger.info("user %s " + message, self.user, *args, extra={"user": self.user, **fields})


OPEN_ELSEWHERE = (
    "This dashboard has no sign-in, so it answers only to a loopback address (localhost, "
    "127.0.0.1, [::1]). To serve it to others, set SWEEPQ_WEB_TOKEN or give create_app an auth."
)

Handler = Callable[[Visit], Awaitable[Response]]
FormHandler = Callable[[Visit, FormData], Awaitable[Response]]


def page(
    dashboard: Dashboard, handler: Handler, *, fragment: bool = False
) -> Callable[[Request], Awaitable[Response]]:
    """A GET endpoint: the user must be signed in (else the login page, or 401 for a
    fragment); bad input is a 400 page."""

    async def endpoint(request: Request) -> Response:
        visit = await dashboard.visit(request)
        if visit.user is None and dashboard.mode == "open":
            return visit.finish(visit.error(403, OPEN_ELSEWHERE))
        if visit.user is None:
            if fragment:
                return visit.finish(Response("sign in first", status_code=401))
            return visit.finish(login_page(visit, status=401))
        try:
            await dashboard.ready()
            response = await handler(visit)
        except BadInput as exc:
            response = visit.error(400, str(exc))
        except UNREACHABLE as exc:
            response = unreachable(visit, exc)
        return visit.finish(response)

    return endpoint


def action(dashboard: Dashboard, handler: FormHandler) -> Callable[[Request], Awaitable[Response]]:
    """A POST endpoint that changes something: refused if cross-site (403), not signed in
    (401), read-only (403), or without the session's CSRF token (403); bad input is a 400
    page; a refusal of the library (a `SweepqError`) comes back as an error message."""

    async def endpoint(request: Request) -> Response:
        visit = await dashboard.visit(request)
        form = await read_form(request)
        refusal = refuse_post(visit, form)
        if refusal is not None:
            return visit.finish(refusal)
        if visit.user is None and dashboard.mode == "open":
            return visit.finish(visit.error(403, OPEN_ELSEWHERE))
        if visit.user is None:
            return visit.finish(visit.error(401, "Sign in first."))
        if dashboard.read_only:
            return visit.finish(visit.error(403, "This dashboard is read-only."))
        try:
            await dashboard.ready()
            response = await handler(visit, form)
        except BadInput as exc:
            response = visit.error(400, str(exc))
        except UNREACHABLE as exc:
            response = unreachable(visit, exc)
        except SweepqError as exc:
            response = visit.redirect(visit.back(form, "/"), str(exc), ok=False)
        return visit.finish(response)

    return endpoint


UNREACHABLE: tuple[type[BaseException], ...] = (*TRANSIENT_ERRORS, DatabaseUnavailableError)


def unreachable(visit: Visit, exc: BaseException) -> Response:
    """503 while the database is away: what failed, by its kind only (a driver's message may
    name the server)."""
    logger.warning("a request failed: the database is unreachable (%s)", type(exc).__name__)
    return visit.error(
        503, f"The database could not be reached ({type(exc).__name__}). Try again shortly."
    )


async def read_form(request: Request) -> FormData:
    # Small forms only: no files, a few fields, a part of at most 64 kB.
    return await request.form(max_files=0, max_fields=40, max_part_size=65_536)


def refuse_post(visit: Visit, form: FormData) -> Response | None:
    """The answer to a POST that must not go further: cross-site, or without the CSRF token
    (which a request authorised by its own Authorization header does not need)."""
    if security.cross_site(visit.request):
        return visit.error(403, "Refused: this request comes from another site.")
    if visit.by_bearer:
        return None
    given = form.get("csrf")
    if visit.fresh or not isinstance(given, str) or not security.tokens_equal(given, visit.csrf):
        return visit.error(
            403, "Refused: the form's security token is missing or stale. Reload the page."
        )
    return None


def login_page(
    visit: Visit, *, status: int = 200, message: str | None = None, to: str | None = None
) -> HTMLResponse:
    """The login page (or, with the host's `auth`, a page saying to sign in there); `to` is
    where a sign-in goes on to (this page by default)."""
    return visit.render("login.html", status=status, message=message, next=to or visit.here())


def token_from_environment() -> str | None:
    token = os.environ.get(TOKEN_VARIABLE, "")
    return token or None
