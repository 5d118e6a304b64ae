"""The dashboard inside a FastAPI application, signed in by the application's own login."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from fastapi.testclient import TestClient

import sweepq
from sweepq.web import create_app

# The application's sessions: here a dict, in yours a table, Redis or a signed cookie.
SESSIONS: dict[str, tuple[str, bool]] = {}  # session id -> (user name, is staff)


def staff_user(request: Request) -> str | None:
    """The dashboard's `auth`: the name of the signed-in user if they are staff, else None."""
    name, staff = SESSIONS.get(request.cookies.get("session", ""), ("", False))
    return name if staff else None


def create_api(app: sweepq.App) -> FastAPI:
    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        async with app:  # opens the pool the dashboard reads through too
            yield

    api = FastAPI(lifespan=lifespan)

    @api.post("/login/{name}")
    def login(name: str, response: Response) -> dict[str, str]:
        session = secrets.token_urlsafe(16)
        SESSIONS[session] = (name, name == "grace")
        response.set_cookie("session", session, httponly=True, samesite="lax")
        return {"signed_in": name}

    # Every page and action under /sweepq asks staff_user who is there; None is refused.
    api.mount("/sweepq", create_app(app, auth=staff_user))
    return api


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    async with app:  # at deploy time
        await app.migrate()

    def visit() -> list[tuple[int, str]]:
        with TestClient(create_api(app), base_url="https://shop.example.com") as client:
            pages = [client.get("/sweepq/jobs")]  # nobody signed in
            client.post("/login/linus")  # not staff
            pages.append(client.get("/sweepq/jobs"))
            client.post("/login/grace")
            pages.append(client.get("/sweepq/jobs"))
        return [(page.status_code, page.text) for page in pages]

    (anonymous, _), (linus, _), (grace, page) = await asyncio.to_thread(visit)
    assert (anonymous, linus, grace) == (401, 401, 200)
    assert "grace" in page  # the name that the dashboard's log records with her actions
    assert 'href="/sweepq/sweeps"' in page  # links stay below the mount


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
