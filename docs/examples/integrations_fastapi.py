"""FastAPI: the lifespan opens the App; a request handler enqueues inside its own transaction."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from fastapi import FastAPI, HTTPException
from fastapi.testclient import TestClient
from pydantic import BaseModel

import sweepq


class Signup(BaseModel):
    email: str


def create_api(app: sweepq.App, users: str) -> FastAPI:
    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        async with app:  # the pool opens at startup and closes at shutdown
            yield

    api = FastAPI(lifespan=lifespan)

    @api.post("/signups", status_code=201)
    async def signup(body: Signup) -> dict[str, int]:
        try:
            # The user and the welcome email commit together, or neither does.
            async with app.pool.acquire() as conn, conn.transaction():
                user_id: int = await conn.fetchval(
                    f"INSERT INTO {users} (email) VALUES ($1) RETURNING id", body.email
                )
                job = await app.enqueue("send_welcome_email", {"user_id": user_id}, conn=conn)
        except asyncpg.UniqueViolationError:
            raise HTTPException(409, "that email address has already signed up") from None
        return {"user_id": user_id, "job_id": job.job_id}

    return api


async def main(dsn: str, schema: str) -> None:
    app = sweepq.App(dsn, schema=schema)
    welcomed: list[int] = []

    @app.task(name="send_welcome_email")
    async def send_welcome_email(ctx: sweepq.Context, user_id: int) -> None:
        welcomed.append(user_id)

    users = f'"{schema}".newsletter_signups'
    async with app:  # at deploy time: migrations, and the example's table
        await app.migrate()
        await app.pool.execute(
            f"CREATE TABLE IF NOT EXISTS {users} ("
            " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text UNIQUE NOT NULL)"
        )

    def serve_requests() -> list[tuple[int, Any]]:
        # TestClient runs the API, lifespan included, on an event loop of its own.
        with TestClient(create_api(app, users)) as client:
            email = f"{uuid.uuid4().hex[:8]}@example.com"
            replies = [client.post("/signups", json={"email": email}) for _ in range(2)]
        return [(r.status_code, r.json()) for r in replies]

    (created, body), (conflict, _) = await asyncio.to_thread(serve_requests)
    assert (created, conflict) == (201, 409)  # the second signup rolled back: no second job

    async with app, sweepq.Worker(app, queues=["default"], concurrency=2) as worker:
        await worker.run_until_idle()
        job = await app.get_job(body["job_id"])
        assert job is not None
        assert job.state is sweepq.JobState.COMPLETED
    assert welcomed == [body["user_id"]]


if __name__ == "__main__":
    dsn = os.environ.get("SWEEPQ_DSN") or sys.exit("set SWEEPQ_DSN=postgresql://... to run this")
    asyncio.run(main(dsn, schema="sweepq_examples"))
