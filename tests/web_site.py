"""A dashboard to look at: the browser tests (tests/test_web_browser.py) and the docs'
screenshots (docs/screenshots.py) share it, so the pictures show what the tests check.

`Site` starts a process (`python tests/web_site.py DSN SCHEMA ITEMS DELAY`) that fills a fresh
schema and serves the dashboard on it:

- jobs in every state: completed (one with a result), failed with tracebacks (one whose args
  hold `<script>`), cancelled, available, scheduled for later, and running (held by a worker
  until the site stops), plus an hour of finished jobs for the overview's chart;
- concurrency key `stripe` at its limit of 1, with a job running on it and two waiting;
- two cron schedules (one in Europe/Paris; one ticking every 15 seconds, its jobs worked);
- a finished sweep run, and a running one over ITEMS rows that workers move along (each item
  takes DELAY seconds; a few fail);
- uvicorn on 127.0.0.1 and a free port, the token in `SWEEPQ_WEB_TOKEN`.

The process prints `ready <json>` (its port and the ids of what it made), serves until its
stdin closes, then stops its workers and drops the schema (`Site` drops it too, should the
process have died).
"""

from __future__ import annotations

import json
import os
import secrets
import select
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, ClassVar

import anyio
import msgspec

import sweepq

HERE = Path(__file__).resolve().parent
TOKEN_VARIABLE = "SWEEPQ_WEB_TOKEN"
CHROMIUM = Path("/usr/bin/chromium")  # Debian's package; no browser is ever downloaded
KEY = "stripe"
SWEEP = "reindex_products"
DONE_SWEEP = "expire_sessions"
CRON = ("nightly-report", "refresh-rates")

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, Playwright


class Made(msgspec.Struct, frozen=True, kw_only=True):
    """The ids of what the site holds, named by what the tests do with them."""

    completed: list[int]
    with_result: int  # a completed job with a result
    failed: list[int]  # each with its traceback
    markup: int  # a failed job whose args hold <script>
    to_retry: int  # a failed job the tests retry
    cancelled: list[int]
    available: list[int]
    to_cancel: int  # an available job the tests cancel
    scheduled: list[int]
    running: int  # held by a worker until the site stops
    waiting_on_key: list[int]  # available, behind the key at its limit
    run: int  # the sweep run the workers move along
    done_run: int  # a sweep run that has completed


# the site's process ---------------------------------------------------------------------------


def register(app: sweepq.App, gate: anyio.Event) -> None:
    """The site's tasks, sweeps and cron schedules."""

    @app.task(name="send_email", queue="mail")
    async def send_email(ctx: sweepq.Context, to: str, subject: str) -> None:
        return None

    @app.task(name="resize_image", queue="images")
    async def resize_image(ctx: sweepq.Context, path: str, width: int) -> dict[str, Any]:
        return {"path": path.replace(".jpg", f"-{width}.jpg"), "width": width, "bytes": 48_213}

    @app.task(name="sync_inventory", max_attempts=1)
    async def sync_inventory(ctx: sweepq.Context, warehouse: str, note: str = "") -> None:
        await fetch_stock(warehouse)

    @app.task(name="charge_card", queue="payments")
    async def charge_card(ctx: sweepq.Context, order: int, cents: int) -> None:
        await gate.wait()

    @app.task(name="generate_report", queue="reports")
    async def generate_report(ctx: sweepq.Context, kind: str) -> None:
        return None

    @app.task(name="refresh_rates", queue="reports")
    async def refresh_rates(ctx: sweepq.Context, source: str) -> None:
        return None

    app.cron(CRON[0], "0 3 * * *", generate_report, {"kind": "daily"}, tz="Europe/Paris")
    app.cron(CRON[1], "*/15 * * * * *", refresh_rates, {"source": "ecb"})

    class Products(sweepq.TableSweep):
        name = SWEEP
        table = f"{app.schema}.items"
        key: ClassVar[tuple[str, ...]] = ("created_at", "id")
        queue = "sweeps"
        page_size = 50
        window = 200
        max_attempts = 1

        async def handle(self, ctx: sweepq.Context, item: dict[str, Any]) -> None:
            await anyio.sleep(self.params.get("delay", 0))
            if item["fail"]:
                raise LookupError(f"product {item['id']} has no category")

    class Sessions(Products):
        name = DONE_SWEEP
        where = "id <= 200"

    app.register_sweep(Products)
    app.register_sweep(Sessions)


async def fetch_stock(warehouse: str) -> None:
    """A call that fails as a real one would, a few frames deep."""
    raise ConnectionRefusedError(f"inventory service for {warehouse!r} refused the connection")


