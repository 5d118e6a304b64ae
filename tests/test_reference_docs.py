"""The generated references cover what they document.

The API reference (docs/reference/api.md): every public name has a directive on the page and a
docstring, and so does every public method and property of the public classes. The public names
are read at run time (`sweepq.__all__`, and the `__all__` of each public submodule such as
`sweepq.testing`), so a name added later is caught until it is documented. Docstrings are read
with griffe, the library mkdocstrings renders the page with: what it finds is what the page
shows, and a docstring it cannot parse (a warning, so a failed strict build) is reported here
too, with the name it belongs to.

The command line reference (docs/reference/cli.md): the page is rendered with the same Markdown
extensions as the site, mkdocs-click included, and every command of the click tree (walked from
`sweepq.cli.main.click_command`) must have its heading there, with its help and every option.
"""

from __future__ import annotations

import html
import importlib
import logging
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import griffe
import markdown  # type: ignore[import-untyped]  # no stubs; only markdown.markdown() is used
import pytest

import sweepq
from sweepq.cli.main import click_command

ROOT = Path(__file__).resolve().parent.parent
API_PAGE = ROOT / "docs" / "reference" / "api.md"
CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"
# Public modules with a reference page of their own: their directives count as the API page's.
MODULE_PAGES = {"sweepq.throttle": ROOT / "docs" / "reference" / "throttle.md"}
DIRECTIVE = re.compile(r"^:::\s*(?P<path>[\w.]+)\s*$", re.MULTILINE)

# Subpackages that are internal (no stability promise, not in the API reference).
INTERNAL_MODULES = {
    "sweepq.cli",
    "sweepq.core",
    "sweepq.embedded",
    "sweepq.loading",
    "sweepq.sweeps",
}

# Public members whose docstring lives in a file this change could not edit; each entry says
# where the docstring belongs. Remove an entry once its docstring is written.
UNDOCUMENTED_ELSEWHERE: dict[str, str] = {}


def public_modules() -> list[str]:
    """`sweepq` and its public submodules (those that are not internal and not `_private`)."""
    found = ["sweepq"]
    for info in pkgutil.iter_modules(sweepq.__path__, "sweepq."):
        last = info.name.rsplit(".", 1)[-1]
        if info.name not in INTERNAL_MODULES and not last.startswith("_"):
            found.append(info.name)
    return found


def public_names() -> list[str]:
    """Every public name, dotted: `sweepq.App`, and `sweepq.testing.X` for a submodule."""
    names: list[str] = []
    for module_name in public_modules():
        module = importlib.import_module(module_name)
        exported = getattr(module, "__all__", None)
        assert exported is not None, f"{module_name} is public but has no __all__"
        names.extend(f"{module_name}.{name}" for name in exported)
    return names


def directives() -> set[str]:
    pages = [API_PAGE, *MODULE_PAGES.values()]
    return {
        m["path"] for page in pages for m in DIRECTIVE.finditer(page.read_text(encoding="utf-8"))
    }


def documented_by_directive(name: str, paths: set[str]) -> bool:
    """A name is documented by its own directive, or by one for its module (which renders the
    module's public members), except `sweepq` itself, whose page lists names one by one."""
    module = name.rsplit(".", 1)[0]
    return name in paths or (module != "sweepq" and module in paths)


@pytest.fixture(scope="module")
def package() -> griffe.Module:
    loaded = griffe.load(
        "sweepq",
        search_paths=[ROOT / "src"],
        docstring_parser="google",
        resolve_aliases=True,
    )
    assert isinstance(loaded, griffe.Module)
    return loaded


def resolved(obj: griffe.Object | griffe.Alias) -> griffe.Object:
    return obj.final_target if isinstance(obj, griffe.Alias) else obj


def target(package: griffe.Module, dotted: str) -> griffe.Object:
    return resolved(package[dotted.removeprefix("sweepq.")])


def is_public_routine(member: griffe.Object | griffe.Alias) -> bool:
    """A public method or property: what the reference renders as a member of a class."""
    if member.name.startswith("_"):
        return False
    return member.is_function or (member.is_attribute and "property" in member.labels)


def members_to_document(
    shown_as: str, obj: griffe.Object
) -> Iterator[tuple[str, griffe.Object | griffe.Alias]]:
    """The public methods and properties of a class (inherited ones included, as the page
    renders the `App` with those of the core), or the public functions and classes of a module
    documented as a whole, and theirs; each with the name the page shows it under."""
    if obj.is_class:
        for name, member in sorted(obj.all_members.items()):
            if is_public_routine(member):
                yield f"{shown_as}.{name}", member
    elif obj.is_module:
        exported = obj.exports or [n for n in obj.members if not n.startswith("_")]
        for export in exported:
            name = export if isinstance(export, str) else export.name
            member = obj.members[name]
            yield f"{shown_as}.{name}", member
            yield from members_to_document(f"{shown_as}.{name}", resolved(member))


def test_the_api_page_exists_and_is_in_the_nav() -> None:
    assert API_PAGE.is_file()
    assert "reference/api.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


