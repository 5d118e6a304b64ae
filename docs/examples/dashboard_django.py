"""The dashboard beside a Django project under ASGI, for Django's staff, signed in by Django."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import tempfile
from importlib import import_module
from pathlib import Path
from typing import Any, cast

import django
import httpx
import uvicorn
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import path
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

import sweepq
from sweepq.web import create_app


async def django_staff(request: Request) -> str | None:
    """The dashboard's `auth`: the Django user of the request's session cookie, if staff."""
    from django.contrib.auth import aget_user

    session_store = import_module(settings.SESSION_ENGINE).SessionStore
    django_request = HttpRequest()
    django_request.session = session_store(request.cookies.get(settings.SESSION_COOKIE_NAME))
    user = await aget_user(django_request)  # AnonymousUser without a valid session
    staff = user.is_active and getattr(user, "is_staff", False)
    return user.get_username() if staff else None


def application(dsn: str, schema: str) -> ASGIApp:
    """asgi.py: /sweepq/... to the dashboard (its own pool of the DSN), the rest to Django."""
    from django.core.asgi import get_asgi_application

    django_app = cast(ASGIApp, get_asgi_application())  # its stubs type ASGI more narrowly
    dashboard = create_app(dsn, schema=schema, auth=django_staff, base_path="/sweepq")

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or f"{scope['path']}/".startswith("/sweepq/"):
            await dashboard(scope, receive, send)  # Django's ASGI handler has no lifespan
        else:
            await django_app(scope, receive, send)

    return route


# The rest is the Django project a real one already has: its settings and a view.


def hello(request: HttpRequest) -> HttpResponse:
    return HttpResponse("hello from Django")


urlpatterns = [path("hello/", hello)]


def configure(database: Path) -> None:
    settings.configure(
        SECRET_KEY="only-for-this-example",
        ALLOWED_HOSTS=["127.0.0.1"],
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
        ],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(database)}},
    )
    django.setup()


def signed_in(username: str, *, staff: bool) -> dict[str, str]:
    """The session cookie of a Django user signed in (as Django's login view would)."""
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", verbosity=0)
    user = User.objects.create_user(username, is_staff=staff)
    client = Client()
    client.force_login(user)
    return {settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value}


async def serve_and_visit(dsn: str, schema: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        configure(Path(folder) / "django.sqlite3")
        grace = await asyncio.to_thread(signed_in, "grace", staff=True)
        linus = await asyncio.to_thread(signed_in, "linus", staff=False)
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()  # requests wait here until the server accepts them
        config = uvicorn.Config(application(dsn, schema), log_level="warning")
        server = uvicorn.Server(config)
        serving = asyncio.create_task(server.serve([listener]))
        base = f"http://127.0.0.1:{listener.getsockname()[1]}"
        try:
            async with httpx.AsyncClient(base_url=base) as client:
                replies: dict[str, Any] = {
                    "django": await client.get("/hello/"),
                    "anonymous": await client.get("/sweepq/jobs"),
                    "linus": await client.get("/sweepq/jobs", cookies=linus),
                    "grace": await client.get("/sweepq/jobs", cookies=grace),
                }
        finally:
            server.should_exit = True
            await serving
    assert replies["django"].text == "hello from Django"
    assert replies["anonymous"].status_code == 401
    assert replies["linus"].status_code == 401  # signed in to Django, but not staff
    assert replies["grace"].status_code == 200
    assert "grace" in replies["grace"].text


async def main(dsn: str, schema: str) -> None:
    async with sweepq.App(dsn, schema=schema) as app:  # at deploy time
        await app.migrate()
    # Django's settings are set once per process: this example sets its own in a process of
    # its own (this file, run with --django).
    process = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--django", dsn, schema, stderr=asyncio.subprocess.PIPE
    )
    _, errors = await process.communicate()
    assert process.returncode == 0, errors.decode()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--django"]:
        asyncio.run(serve_and_visit(sys.argv[2], sys.argv[3]))
    else:
        dsn = os.environ.get("SWEEPQ_DSN") or sys.exit(
            "set SWEEPQ_DSN=postgresql://... to run this"
        )
        asyncio.run(main(dsn, schema="sweepq_examples"))
