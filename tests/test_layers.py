"""The layers: contrib > cli > testing > sweeps > core.

Which module may import which is import-linter's to check: the contracts in pyproject.toml
(`[tool.importlinter]`), run by `lint-imports` in CI and by the test below. What stays here is
what import-linter cannot see: the modules a fresh interpreter really loads, and the SQL of the
layers above the core, which must reach the core's tables through its statements and functions.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "sweepq"


def contracts() -> dict[str, dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}


def test_the_layers_contract_orders_every_layer_and_every_top_level_module() -> None:
    layers = contracts()["layers"]
    assert layers["containers"] == ["sweepq"]
    assert layers["exhaustive"] is True
    order = [name for layer in layers["layers"] for name in re.split(r"\s*[|:]\s*", layer)]
    main = [name for name in order if name in ("contrib", "cli", "testing", "sweeps", "core")]
    assert main == ["contrib", "cli", "testing", "sweeps", "core"]


def test_every_contract_is_kept() -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    run = subprocess.run(
        [str(lint_imports), "--no-cache", "--no-logo"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    kept = re.findall(r"\bKEPT\b", run.stdout)
    assert len(kept) == len(contracts()), run.stdout


# what a fresh interpreter loads ------------------------------------------------------------------


def loaded(module: str, *others: str) -> set[str]:
    """Which of `others` (top-level packages) importing `module` loads, in a fresh interpreter."""
    code = f"import sys, {module}; print(' '.join(m for m in {others!r} if m in sys.modules))"
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return set(run.stdout.split())


FRAMEWORKS = ("django", "typer", "rich", "click", "opentelemetry", "prometheus_client", "pytest")


def test_importing_sweepq_loads_no_framework() -> None:
    assert loaded("sweepq", *FRAMEWORKS) == set()


def test_the_pytest_plugin_loads_no_command_line() -> None:
    # pytest loads it in every test run wherever sweepq is installed (the pytest11 entry point).
    assert loaded("sweepq.testing.plugin", *FRAMEWORKS) == {"pytest"}


# The backend needs Django 6 (tests/django_project); its settings stand in for it here.
@pytest.mark.parametrize("module", ["sweepq.contrib.otel", "sweepq.contrib.django.settings"])
def test_an_integration_loads_no_command_line(module: str) -> None:
    assert loaded(module, "typer", "rich", "click") == set()


def test_the_django_worker_hook_loads_nothing_of_django_until_it_is_called() -> None:
    # `sweepq worker --django` checks DJANGO_SETTINGS_MODULE before Django is imported.
    assert loaded("sweepq.contrib.django.bootstrap", "django", "typer", "rich") == set()


# the layers above the core use it through its statements and functions -------------------------

CORE_TABLE = re.compile(r"CREATE TABLE \{schema\}\.(\w+)")


def core_tables() -> set[str]:
    found: set[str] = set()
    for path in (PACKAGE / "core" / "migrations").glob("*.sql"):
        found.update(CORE_TABLE.findall(path.read_text(encoding="utf-8")))
    return found | {"schema_migrations"}


def test_the_core_tables_are_found() -> None:
    assert {"jobs", "concurrency_keys", "concurrency_wakeups", "leaders"} <= core_tables()


# The sweeps' first migration made an index of their own over the core's jobs; the next one drops
# it (a released migration is never edited). The fourth gives the leaves and runs that older
# versions left behind what later ones record through the core's API (their job group, where
# their links run): rows written before that API existed can only be reached by name. The fifth
# registers the names the sweeps keep in the core's registry for layers (reserved_names, read
# by the SQL enqueue function), which is how a layer tells the core of them in SQL;
# test_roles.py holds its rows equal to SweepsLayer.reserved. Every other file must use the
# core's API instead.
HISTORY = {
    "sweeps/migrations/0001_initial.sql",
    "sweeps/migrations/0004_carry_forward.sql",
    "sweeps/migrations/0005_reserved_names.sql",
}


@pytest.mark.parametrize("layer", ["sweeps", "contrib", "cli"])
def test_no_statement_of_a_layer_above_the_core_names_a_table_of_the_core(layer: str) -> None:
    tables = "|".join(sorted(core_tables()))
    reference = re.compile(rf"\{{schema\}}\.({tables})\b|\b(FROM|JOIN|INTO|UPDATE)\s+({tables})\b")
    offenders: list[str] = []
    files = sorted((PACKAGE / layer).rglob("*.sql"))
    assert files, f"no statements under src/sweepq/{layer}"
    for path in files:
        if str(path.relative_to(PACKAGE)) in HISTORY:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            code = line.split("--", 1)[0]
            if reference.search(code):
                offenders.append(f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}")
    assert offenders == []
