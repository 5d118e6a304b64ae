"""Forward-only, numbered schema migrations, applied under an advisory lock.

Each component (the core, and layers built on it) keeps its migrations as `NNNN_name.sql` files
in one package; the ledger table records `(component, version)` of every applied file. Applying is
idempotent and safe from many processes at once: the first takes the lock and migrates, the others
wait, then find nothing left to do.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib import resources

import msgspec

from .errors import MigrationError
from .ident import ident
from .queries import Conn
from .sqlfiles import load_statements

_FILE = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")


class Migration(msgspec.Struct, frozen=True):
    component: str
    version: int
    name: str
    sql: str

    @property
    def label(self) -> str:
        return f"{self.component}/{self.version:04d}_{self.name}"


def discover(component: str, package: str, schema: str) -> list[Migration]:
    """The migrations of `package`, in version order, with `{schema}` filled in."""
    quoted = ident(schema, what="schema name")
    found: list[Migration] = []
    for entry in resources.files(package).iterdir():
        match = _FILE.fullmatch(entry.name)
        if match is None:
            continue
        text = entry.read_text(encoding="utf-8").replace("{schema}", quoted)
        found.append(Migration(component, int(match[1]), match[2], text))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(f"migrations of {component} are not numbered 1..n: {versions}")
    return found


async def migrate(
    conn: Conn, schema: str, migrations: Sequence[Migration], *, dry_run: bool = False
) -> list[Migration]:
    """Apply the pending `migrations` on `conn`; return those applied (or, dry, pending)."""
    sql = load_statements("sweepq.core.sql", schema)
    lock = f"sweepq:migrate:{schema}"
    # Session lock on a connection of our own: migrations run in several transactions.
    await conn.execute(sql["schema_lock"], lock)
    try:
        exists = await conn.fetchval(sql["schema_ledger_exists"])
        applied: set[tuple[str, int]] = set()
        if exists:
            applied = {(r[0], r[1]) for r in await conn.fetch(sql["schema_ledger_list"])}
        pending = [m for m in migrations if (m.component, m.version) not in applied]
        known = {(m.component, m.version) for m in migrations}
        components = {m.component for m in migrations}
        newer = sorted(v for c, v in applied if c in components and (c, v) not in known)
        if newer:
            raise MigrationError(
                f"schema {schema!r} has migrations this sweepq does not know ({newer}); "
                "upgrade sweepq before running it against this database"
            )
        if dry_run:
            return pending
        if not exists:
            async with conn.transaction():
                await conn.execute(sql["schema_create"])
                await conn.execute(sql["schema_ledger_create"])
        for migration in pending:
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    sql["schema_ledger_record"],
                    migration.component, migration.version, migration.name,
                )  # fmt: skip
        return pending
    finally:
        await conn.execute(sql["schema_unlock"], lock)
