"""Forward-only, numbered schema migrations, applied in one transaction under the ledger's lock.

Each component (the core, and layers built on it) keeps its migrations as `NNNN_name.sql` files
in one package; the ledger table records `(component, version)` of every applied file. Applying is
idempotent and safe from many processes at once: the first takes the lock and migrates, the others
wait, then find nothing left to do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from importlib import resources

import asyncpg
import msgspec

from .errors import MigrationError
from .ident import ident
from .queries import Conn
from .sqlfiles import load_statements

_FILE = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")
# A migration waits this long for a lock before it gives up (and changes nothing): queued
# behind a long transaction, its lock request would hold up every statement on the table.
_LOCK_TIMEOUT_SECONDS = 10
# Processes creating a new schema at once may collide in the catalogs; the loser tries again.
_CATALOG_RACES = 3
# What a migration meets in a schema that holds objects of the same names, not sweepq's.
_ALREADY_THERE = (
    asyncpg.DuplicateTableError,
    asyncpg.DuplicateObjectError,
    asyncpg.DuplicateFunctionError,
)


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
    """Apply the pending `migrations` on `conn`; return those applied (or, dry, pending).

    Reading what is pending takes no lock and writes nothing (a worker checks it as it starts).
    Applying takes the ledger's table lock and runs every pending migration in one transaction:
    all of them apply, or none (a refusal or a failure leaves the schema as it was).
    """
    sql = load_statements("sweepq.core.sql", schema)
    pending = _pending(schema, migrations, await _applied(conn, sql))
    if dry_run or not pending:
        return pending
    for _ in range(_CATALOG_RACES):
        try:
            async with conn.transaction():
                await conn.execute(
                    "SELECT set_config('lock_timeout', $1, true)", f"{_LOCK_TIMEOUT_SECONDS}s"
                )
                if not await conn.fetchval(sql["schema_exists"], schema):
                    await conn.execute(sql["schema_create"])
                await conn.execute(sql["schema_ledger_create"])
                await conn.execute(sql["schema_lock"])
                # What another process applied while we waited for the lock is done.
                pending = _pending(schema, migrations, await _applied(conn, sql))
                for migration in pending:
                    await conn.execute(migration.sql)
                    await conn.execute(
                        sql["schema_ledger_record"],
                        migration.component, migration.version, migration.name,
                    )  # fmt: skip
                return pending
        except asyncpg.UniqueViolationError as exc:
            if not (exc.constraint_name or "").startswith("pg_"):
                raise
            # Two processes created the schema or the ledger at once: the other's is there now.
            continue
        except _ALREADY_THERE as exc:
            raise MigrationError(
                f"schema {schema!r} already holds {exc.message.removesuffix(' already exists')}"
                " that sweepq did not create, so its migrations cannot run there; give sweepq a "
                "schema of its own (App(schema=...), --schema or SWEEPQ_SCHEMA; the default is "
                "'sweepq'). Nothing was changed."
            ) from None
        except asyncpg.InsufficientPrivilegeError as exc:
            raise MigrationError(
                f"this role may not migrate schema {schema!r} ({exc}); run `sweepq migrate` as "
                'the schema\'s owner (the ops guide, "Roles"). Nothing was changed.'
            ) from None
        except asyncpg.LockNotAvailableError:
            raise MigrationError(
                f"migrating schema {schema!r} waited over {_LOCK_TIMEOUT_SECONDS} s for a lock "
                "that another session holds (a long transaction on sweepq's tables: see "
                "pg_stat_activity); nothing was changed: run it again once that session ends"
            ) from None
    raise MigrationError(f"schema {schema!r}: could not create its migration ledger; run it again")


async def _applied(conn: Conn, sql: Mapping[str, str]) -> set[tuple[str, int]]:
    if not await conn.fetchval(sql["schema_ledger_exists"]):
        return set()
    return {(r[0], r[1]) for r in await conn.fetch(sql["schema_ledger_list"])}


def _pending(
    schema: str, migrations: Sequence[Migration], applied: set[tuple[str, int]]
) -> list[Migration]:
    """The migrations not applied yet; refuse a schema migrated by a newer sweepq."""
    known = {(m.component, m.version) for m in migrations}
    components = {m.component for m in migrations}
    newer = sorted(f"{c}/{v:04d}" for c, v in applied if c in components and (c, v) not in known)
    if newer:
        raise MigrationError(
            f"schema {schema!r} has migrations this sweepq does not know "
            f"({', '.join(newer)}); upgrade sweepq before running it against this database"
        )
    return [m for m in migrations if (m.component, m.version) not in applied]
