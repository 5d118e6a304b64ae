"""Finding the user's App from its `module:attribute` name (`--app`, SWEEPQ_APP, `sweepq_app`).

The CLI and the pytest plugin load the App the same way; each says where the name came from and
turns the `ConfigurationError` into its own message (an error line, a failed test).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from .core.errors import ConfigurationError
from .sweeps.app import App


def load_app(spec: str) -> App:
    """Import `module:attribute` and check that it is an App.

    The current directory is put on sys.path first, as `python -m` would.

    Raises:
        ConfigurationError: naming what was not found: the module, the attribute, or an App.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(
            f"APP must be module:attribute (e.g. myproject.jobs:app), got {spec!r}"
        )
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    found = _attribute(_module(module_name, spec), module_name, attribute)
    if not isinstance(found, App):
        raise ConfigurationError(f"APP {spec!r} is a {type(found).__name__}, not a sweepq.App")
    return found


def _module(name: str, spec: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if name == missing or name.startswith(missing + "."):
            raise ConfigurationError(
                f"cannot import module {name!r} of APP {spec!r}: no module named "
                f"{missing!r} (looked in the current directory and sys.path)"
            ) from None
        raise ConfigurationError(
            f"importing module {name!r} of APP {spec!r} failed: {exc}"
        ) from None
    except Exception as exc:
        raise ConfigurationError(
            f"importing module {name!r} of APP {spec!r} raised {type(exc).__name__}: {exc}"
        ) from None


def _attribute(module: Any, module_name: str, attribute: str) -> Any:
    found = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            apps = sorted(n for n, v in vars(module).items() if isinstance(v, App))
            hint = f" (Apps it defines: {', '.join(apps)})" if apps else " (it defines no App)"
            raise ConfigurationError(f"module {module_name!r} has no attribute {attribute!r}{hint}")
        found = getattr(found, part)
    return found
