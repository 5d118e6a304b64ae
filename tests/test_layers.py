"""Imports point one way: cli -> sweeps -> core."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "sweepq"


def imported_modules(source: str, location: Path) -> set[str]:
    """Absolute names of every module `source` (living at `location`) imports.

    Relative imports are resolved against the package of `location`; for `from X import y`
    both `X` and `X.y` are listed, since `y` may be a module (`from .. import cli`).
    """
    package = ["sweepq", *location.parent.relative_to(PACKAGE).parts]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, filename=str(location))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def offending(layer: str, forbidden: tuple[str, ...]) -> list[str]:
    bad: list[str] = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for module in sorted(imported_modules(path.read_text(encoding="utf-8"), path)):
            if any(module == f or module.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(PACKAGE)} imports {module}")
    return bad


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        ("core", ("sweepq.sweeps", "sweepq.cli", "sweepq.contrib", "django")),
        ("sweeps", ("sweepq.cli", "sweepq.contrib", "django")),
        ("testing", ("sweepq.contrib", "django")),
    ],
)
def test_a_layer_never_imports_the_layers_above_it(layer: str, forbidden: tuple[str, ...]) -> None:
    assert list((PACKAGE / layer).rglob("*.py")), f"no modules under src/sweepq/{layer}"
    assert offending(layer, forbidden) == []


# Where Django may be imported: its integration, and the worker command's --django (lazily).
DJANGO_HOMES = ("contrib/django/", "cli/django_worker.py")


def test_only_the_django_integration_imports_django() -> None:
    importers = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if any(
            m == "django" or m.startswith("django.")
            for m in imported_modules(path.read_text(encoding="utf-8"), path)
        )
    ]
    assert importers
    assert [p for p in importers if not p.startswith(DJANGO_HOMES)] == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from ..sweeps import Sweep", "sweepq.sweeps"),
        ("from .. import cli", "sweepq.cli"),
        ("from ..cli.main import app", "sweepq.cli.main"),
        ("import sweepq.sweeps.runs", "sweepq.sweeps.runs"),
        ("from sweepq import sweeps", "sweepq.sweeps"),
        ("def f():\n    from ..sweeps import runs\n", "sweepq.sweeps.runs"),
    ],
)
def test_the_reader_sees_every_form_of_import(source: str, expected: str) -> None:
    found = imported_modules(source, PACKAGE / "core" / "app.py")
    assert expected in found


def test_the_reader_resolves_relative_imports_to_their_package() -> None:
    found = imported_modules(
        "from .jobs import Job\nfrom . import ident", PACKAGE / "core" / "x.py"
    )
    assert {"sweepq.core.jobs", "sweepq.core.ident"} <= found
    assert not any(m.startswith(("sweepq.sweeps", "sweepq.cli")) for m in found)


# the sweeps use the core through its API --------------------------------------------------------

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


def test_no_statement_of_the_sweeps_names_a_table_of_the_core() -> None:
    tables = "|".join(sorted(core_tables()))
    reference = re.compile(rf"\{{schema\}}\.({tables})\b|\b(FROM|JOIN|INTO|UPDATE)\s+({tables})\b")
    offenders: list[str] = []
    for path in sorted((PACKAGE / "sweeps").rglob("*.sql")):
        if str(path.relative_to(PACKAGE)) in HISTORY:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            code = line.split("--", 1)[0]
            if reference.search(code):
                offenders.append(f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}")
    assert offenders == []


# no import cycles -----------------------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (type-checking imports included).

    `from package import module` counts as importing the module, not the package's __init__;
    packages' __init__ modules (which re-export) are left out.
    """
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    packages = {module_name(p) for p in PACKAGE.rglob("__init__.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        if name in packages:
            continue
        found = imported_modules(path.read_text(encoding="utf-8"), path)
        submodules = {m for m in found if m in paths and m not in packages}
        graph[name] = submodules - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
