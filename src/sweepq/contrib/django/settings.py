"""A `SweepqBackend`'s settings (its `TASKS` entry), and the DSN of the Django database it uses.

Read and checked once, when Django creates the backend; every mistake raises Django's
`ImproperlyConfigured` naming the setting and the fix.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

import msgspec
from django.core.exceptions import ImproperlyConfigured

from sweepq.core.app import DEFAULT_SCHEMA
from sweepq.core.dsn import check_dsn, resolve_schema
from sweepq.core.errors import SweepqError
from sweepq.core.results import result_max_bytes

from .options import check_job_options, merged

# The keys of a SweepqBackend's OPTIONS.
KEYS = ("DATABASE", "SCHEMA", "DSN", "RESULT_MAX_BYTES", "JOB_OPTIONS")
# libpq connection parameters of a Django DATABASES entry's OPTIONS that asyncpg (the workers'
# driver) takes the same way; other OPTIONS (Django's or psycopg's) are not connection settings.
_CONNECTION_PARAMETERS = (
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "sslcrl",
    "sslpassword",
    "passfile",
    "target_session_attrs",
)


class BackendSettings(msgspec.Struct, frozen=True):
    """A SweepqBackend's OPTIONS, checked.

    Attributes:
        alias: the backend's key in `TASKS`.
        database: the key in `DATABASES` of the database holding sweepq's schema.
        schema: sweepq's schema in that database.
        dsn: the URL workers and waits connect with (None: built from `DATABASES[database]`).
        result_max_bytes: the workers' result size limit.
        job_options: job options every task of the backend gets (`sweepq.App.enqueue`'s).
    """

    alias: str
    database: str = "default"
    schema: str = DEFAULT_SCHEMA
    dsn: str | None = None
    result_max_bytes: int = 65_536
    job_options: dict[str, Any] = msgspec.field(default_factory=dict)


def read_settings(alias: str, options: Mapping[str, Any]) -> BackendSettings:
    """The checked OPTIONS of backend `alias`.

    Raises:
        ImproperlyConfigured: an unknown key or a value that cannot work, named in full.
    """
    where = f"TASKS[{alias!r}]['OPTIONS']"
    if not isinstance(options, Mapping):
        raise ImproperlyConfigured(f"{where} must be a dict of {', '.join(KEYS)}")
    unknown = sorted(set(options) - set(KEYS))
    if unknown:
        raise ImproperlyConfigured(
            f"{where} has unknown key(s) {', '.join(map(repr, unknown))}; the keys are: "
            f"{', '.join(KEYS)}"
        )
    try:
        return _read(alias, options, where)
    except SweepqError as exc:
        raise ImproperlyConfigured(str(exc)) from None


def _read(alias: str, options: Mapping[str, Any], where: str) -> BackendSettings:
    database = options.get("DATABASE", "default")
    if not isinstance(database, str) or not database:
        raise ImproperlyConfigured(f"{where}['DATABASE'] must name a DATABASES entry")
    given = options.get("SCHEMA") or None
    schema = resolve_schema(given, what=f"{where}['SCHEMA'] (or SWEEPQ_SCHEMA)")
    dsn = options.get("DSN")
    if dsn is not None:
        if not isinstance(dsn, str):
            raise ImproperlyConfigured(f"{where}['DSN'] must be a postgresql:// URL")
        check_dsn(dsn, f"{where}['DSN']")
    limit = result_max_bytes(options.get("RESULT_MAX_BYTES"))
    defaults = options.get("JOB_OPTIONS", {})
    if not isinstance(defaults, Mapping):
        raise ImproperlyConfigured(f"{where}['JOB_OPTIONS'] must be a dict of job options")
    job_options = merged(check_job_options(defaults, f"{where}['JOB_OPTIONS']"))
    return BackendSettings(
        alias=alias, database=database, schema=schema, dsn=dsn, result_max_bytes=limit,
        job_options=job_options,
    )  # fmt: skip


def database_dsn(alias: str, settings: Mapping[str, Any]) -> str:
    """A postgresql:// URL for the Django database `alias` (its `DATABASES` entry).

    Its user, password, host (a socket directory too), port and name, and the SSL and
    session-attribute OPTIONS libpq and asyncpg share. Other OPTIONS are not carried over: set
    the backend's `OPTIONS["DSN"]` when the workers need them.

    Raises:
        ImproperlyConfigured: the database is not PostgreSQL.
    """
    engine = str(settings.get("ENGINE", ""))
    if "postgresql" not in engine and "postgis" not in engine:
        raise ImproperlyConfigured(
            f"sweepq needs PostgreSQL, but DATABASES[{alias!r}] uses ENGINE {engine!r}; point "
            "the backend's OPTIONS['DATABASE'] at a PostgreSQL database"
        )
    user = str(settings.get("USER") or "")
    password = str(settings.get("PASSWORD") or "")
    host = str(settings.get("HOST") or "")
    port = str(settings.get("PORT") or "")
    name = str(settings.get("NAME") or "")
    query: dict[str, str] = {}
    login = urllib.parse.quote(user, safe="")
    if password:
        login += ":" + urllib.parse.quote(password, safe="")
    if host.startswith("/"):
        query["host"] = host  # a directory of Unix sockets
        host = ""
    elif ":" in host:
        host = f"[{host}]"  # an IPv6 address
    netloc = (f"{login}@" if login else "") + host + (f":{port}" if port else "")
    options = settings.get("OPTIONS") or {}
    query |= {k: str(options[k]) for k in _CONNECTION_PARAMETERS if options.get(k) is not None}
    path = "/" + urllib.parse.quote(name, safe="")
    # By hand: urlunsplit drops the empty authority ("//") of an unknown scheme.
    return f"postgresql://{netloc}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
