"""Who may use the dashboard, and the checks on every request: sessions, CSRF, headers.

- **Who**: an `auth` callable of the host application (its name for the user, or None), else
  the token of `SWEEPQ_WEB_TOKEN` (posted once to the login form, which sets a session cookie,
  or sent as `Authorization: Bearer <token>`), else nobody is asked (the server binds to
  loopback only: `serve` refuses anything else).
- **Sessions** are a cookie signed with HMAC-SHA256 (HttpOnly, SameSite=Lax, so that a link
  from a chat or a ticket opens the page signed in; the POSTs are guarded below): a random
  session id, the signed-in name, and when it was issued. The key is drawn from the token, so
  every process behind a proxy accepts the same cookies (`Signer.for_token` says why a
  dashboard without a token needs no secret key).
- **CSRF**: every form carries a token derived from the session id (HMAC again); every POST
  must carry it, and a POST whose `Origin` is another site, or that the browser says comes from
  another site (`Sec-Fetch-Site`), is refused before anything else.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import inspect
import ipaddress
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import msgspec
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

Auth = Callable[[Request], "str | Awaitable[str | None] | None"]
"""The host application's check: the user's name, or None (not signed in)."""

SESSION_COOKIE = "sweepq_session"
FLASH_COOKIE = "sweepq_flash"
SESSION_SECONDS = 12 * 3600
TOKEN_USER = "token"  # the name recorded for a token's holder who gave none
OPEN_USER = "local"  # the name recorded without auth (loopback only)

SECURITY_HEADERS = {
    # No inline script or style anywhere: the page's script and stylesheet are files of the
    # package, its charts are SVG elements, its progress bars <progress>.
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
        "object-src 'none'"
    ),
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}


class Session(msgspec.Struct, frozen=True):
    """What the session cookie holds."""

    sid: str
    user: str | None = None  # signed in with the token under this name
    issued: float = 0.0


class Signer:
    """Signs and checks the values of the dashboard's cookies and its CSRF tokens."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def for_token(cls, token: str | None, schema: str) -> Signer:
        """The dashboard's signer: its key is drawn from `token` when there is one (a session
        names who signed in with it: only the token's holder may sign one).

        Without a token a session names nobody (the host's `auth` says who, or nobody needs
        to): it only ties the CSRF token of a browser's forms to that browser's HttpOnly
        cookie, which needs no secret key. The key is then drawn from the schema, so that
        every process serving the same dashboard accepts the forms of the others.
        """
        material = f"token:{token}" if token is not None else f"schema:{schema}"
        return cls(hmac.new(material.encode(), b"sweepq web cookies", hashlib.sha256).digest())

    def _mac(self, data: bytes) -> str:
        digest = hmac.new(self._key, data, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def sign(self, value: Any) -> str:
        data = base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")
        return f"{data}.{self._mac(data.encode())}"

    def unsign(self, signed: str | None) -> Any:
        """The value signed, or None if `signed` is missing, malformed or not ours."""
        if not signed or signed.count(".") != 1:
            return None
        data, mac = signed.split(".")
        if not hmac.compare_digest(mac, self._mac(data.encode())):
            return None
        try:
            return json.loads(base64.urlsafe_b64decode(data + "=" * (-len(data) % 4)))
        except ValueError:
            return None

    def csrf(self, session: Session) -> str:
        """The CSRF token of the session's forms."""
        return self._mac(f"csrf:{session.sid}".encode())


def new_session(user: str | None = None) -> Session:
    return Session(sid=secrets.token_urlsafe(18), user=user, issued=time.time())


def read_session(signer: Signer, request: Request) -> Session | None:
    """The request's session, if its cookie is ours and not older than SESSION_SECONDS."""
    value = signer.unsign(request.cookies.get(SESSION_COOKIE))
    try:
        session = msgspec.convert(value, Session)
    except msgspec.ValidationError:
        return None
    if not 0 <= time.time() - session.issued <= SESSION_SECONDS:
        return None
    return session


def tokens_equal(given: str, token: str) -> bool:
    """Compare a given token with the real one in constant time."""
    return hmac.compare_digest(given.encode(), token.encode())


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def cross_site(request: Request) -> bool:
    """Whether a browser says the request comes from another site: by `Sec-Fetch-Site`, or an
    `Origin` whose host is not this one (a proxy may end TLS, so the scheme is not compared).

    This host is the `Host` header, or the `X-Forwarded-Host` a proxy that rewrites `Host`
    passes on: a page of another site cannot set that header on a form's POST (and the
    dashboard answers no preflight that would let its script do so).
    """
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return True
    origin = request.headers.get("origin")
    if origin is None:
        return False
    hosts = {request.headers.get("host", "").lower()}
    forwarded = request.headers.get("x-forwarded-host")
    if forwarded:
        hosts.add(forwarded.split(",")[0].strip().lower())
    return origin == "null" or urlsplit(origin).netloc.lower() not in hosts


def loopback_host(request: Request) -> bool:
    """Whether the request's Host names a loopback address: `localhost` (or a name below it),
    127.0.0.0/8 or ::1, with any port. No name is resolved."""
    host = request.headers.get("host", "").strip().lower()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.split(":")[0]
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def call_auth(auth: Auth, request: Request) -> str | None:
    """The host's name for the user, awaited if the check is async."""
    result = auth(request)
    if inspect.isawaitable(result):
        result = await result
    if result is not None and not isinstance(result, str):
        raise TypeError(f"the dashboard's auth must return a str or None, got {result!r}")
    return result or None  # an empty name is nobody


class SecurityHeaders:
    """ASGI middleware adding SECURITY_HEADERS to every response (pages, files, errors)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.decode() not in _OURS]
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


_OURS = frozenset(SECURITY_HEADERS)
