"""The dashboard behind a reverse proxy under /sweepq: the proxy signs users in, and this one
serves them read-only."""

from __future__ import annotations

import asyncio
import os
import re
import sys

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.testclient import TestClient

import sweepq
from sweepq.web import create_app


def proxy_user(request: Request) -> str | None:
    """The user the proxy signed in (nginx `auth_request`, oauth2-proxy, ...). Trust this
    header only where the proxy alone can reach the dashboard, and sets it on every request."""
    return request.headers.get("x-forwarded-user")


def dashboard(dsn: str, schema: str) -> Starlette:
    # `uvicorn myproject.dashboard:web --host 127.0.0.1 --port 8080` serves it; given a DSN,
    # the dashboard opens a pool of its own (four connections at most) in the ASGI lifespan.
    return create_app(dsn, schema=schema, auth=proxy_user, read_only=True, base_path="/sweepq")


async def main(dsn: str, schema: str) -> None:
    async with sweepq.App(dsn, schema=schema) as app:  # at deploy time
        await app.migrate()
    web = dashboard(dsn, schema)

    def visit() -> tuple[int, str, int, str]:
        # What the proxy sends on: the path under /sweepq, the user it signed in.
        headers = {"X-Forwarded-User": "ada"}
        with TestClient(web, base_url="http://127.0.0.1:8080") as client:
            anonymous = client.get("/sweepq/").status_code
            page = client.get("/sweepq/jobs", headers=headers).text
            found = re.search(r'name="csrf" content="([^"]+)"', page)
            assert found is not None
            cancel = client.post("/sweepq/jobs/1/cancel", data={"csrf": found[1]}, headers=headers)
        return anonymous, page, cancel.status_code, cancel.text

    anonymous, page, refused, why = await asyncio.to_thread(visit)
    assert anonymous == 401
    assert 'href="/sweepq/jobs/retry' not in page  # read-only: no action is offered
    assert 'href="/sweepq/sweeps"' in page  # every link below the proxy's path
    assert refused == 403
    assert "read-only" in why


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