HISTORY_SQL = """
INSERT INTO {jobs} (task, queue, state, args, attempt, max_attempts, run_at, created_at,
                    attempted_at, finished_at, failure_reason, errors)
SELECT task, queue, state, args, CASE WHEN state = 'failed' THEN 3 ELSE 1 END, 3,
       at - interval '2 seconds', at - interval '3 seconds', at - interval '1 second', at,
       CASE WHEN state = 'failed' THEN 'max_attempts_exceeded' END,
       CASE WHEN state = 'failed' THEN jsonb_build_array(jsonb_build_object(
           'at', at, 'kind', 'exception', 'attempt', 3, 'error', error))
       ELSE '[]'::jsonb END
FROM (
    SELECT now() - make_interval(secs => (m * 60 + (i * 37) % 60)::float8) AS at,
           (ARRAY['send_email', 'resize_image'])[1 + i % 2] AS task,
           (ARRAY['mail', 'images'])[1 + i % 2] AS queue,
           (ARRAY['SMTPServerDisconnected: smtp.example.com closed the connection',
                  'TimeoutError: the image store did not answer within 30 s'])[1 + i % 2]
               AS error,
           (CASE WHEN i % 29 = 0 THEN 'failed' ELSE 'completed' END)::{state} AS state,
           json_build_object('n', i) AS args
    FROM generate_series(1, 59) AS m,
         generate_series(1, 100 + (60 * sin(m / 6.0))::int + (m % 7) * 8) AS i
) AS history
ORDER BY at  -- ids grow with time, as they would have
"""


PEOPLE = ("ada", "grace", "linus")
MARKUP = {"warehouse": "oslo", "note": "<script>x()</script>"}


async def enqueued(
    app: sweepq.App, task: str, args: list[dict[str, Any]], **options: Any
) -> list[int]:
    """Enqueue `task` once per args; the job ids."""
    return [(await app.enqueue(task, one, **options)).job_id for one in args]


async def fill(app: sweepq.App, *, items: int) -> dict[str, Any]:
    """Every kind of job but the running ones (no worker runs yet); their ids."""
    from factories import create_items
    from sweepq.core.ident import ident
    from sweepq.testing import drain

    schema = ident(app.schema)
    # Finished over the last hour, first, so the jobs below are the newest on the jobs page.
    await app.pool.execute(HISTORY_SQL.format(jobs=f"{schema}.jobs", state=f"{schema}.job_state"))
    completed = await enqueued(
        app, "send_email", [{"to": f"{who}@example.com", "subject": "Welcome"} for who in PEOPLE]
    )
    [with_result] = await enqueued(app, "resize_image", [{"path": "cat.jpg", "width": 640}])
    failed = await enqueued(
        app,
        "sync_inventory",
        [{"warehouse": "lyon"}, {"warehouse": "porto"}, MARKUP],
    )
    outcomes = await drain(app, queues=["mail", "images", "default"])
    assert outcomes == {"completed": 4, "failed": 3}, outcomes
    [cancelled] = await enqueued(app, "send_email", [{"to": "old@example.com", "subject": "Bye"}])
    await app.cancel(cancelled, reason="customer left")
    available = await enqueued(
        app, "send_email", [{"to": f"{who}@example.com", "subject": "Invoice"} for who in PEOPLE]
    )
    reminder = {"to": "ada@example.com", "subject": "Reminder"}
    scheduled = await enqueued(app, "send_email", [reminder], delay=3600)
    await app.set_concurrency_limit(KEY, 1)
    orders = [{"order": 1000 + i, "cents": 1999} for i in range(3)]
    keyed = await enqueued(app, "charge_card", orders, concurrency_key=KEY)
    await create_items(app, items, failing=range(250, items + 1, 400))
    await app.pool.execute(f"ANALYZE {schema}.jobs")  # the pages' estimates
    return {
        "completed": completed,
        "with_result": with_result,
        "failed": failed,
        "markup": failed[-1],
        "to_retry": failed[1],
        "cancelled": [cancelled],
        "available": available,
        "to_cancel": available[-1],
        "scheduled": scheduled,
        "running": keyed[0],
        "waiting_on_key": keyed[1:],
    }


async def wait_until(condition: Any, what: str, timeout: float = 60.0) -> None:
    """Poll the async `condition()` until it holds."""
    with anyio.fail_after(timeout):
        while not await condition():
            await anyio.sleep(0.05)
    del what  # named for the reader of a timeout's traceback


@asynccontextmanager
async def workers(app: sweepq.App) -> AsyncIterator[None]:
    """One worker for payments (its job on the key waits for the gate) and the cron's reports,
    one for the sweeps; either may lead maintenance."""
    quick: dict[str, Any] = {
        "poll_seconds": 0.2,
        "maintenance_seconds": 0.5,
        "leader_ttl_seconds": 3.0,
    }
    fleet = [
        sweepq.Worker(app, queues=["payments", "reports"], concurrency=2, **quick),
        sweepq.Worker(app, queues=["sweeps"], concurrency=4, **quick),
    ]
    async with AsyncExitStack() as stack:
        for worker in fleet:
            await stack.enter_async_context(worker)
        async with anyio.create_task_group() as tg:
            for worker in fleet:
                tg.start_soon(worker.run)
            try:
                yield
            finally:
                # Not stop(): its graceful end takes seconds, and the schema goes next anyway.
                tg.cancel_scope.cancel()


