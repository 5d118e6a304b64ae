"""Finding the database and the schema to use (from the arguments, else the environment),
checking a URL's shape, and showing it without its password."""

from __future__ import annotations

import functools
import os
import re
import urllib.parse

from .errors import ConfigurationError
from .ident import schema_name

_PASSWORD = re.compile(r"(?P<head>://[^:/@]*:)[^@]*(?P<tail>@)")
_PASSWORD_PARAM = re.compile(r"(?i)(password=)[^&\s]*")
_PORT = re.compile(r"[0-9]{1,5}")
_EXAMPLE = "postgresql://user@host:5432/dbname"
DEFAULT_SCHEMA = "sweepq"


def resolve_schema(schema: str | None = None, *, what: str = "schema name") -> str:
    """`schema` if given, else SWEEPQ_SCHEMA, else `sweepq`; checked (`ident.schema_name`).

    The one reader of SWEEPQ_SCHEMA: the App, the CLI and the Django backend all resolve a
    schema through it. `what` names the argument in the error of a given `schema`.

    Raises:
        InvalidIdentifierError: the name is not a plain identifier, or one of PostgreSQL's own.
    """
    if schema is not None:
        return schema_name(schema, what=what)
    from_env = os.environ.get("SWEEPQ_SCHEMA", "").strip()
    if not from_env:
        return DEFAULT_SCHEMA
    return schema_name(from_env, what="schema name (from SWEEPQ_SCHEMA)")


def resolve_dsn(dsn: str | None) -> str:
    """`dsn` if given, else SWEEPQ_DSN, else DATABASE_URL, with its shape checked.

    Raises:
        ConfigurationError: there is none, or it is not a postgresql:// URL asyncpg can use.
    """
    for source, value in (
        ("the database URL", dsn),
        ("SWEEPQ_DSN", os.environ.get("SWEEPQ_DSN")),
        ("DATABASE_URL", os.environ.get("DATABASE_URL")),
    ):
        if value:
            return check_dsn(value, source)
    raise ConfigurationError(
        "no database given: pass App(dsn='postgresql://...'), or --dsn on the command line, "
        "or set SWEEPQ_DSN (or DATABASE_URL)"
    )


def check_dsn(dsn: str, source: str = "the database URL") -> str:
    """Refuse a DSN that cannot be connected with, naming `source` but never the password.

    Checked: a postgresql:// (or postgres://) URL, a well-formed query string, its hosts and
    numeric ports (also `?host=`, `?port=` and PGPORT, which the driver reads). What the server
    says about the rest comes at connect.
    """
    problem = _dsn_problem(dsn) if isinstance(dsn, str) else "is not a string"
    if problem:
        raise ConfigurationError(f"{source} {problem}; write it as {_EXAMPLE}")
    pgport = os.environ.get("PGPORT")
    if pgport and not all(_valid_port(p) for p in pgport.split(",")):
        raise ConfigurationError(
            "the environment variable PGPORT (read by the database driver) must be a port "
            "number from 1 to 65535; fix or unset it"
        )
    return dsn


@functools.lru_cache(maxsize=32)  # read on every use of App.dsn: parse a DSN once
def _dsn_problem(dsn: str) -> str | None:
    try:
        parts = urllib.parse.urlsplit(dsn)
        query = urllib.parse.parse_qs(parts.query, strict_parsing=True) if parts.query else {}
    except ValueError:
        return "is not a well-formed URL (an unclosed '[', or a query part without '=')"
    if parts.scheme not in ("postgresql", "postgres"):
        return "is not a PostgreSQL URL (its scheme must be postgresql or postgres)"
    # The driver splits user:password from the hosts at the first '@'.
    hosts = [parts.netloc.partition("@")[2] if "@" in parts.netloc else parts.netloc]
    hosts += query.get("host", [])
    specs = [spec for listed in hosts if listed for spec in listed.split(",")]
    if not all(specs):
        return "has an empty host in its list of hosts"
    ports = [_port(spec) for spec in specs]
    ports += [p for listed in query.get("port", []) for p in listed.split(",")]
    if not all(_valid_port(p) for p in ports if p is not None):
        return "has a port that is not a number from 1 to 65535"
    return None


def _port(spec: str) -> str | None:
    """The port of one `host[:port]` of a list of hosts, or None."""
    if spec.startswith(("/", "[")):
        return None  # a socket directory, or an IPv6 address (the driver checks those)
    port = spec.partition(":")[2]
    return urllib.parse.unquote(port) if port else None  # 'host:' means the default port


def _valid_port(port: str) -> bool:
    return bool(_PORT.fullmatch(port)) and 1 <= int(port) <= 65535


@functools.lru_cache(maxsize=32)
def redact(dsn: str) -> str:
    """The DSN with any password replaced by '***'."""
    return _PASSWORD_PARAM.sub(r"\1***", _PASSWORD.sub(r"\g<head>***\g<tail>", dsn))
