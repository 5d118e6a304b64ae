"""Running `sweepq` in-process (typer's CliRunner) for the tests of the command line.

Commands run their own event loop, so `invoke` runs them in a thread while the test's loop holds
the `app` fixture used to set up and check the data; `invoke_here` runs one in the main thread,
as a worker installs signal handlers.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path

import anyio
from typer.testing import CliRunner, Result

import sweepq
from sweepq.cli import cli

_runner_lock = anyio.Lock()


async def invoke(args: Sequence[str], *, env: Mapping[str, str | None] | None = None) -> Result:
    """Run `sweepq ARGS` in a thread (the command runs its own event loop)."""
    # No DSN or schema from the environment unless a test says so.
    base: dict[str, str | None] = {
        "SWEEPQ_DSN": None,
        "DATABASE_URL": None,
        "SWEEPQ_SCHEMA": None,
        "COLUMNS": "200",
    }
    runner = CliRunner(env={**base, **(env or {})})
    async with _runner_lock:  # the runner swaps sys.stdout: one at a time
        return await anyio.to_thread.run_sync(lambda: runner.invoke(cli, list(args)))


def db_args(app: sweepq.App) -> list[str]:
    return ["--dsn", app.dsn, "--schema", app.schema]


def one_line_error(result: Result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


NO_DATABASE = (
    "postgresql://x@127.0.0.1:1/x"  # nothing listens there: a worker stops after its banner
)
BANNER_LINE = re.compile(r"^  (\S+) += (.*)  \((.+)\)$", re.MULTILINE)

_modules = itertools.count()
PLAIN_APP = "import sweepq\napp = sweepq.App()\n"


def app_module(folder: Path, body: str) -> str:
    """Write `body` as a new module in `folder` (the cwd, see the `app_dir` fixture); its name."""
    name = f"cli_app_{uuid.uuid4().hex[:8]}_{next(_modules)}"
    (folder / f"{name}.py").write_text(body)
    return name


def invoke_here(args: Sequence[str], env: Mapping[str, str | None] | None = None) -> Result:
    """Run `sweepq ARGS` in this thread, the main one: a worker installs signal handlers."""
    base = {
        "SWEEPQ_DSN": None,
        "DATABASE_URL": None,
        "SWEEPQ_SCHEMA": None,
        "SWEEPQ_APP": None,
        "COLUMNS": "200",
    }
    return CliRunner(env={**base, **(env or {})}).invoke(cli, list(args))


def banner(
    spec: str, *args: str, env: Mapping[str, str] | None = None
) -> dict[str, tuple[str, str]]:
    """The worker's start banner as name -> (value, source); its database cannot be reached."""
    result = invoke_here(["worker", spec, *args], env)
    assert "cannot reach PostgreSQL" in one_line_error(result)
    return {m[1]: (m[2], m[3]) for m in BANNER_LINE.finditer(result.stdout)}


async def worked(app: sweepq.App) -> dict[str, int]:
    """Three jobs: one completed, one failed, one still available (scheduled)."""

    @app.task(name="ok")
    async def ok(ctx: sweepq.Context, n: int) -> None:
        return None

    @app.task(name="boom", max_attempts=1)
    async def boom(ctx: sweepq.Context, n: int) -> None:
        raise RuntimeError("it broke")

    done = await app.enqueue(ok, {"n": 1})
    failed = await app.enqueue(boom, {"n": 2})
    later = await app.enqueue(ok, {"n": 3}, delay=timedelta(hours=1))
    async with sweepq.Worker(app, concurrency=2) as worker:
        await worker.run_until_idle()
    return {"completed": done.job_id, "failed": failed.job_id, "available": later.job_id}