async def serve_site(dsn: str, schema: str, items: int, delay: float) -> None:
    import uvicorn

    from factories import drop_schema
    from sweepq.web import create_app

    app = sweepq.App(dsn, schema=schema, pool_max_size=10)
    gate = anyio.Event()
    register(app, gate)
    async with app:
        try:
            await app.migrate()
            made = await fill(app, items=items)
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            config = uvicorn.Config(create_app(app), log_level="warning", access_log=False)
            server = uvicorn.Server(config)
            async with workers(app), anyio.create_task_group() as tg:

                async def running() -> bool:
                    job = await app.get_job(made["running"])
                    return job is not None and job.state == "running"

                await wait_until(running, "the payment job runs")
                done = (await app.start_sweep(DONE_SWEEP)).run_id

                async def ended() -> bool:
                    run = await app.sweep_status(done)
                    return run is not None and run.ended

                await wait_until(ended, "the small sweep run ends")
                made["done_run"] = done
                made["run"] = (await app.start_sweep(SWEEP, {"delay": delay})).run_id
                tg.start_soon(server.serve, [listener])
                while not server.started:
                    await anyio.sleep(0.02)
                port = listener.getsockname()[1]
                print("ready", json.dumps({"port": port, "made": made}), flush=True)
                await anyio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
                gate.set()
                server.should_exit = True
        finally:
            await drop_schema(app.pool, schema)


# the tests' side --------------------------------------------------------------------------------


class Site:
    """The site's process seen from outside: where it is, its token, the ids of what it made,
    and reads of its database (psycopg, so tests without an event loop can check it)."""

    def __init__(
        self, dsn: str, *, items: int = 6000, delay: float = 0.05, schema: str | None = None
    ) -> None:
        self.dsn = dsn
        self.items = items
        self.delay = delay
        self.schema = schema or f"web_{uuid.uuid4().hex[:12]}"
        self.token = secrets.token_urlsafe(24)
        self.url = ""
        self._process: subprocess.Popen[str] | None = None
        self._log: IO[bytes] | None = None
        self._made: Made | None = None

    @property
    def made(self) -> Made:
        assert self._made is not None, "the site has not started"
        return self._made

    def __enter__(self) -> Site:
        found = self.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", self.schema)
        if found[0][0]:
            raise RuntimeError(f"schema {self.schema!r} exists already: the site makes its own")
        self._log = tempfile.TemporaryFile()
        self._process = subprocess.Popen(
            [sys.executable, str(HERE / "web_site.py"), self.dsn, self.schema,
             str(self.items), str(self.delay)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
            env={**os.environ, TOKEN_VARIABLE: self.token}, cwd=HERE,
        )  # fmt: skip
        try:
            ready = self._ready(timeout=90.0)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.url = f"http://127.0.0.1:{ready['port']}"
        self._made = msgspec.convert(ready["made"], Made)
        return self

    def _ready(self, *, timeout: float) -> dict[str, Any]:
        process = self._process
        assert process is not None
        assert process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            readable, _, _ = select.select([process.stdout], [], [], 0.2)
            if readable:
                line = process.stdout.readline()
                if line.startswith("ready "):
                    found: dict[str, Any] = json.loads(line.removeprefix("ready "))
                    return found
                if line == "":
                    break  # it ended
        raise RuntimeError(f"the dashboard's site did not start:\n{self.log()}")

    def log(self) -> str:
        """What the process wrote to stderr so far."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-8000:]

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        process = self._process
        if process is not None:
            assert process.stdin is not None
            process.stdin.close()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            assert process.stdout is not None
            process.stdout.close()
        self.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        if self._log is not None:
            self._log.close()

    # the database, read and written directly

    def execute(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cursor = conn.execute(sql.replace("{schema}", f'"{self.schema}"'), params)
            return cursor.fetchall() if cursor.description is not None else []

    def job_state(self, job_id: int) -> str:
        rows = self.execute("SELECT state::text FROM {schema}.jobs WHERE id = %s", job_id)
        assert rows, f"no job {job_id}"
        return str(rows[0][0])

    def job_attempt(self, job_id: int) -> int:
        rows = self.execute("SELECT attempt FROM {schema}.jobs WHERE id = %s", job_id)
        return int(rows[0][0])

    def key_limit(self, key: str) -> int | None:
        rows = self.execute("SELECT max_running FROM {schema}.concurrency_keys WHERE key = %s", key)
        return None if rows[0][0] is None else int(rows[0][0])

    def sweep_state(self, run_id: int) -> str:
        rows = self.execute("SELECT state::text FROM {schema}.sweep_runs WHERE id = %s", run_id)
        return str(rows[0][0])


# a browser ---------------------------------------------------------------------------------------


def chromium(playwright: Playwright) -> Browser:
    """Debian's Chromium, headless, driven by Playwright (which downloads nothing here)."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)


def signed_in(browser: Browser, site: Site, *, name: str = "ada") -> BrowserContext:
    """A browser context signed in with the site's token through the login form, 1280x800."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.goto(f"{site.url}/login")
    page.get_by_label("Token").fill(site.token)
    page.get_by_label("Your name").fill(name)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{site.url}/")
    page.close()
    return context


def open_page(context: BrowserContext, url: str) -> Page:
    page = context.new_page()
    page.goto(url)
    return page


if __name__ == "__main__":
    anyio.run(serve_site, sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