@pytest.mark.parametrize("module", sorted(MODULE_PAGES))
def test_a_module_page_documents_its_module_and_is_in_the_nav(module: str) -> None:
    page = MODULE_PAGES[module]
    assert module in public_modules()
    assert module in {m["path"] for m in DIRECTIVE.finditer(page.read_text(encoding="utf-8"))}
    assert str(page.relative_to(ROOT / "docs")) in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def test_the_public_names_are_read_from_all() -> None:
    names = public_names()
    assert "sweepq.App" in names
    assert len(names) >= len(sweepq.__all__)


def test_every_public_name_has_a_directive_on_the_api_page() -> None:
    paths = directives()
    missing = [name for name in public_names() if not documented_by_directive(name, paths)]
    assert not missing, (
        f"add `::: <name>` to {API_PAGE.relative_to(ROOT)}, in its section, for: "
        + ", ".join(missing)
    )


def test_every_public_name_has_a_docstring(package: griffe.Module) -> None:
    undocumented = [
        name
        for name in public_names()
        if not (docstring := target(package, name).docstring) or not docstring.value.strip()
    ]
    assert not undocumented, "no docstring: " + ", ".join(undocumented)


def test_every_public_method_and_property_has_a_docstring(package: griffe.Module) -> None:
    undocumented: list[str] = []
    for name in public_names():
        for shown, member in members_to_document(name, target(package, name)):
            docstring = member.docstring
            if (docstring is None or not docstring.value.strip()) and (
                shown not in UNDOCUMENTED_ELSEWHERE
            ):
                # Where to write it: an inherited method is reported in the file that has it.
                undocumented.append(f"{shown} ({member.relative_filepath}:{member.lineno})")
    assert not undocumented, "no docstring:\n" + "\n".join(undocumented)


def test_every_docstring_on_the_page_parses_without_a_warning(
    package: griffe.Module, caplog: pytest.LogCaptureFixture
) -> None:
    objects: list[griffe.Object | griffe.Alias] = []
    for name in public_names():
        objects.append(target(package, name))
        objects.extend(member for _, member in members_to_document(name, target(package, name)))
    warned: list[str] = []
    for obj in objects:
        if obj.docstring is None:
            continue
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="griffe"):
            obj.docstring.parse("google")
        warned.extend(f"{obj.path}: {record.getMessage()}" for record in caplog.records)
    assert not warned, "griffe warns (the strict docs build fails):\n" + "\n".join(warned)


# --- the command line reference -----------------------------------------------------------------

HEADING = re.compile(r'<h[1-6] id="(?P<id>[^"]+)"')


def commands(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command of the tree with its path, the root first. Typer builds the tree with its
    own copy of click, so groups are recognised by their `commands`, not by a click class."""
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from commands(sub, (*path, name))


def squeezed(text: str) -> str:
    """Text without whitespace or backticks: help wraps differently in a terminal and on the
    page, and Markdown turns backticks into code."""
    return re.sub(r"[\s`]", "", text)


@pytest.fixture(scope="module")
def cli_sections() -> dict[str, str]:
    """The page as the site renders it, as text per heading id (`sweepq-jobs-list`)."""
    page = CLI_PAGE.read_text(encoding="utf-8")
    rendered = markdown.markdown(page, extensions=["attr_list", "toc", "mkdocs-click"])
    starts = [(m.start(), m["id"]) for m in HEADING.finditer(rendered)]
    sections: dict[str, str] = {}
    for (start, anchor), (end, _) in zip(starts, [*starts[1:], (len(rendered), "")], strict=True):
        sections[anchor] = html.unescape(re.sub(r"<[^>]+>", "", rendered[start:end]))
    return sections


def test_the_cli_page_is_in_the_nav_and_documents_the_click_command() -> None:
    assert "reference/cli.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    page = CLI_PAGE.read_text(encoding="utf-8")
    assert ":module: sweepq.cli.main" in page
    assert ":command: click_command" in page


# A hidden command is left out of the page on purpose, so it is not a case here.
@pytest.mark.parametrize(
    "path",
    [path for path, command in commands(click_command, ("sweepq",)) if not command.hidden],
    ids=" ".join,
)
def test_every_command_is_on_the_cli_page_with_its_help_and_options(
    path: tuple[str, ...], cli_sections: dict[str, str]
) -> None:
    command = dict(commands(click_command, ("sweepq",)))[path]
    anchor = "-".join(path)
    assert anchor in cli_sections, f"no heading for `{' '.join(path)}` on {CLI_PAGE.name}"
    text = cli_sections[anchor]
    section = squeezed(text)
    summary = (command.help or command.short_help or "").strip().split("\n\n")[0]
    assert squeezed(summary) in section, f"`{' '.join(path)}`: its help is not shown as written"
    missing: list[str] = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        if param.param_type_name == "argument":
            names = [param.metavar or param.name.upper()]
        else:
            names = [*param.opts, *param.secondary_opts]
        missing.extend(
            name for name in names if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)
        )
        if param.help and squeezed(param.help) not in section:
            missing.append(f"the help of {names[0]}")
    assert not missing, f"`{' '.join(path)}` on {CLI_PAGE.name} lacks: " + ", ".join(missing)
