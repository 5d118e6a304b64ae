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
    str, typer.Option("--app", help="The App, as module:attribute (e.g. myproject.jobs:app).")
]


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
