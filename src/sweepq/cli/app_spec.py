"""APP, `module:attribute`: importing the App a command works with."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated, Any

import typer

from sweepq.sweeps.app import App

from .common import CommandError

AppOption = Annotated[
    str | None,
    typer.Option(
        "--app",
        envvar="SWEEPQ_APP",
        show_envvar=False,
        show_default=False,
        help="The App, as module:attribute (e.g. myproject.jobs:app); default: SWEEPQ_APP.",
    ),
]


def app_spec(given: str | None, positional: str | None = None) -> str:
    """The APP a command names: `--app` (or SWEEPQ_APP), or the positional APP where a command
    takes one (`sweepq worker APP`); both must agree.

    Raises:
        CommandError: no APP at all, or two different ones.
    """
    given = (given or "").strip() or None
    if positional and given and positional != given:
        raise CommandError(f"APP {positional!r} and --app/SWEEPQ_APP {given!r} differ; give one")
    found = positional or given
    if not found:
        raise CommandError(
            "name the App: --app module:attribute (e.g. myproject.jobs:app), or set SWEEPQ_APP"
        )
    return found


def load_app(spec: str) -> App:
    """Import `module:attribute` and check that it is an App.

    The current directory is put on sys.path first, as `python -m` would.

    Raises:
        CommandError: naming what was not found: the module, the attribute, or an App.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise CommandError(f"APP must be module:attribute (e.g. myproject.jobs:app), got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    found = _attribute(_module(module_name, spec), module_name, attribute)
    if not isinstance(found, App):
        raise CommandError(f"APP {spec!r} is a {type(found).__name__}, not a sweepq.App")
    return found


def _module(name: str, spec: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if name == missing or name.startswith(missing + "."):
            raise CommandError(
                f"cannot import module {name!r} of APP {spec!r}: no module named "
                f"{missing!r} (looked in the current directory and sys.path)"
            ) from None
        raise CommandError(f"importing module {name!r} of APP {spec!r} failed: {exc}") from None
    except Exception as exc:
        raise CommandError(
            f"importing module {name!r} of APP {spec!r} raised {type(exc).__name__}: {exc}"
        ) from None


def _attribute(module: Any, module_name: str, attribute: str) -> Any:
    found = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            apps = sorted(n for n, v in vars(module).items() if isinstance(v, App))
            hint = f" (Apps it defines: {', '.join(apps)})" if apps else " (it defines no App)"
            raise CommandError(f"module {module_name!r} has no attribute {attribute!r}{hint}")
        found = getattr(found, part)
    return found
