"""The health figures `sweepq doctor` reports, and the findings drawn from them.

One typed wrapper per `doctor_*` statement of `core/sql/admin.sql`; none of them writes.
`diagnose` gathers the figures and the `assess_*` functions turn them into findings, each with a
severity. The first says whether the schema is migrated: when it is not (or was migrated by a
newer sweepq), the figures read from its tables are left out, and the server's are reported.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import datetime, timedelta

import asyncpg
import msgspec

from .admin import KeyLoad, key_load, rate_text
from .app import App
from .errors import MigrationError, SchemaNotMigratedError
from .jobs import JobId, JobState
from .queries import Executor, Queries
from .units import format_bytes, format_duration


class TableSize(msgspec.Struct, frozen=True):
    name: str
    total_bytes: int
    index_bytes: int
    estimated_rows: int
    dead_rows: int
    last_autovacuum: datetime | None


class StateCount(msgspec.Struct, frozen=True):
    state: JobState
    jobs: int
    oldest_created_seconds: float
    oldest_finished_seconds: float | None


class LapsedLeases(msgspec.Struct, frozen=True):
    jobs: int
    oldest_seconds: float
    sample_ids: list[JobId]


class ServerSetting(msgspec.Struct, frozen=True):
    name: str
    setting: str
    unit: str


class Connections(msgspec.Struct, frozen=True):
    total: int
    sweepq: int


async def doctor_concurrency_keys(queries: Queries, conn: Executor) -> list[KeyLoad]:
    return [key_load(*r) for r in await conn.fetch(queries.sql["doctor_concurrency_keys"])]


async def doctor_table_sizes(queries: Queries, conn: Executor) -> list[TableSize]:
    records = await conn.fetch(queries.sql["doctor_table_sizes"], queries.schema)
    return [TableSize(*r) for r in records]


async def doctor_job_states(queries: Queries, conn: Executor) -> list[StateCount]:
    records = await conn.fetch(queries.sql["doctor_job_states"])
    return [msgspec.convert(dict(r), StateCount) for r in records]


async def doctor_lapsed_leases(queries: Queries, conn: Executor) -> LapsedLeases:
    record = await conn.fetchrow(queries.sql["doctor_lapsed_leases"])
    assert record is not None  # an aggregate always returns its one row
    return LapsedLeases(record[0], record[1], [JobId(i) for i in record[2]])


async def doctor_server_settings(queries: Queries, conn: Executor) -> dict[str, ServerSetting]:
    records = await conn.fetch(queries.sql["doctor_server_settings"])
    return {r[0]: ServerSetting(*r) for r in records}


async def doctor_connections(queries: Queries, conn: Executor) -> Connections:
    record = await conn.fetchrow(queries.sql["doctor_connections"])
    assert record is not None  # an aggregate always returns its one row
    return Connections(*record)


# diagnosis ----------------------------------------------------------------------------------


class Severity(enum.StrEnum):
    OK = "ok"
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class Finding(msgspec.Struct, frozen=True):
    severity: Severity
    topic: str
    message: str


class Diagnosis(msgspec.Struct, frozen=True, kw_only=True):
    """What `sweepq doctor` reports: the figures, and the findings drawn from them."""

    schema: str
    migrated: bool
    pending_migrations: list[str]
    keys: list[KeyLoad]
    overall_ratio: float | None
    tables: list[TableSize]
    states: list[StateCount]
    lapsed: LapsedLeases
    settings: dict[str, ServerSetting]
    connections: Connections
    findings: list[Finding]

    @property
    def critical(self) -> bool:
        """Whether a finding is critical (the command then exits with code 1)."""
        return any(f.severity is Severity.CRITICAL for f in self.findings)


def overall_ratio(keys: Sequence[KeyLoad]) -> float | None:
    """Sum of what could ask over sum of what may run, over the keys that carry a limit."""
    limited = [k for k in keys if k.max_running is not None]
    capacity = sum(k.max_running or 0 for k in limited)
    if not capacity:
        return None
    return sum(k.asking for k in limited) / capacity


async def diagnose(app: App, *, retention: timedelta = timedelta(days=7)) -> Diagnosis:
    """Read the figures of `app`'s schema and its server, and assess them.

    Args:
        app: an open app.
        retention: the age past which terminal jobs should have been pruned.
    """
    queries = app.queries
    schema, pending, readable = await assess_schema(app)
    keys: list[KeyLoad] = []
    states: list[StateCount] = []
    lapsed = LapsedLeases(0, 0.0, [])
    async with app.connection() as conn:
        if readable:
            keys = await doctor_concurrency_keys(queries, conn)
            states = await doctor_job_states(queries, conn)
            lapsed = await doctor_lapsed_leases(queries, conn)
        tables = await doctor_table_sizes(queries, conn)
        connections = await doctor_connections(queries, conn)
    # The app's own connections switch jit off; a plain connection sees what other clients get.
    plain = await asyncpg.connect(app.dsn)
    try:
        settings = await doctor_server_settings(queries, plain)
    finally:
        await plain.close()
    ratio = overall_ratio(keys)
    findings = [schema]
    if readable:
        findings += [*assess_keys(keys, ratio)]
    findings += assess_tables(tables)
    if readable:
        findings += [*assess_retention(states, retention), *assess_leases(lapsed)]
    findings += assess_settings(settings, connections)
    return Diagnosis(
        schema=app.schema,
        migrated=readable,
        pending_migrations=pending,
        keys=keys,
        overall_ratio=ratio,
        tables=tables,
        states=states,
        lapsed=lapsed,
        settings=settings,
        connections=connections,
        findings=findings,
    )


async def assess_schema(app: App) -> tuple[Finding, list[str], bool]:
    """Whether the schema has every migration this sweepq knows: the finding, the migrations
    pending, and whether its tables can be read as this version reads them."""
    try:
        pending = await app.migrate(dry_run=True)  # reads the ledger only; writes nothing
    except MigrationError as exc:  # migrated by a newer sweepq
        return Finding(Severity.CRITICAL, "schema", str(exc)), [], False
    if pending:
        missing = SchemaNotMigratedError(app.schema, app.display_dsn, pending)
        return Finding(Severity.CRITICAL, "schema", str(missing)), pending, False
    migrated = "migrated: every migration this sweepq knows is applied"
    return Finding(Severity.OK, "schema", migrated), [], True


def assess_keys(keys: Sequence[KeyLoad], ratio: float | None) -> list[Finding]:
    findings: list[Finding] = []
    for k in keys:
        topic = f"concurrency key {k.key!r}"
        if k.running != k.running_jobs:
            findings.append(
                Finding(
                    Severity.CRITICAL,
                    topic,
                    f"the running counter says {k.running} but {k.running_jobs} running jobs "
                    "carry the key; admission to this key is wrong until they agree",
                )
            )
        if k.max_running == 0 and k.due:
            findings.append(
                Finding(
                    Severity.WARNING,
                    topic,
                    f"limit 0: {k.due} due jobs will not run until the limit is raised "
                    "(app.set_concurrency_limit)",
                )
            )
        elif k.ratio is not None and k.ratio > 1:
            findings.append(
                Finding(
                    Severity.INFO,
                    topic,
                    f"{k.ratio:.1f}x oversubscribed: {k.due} due + {k.running_jobs} running for "
                    f"a limit of {k.max_running}; waiting jobs stay available and cost nothing "
                    "until a slot frees",
                )
            )
        if k.rate_binding:
            findings.append(
                Finding(
                    Severity.INFO,
                    topic,
                    f"rate spent for this window ({rate_text(k)}): {k.due} due jobs wait for the "
                    "next one, available and costing nothing (app.set_rate_limit changes it)",
                )
            )
    if ratio is not None:
        severity = Severity.INFO if ratio > 1 else Severity.OK
        findings.append(
            Finding(
                severity,
                "concurrency keys",
                f"overall oversubscription {ratio:.2f}x (what could ask / what may run, over "
                "keys with a limit)",
            )
        )
    return findings


def assess_tables(tables: Sequence[TableSize]) -> list[Finding]:
    findings: list[Finding] = []
    total = sum(t.total_bytes for t in tables)
    indexes = sum(t.index_bytes for t in tables)
    findings.append(
        Finding(
            Severity.INFO,
            "size",
            f"{len(tables)} tables use {format_bytes(total)} (indexes {format_bytes(indexes)})",
        )
    )
    for t in tables:
        if t.dead_rows > 10_000 and t.dead_rows > 0.2 * max(t.estimated_rows, 1):
            findings.append(
                Finding(
                    Severity.WARNING,
                    f"table {t.name}",
                    f"{t.dead_rows:,} dead rows against ~{t.estimated_rows:,} live: vacuum is "
                    "behind; check autovacuum and long-running transactions",
                )
            )
    return findings


def assess_retention(states: Sequence[StateCount], retention: timedelta) -> list[Finding]:
    findings: list[Finding] = []
    terminal = [s for s in states if s.state.terminal]
    live = [s for s in states if not s.state.terminal]
    oldest = max((s.oldest_finished_seconds or 0.0 for s in terminal), default=0.0)
    finished = sum(s.jobs for s in terminal)
    if finished and oldest > retention.total_seconds():
        findings.append(
            Finding(
                Severity.WARNING,
                "retention",
                f"{finished:,} terminal jobs, the oldest finished {format_duration(oldest)} ago: "
                f"pruning is not keeping up with {format_duration(retention.total_seconds())}; "
                "run `sweepq prune --older-than 7d`",
            )
        )
    else:
        age = f", the oldest finished {format_duration(oldest)} ago" if finished else ""
        findings.append(Finding(Severity.OK, "retention", f"{finished:,} terminal jobs{age}"))
    if live:
        counts = ", ".join(f"{s.state} {s.jobs:,}" for s in live)
        findings.append(
            Finding(
                Severity.INFO,
                "retention",
                f"live jobs ({counts}) are out of retention's reach until they end; their "
                "history is bounded (the last ten errors per job)",
            )
        )
    return findings


def assess_leases(lapsed: LapsedLeases) -> list[Finding]:
    if not lapsed.jobs:
        return [Finding(Severity.OK, "leases", "no running job holds a lapsed lease")]
    ids = ", ".join(str(i) for i in lapsed.sample_ids)
    return [
        Finding(
            Severity.WARNING,
            "leases",
            f"{lapsed.jobs:,} running jobs hold a lapsed lease (the oldest lapsed "
            f"{format_duration(lapsed.oldest_seconds)} ago; e.g. {ids}): a running worker's "
            "maintenance rescues them; if none runs, start one",
        )
    ]


def assess_settings(settings: dict[str, ServerSetting], connections: Connections) -> list[Finding]:
    findings: list[Finding] = []
    jit = settings.get("jit")
    if jit is not None and jit.setting == "on":
        findings.append(
            Finding(
                Severity.WARNING,
                "jit",
                "jit is on: sweepq's own connections turn it off, but other clients of the "
                "same database may not (their queue queries pay compile time for nothing); "
                "consider ALTER DATABASE ... SET jit = off",
            )
        )
    max_connections = settings.get("max_connections")
    if max_connections is not None:
        limit = int(max_connections.setting)
        severity = Severity.WARNING if connections.total >= 0.8 * limit else Severity.INFO
        findings.append(
            Finding(
                severity,
                "connections",
                f"max_connections = {limit}; {connections.total} client connections open "
                f"({connections.sweepq} of them sweepq's)",
            )
        )
    autovacuum = settings.get("autovacuum")
    if autovacuum is not None and autovacuum.setting != "on":
        findings.append(
            Finding(
                Severity.CRITICAL,
                "autovacuum",
                "autovacuum is off: the rows a queue updates and deletes are never reclaimed "
                "and its tables and indexes bloat; turn it on",
            )
        )
    return findings
