"""Imports point one way: cli -> sweeps -> core."""

from __future__ import annotations

import ast
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
        ("core", ("sweepq.sweeps", "sweepq.cli")),
        ("sweeps", ("sweepq.cli",)),
    ],
)
def test_a_layer_never_imports_the_layers_above_it(layer: str, forbidden: tuple[str, ...]) -> None:
    assert list((PACKAGE / layer).rglob("*.py")), f"no modules under src/sweepq/{layer}"
    assert offending(layer, forbidden) == []


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
