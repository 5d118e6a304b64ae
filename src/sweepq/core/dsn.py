"""Finding the database and the schema to use (from the arguments, else the environment),
checking a DSN's shape, and showing it without its password.

A DSN is a postgresql:// URL, or a libpq key=value connection string (`host=db dbname=app`),
which is converted to the URL the driver reads: its user, password and database name
percent-encoded, its hosts (a list too, sockets and IPv6 addresses) and ports where the URL
form puts them, and every other key as a query parameter. Everything sweepq connects with, and
shows, is that URL.
"""

from __future__ import annotations

import functools
import os
import re
import urllib.parse

from .errors import ConfigurationError
from .ident import schema_name

_PASSWORD = re.compile(r"(?P<head>://[^:/@]*:)[^@]*(?P<tail>@)")
_PASSWORD_PARAM = re.compile(r"(?i)(password=)[^&\s]*")
# In a key=value string: a quoted value up to its closing quote, else up to a blank.
_PASSWORD_KEYWORD = re.compile(r"(?i)(password\s*=\s*)(?:'(?:\\.|[^\\'])*'?|(?:\\.|\S)*)")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_PORT = re.compile(r"[0-9]{1,5}")
_EXAMPLE = "postgresql://user@host:5432/dbname"
_KEYWORDS_EXAMPLE = "host=host port=5432 dbname=dbname user=user"
_KEYWORDS_FORM = (
    "write it as key=value pairs separated by blanks, a value with blanks or quotes in single "
    "quotes, with \\' and \\\\ inside (host=db dbname='my app' user=app), or as a URL "
    f"({_EXAMPLE})"
)
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
        ("the DSN", dsn),
        ("SWEEPQ_DSN", os.environ.get("SWEEPQ_DSN")),
        ("DATABASE_URL", os.environ.get("DATABASE_URL")),
    ):
        if value:
            return check_dsn(value, source)
    raise ConfigurationError(
        "no database given: pass App(dsn='postgresql://...'), or --dsn on the command line, "
        "or set SWEEPQ_DSN (or DATABASE_URL)"
    )


def check_dsn(dsn: str, source: str = "the DSN") -> str:
    """The DSN as a postgresql:// URL; one that cannot be connected with is refused, naming
    `source` but never the password.

    A key=value connection string is converted (see the module's docstring). Checked: a
    postgresql:// (or postgres://) URL, a well-formed query string, its hosts and numeric ports
    (also `?host=`, `?port=` and PGPORT, which the driver reads). What the server says about
    the rest comes at connect.

    Raises:
        ConfigurationError: the DSN is neither form, or one the driver cannot connect with; the
            message says how to write it.
    """
    if not isinstance(dsn, str):
        raise ConfigurationError(f"{source} is not a string; write it as {_EXAMPLE}")
    if not _URL.match(dsn.lstrip()):
        dsn = keywords_to_url(dsn, source)
    problem = _dsn_problem(dsn)
    if problem:
        raise ConfigurationError(
            f"{source} {problem}; write it as {_EXAMPLE}, or as {_KEYWORDS_EXAMPLE}"
        )
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
    """The DSN (a URL, or key=value pairs) with any password replaced by '***'."""
    if "://" not in dsn:
        return _PASSWORD_KEYWORD.sub(r"\1***", dsn)
    return _PASSWORD_PARAM.sub(r"\1***", _PASSWORD.sub(r"\g<head>***\g<tail>", dsn))


@functools.lru_cache(maxsize=32)  # App.dsn converts on every use: once per string
def keywords_to_url(text: str, source: str = "the DSN") -> str:
    """A libpq key=value connection string as the postgresql:// URL that names the same
    connection (empty values count as unset, as in libpq).

    Raises:
        ConfigurationError: `text` is not key=value pairs, or names a connection the URL
            cannot (host and hostaddr together; more ports than hosts).
    """
    if not text.strip():
        raise ConfigurationError(f"{source} is empty; {_KEYWORDS_FORM}")
    if "=" not in text:
        raise ConfigurationError(
            f"{source} is neither a postgresql:// URL nor key=value pairs; {_KEYWORDS_FORM}"
        )
    given = {key: value for key, value in _keywords(text, source).items() if value}
    user, password = given.pop("user", None), given.pop("password", None)
    dbname, port = given.pop("dbname", None), given.pop("port", None)
    hosts, hostaddr = given.pop("host", None), given.pop("hostaddr", None)
    if hosts and hostaddr:
        raise ConfigurationError(
            f"{source} gives both host and hostaddr, which the driver cannot tell apart: keep "
            "host (a name or an address)"
        )
    hosts = hosts or hostaddr
    listed = hosts.split(",") if hosts else []
    ports = port.split(",") if port else []
    if len(ports) > 1 and len(ports) != max(len(listed), 1):
        raise ConfigurationError(
            f"{source} lists {len(listed)} host(s) and {len(ports)} ports: give one port for "
            "every host, or one port for all of them"
        )
    netloc = ""
    if user or password:
        netloc = _quoted(user or "") + (f":{_quoted(password)}" if password else "") + "@"
    query: list[tuple[str, str]] = []
    if listed and all(_in_netloc(host) for host in listed):
        netloc += ",".join(
            (f"[{host}]" if ":" in host else host)
            + (f":{ports[0] if len(ports) == 1 else ports[i]}" if ports else "")
            for i, host in enumerate(listed)
        )
    elif listed:  # a socket directory cannot be written among the URL's hosts, only as ?host=
        query.append(("host", ",".join(f"[{h}]" if h.count(":") > 1 else h for h in listed)))
    if ports and not netloc.rpartition("@")[2]:
        query.append(("port", port or ""))
    path = f"/{_quoted(dbname)}" if dbname else ""
    query += given.items()  # sslmode, application_name, ...: as the URL form takes them
    encoded = urllib.parse.urlencode(query, quote_via=urllib.parse.quote, safe="")
    return f"postgresql://{netloc}{path}" + (f"?{encoded}" if encoded else "")


def _quoted(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def _in_netloc(host: str) -> bool:
    """Whether `host` can be written among a URL's hosts (not a socket directory)."""
    return not any(c in host for c in "/@?#[]") and host.count(":") != 1


def _keywords(text: str, source: str) -> dict[str, str]:
    """The pairs of a key=value connection string, read as libpq reads them: blanks around
    `=` allowed, a value in single quotes may hold blanks, and a backslash takes the next
    character as it is. A key given twice keeps its last value. Errors name keys, never
    values (one may be a password)."""
    pairs: dict[str, str] = {}
    i, end, last = 0, len(text), None
    while True:
        while i < end and text[i].isspace():
            i += 1
        if i == end:
            break
        start = i
        while i < end and not text[i].isspace() and text[i] != "=":
            i += 1
        key = text[start:i]
        while i < end and text[i].isspace():
            i += 1
        if not key or i == end or text[i] != "=":
            where = f"after {last}=..." if last else "at its start"
            problem = "a value with no key" if not key else "a word with no '=' after it"
            raise ConfigurationError(f"{source} has {problem} ({where}); {_KEYWORDS_FORM}")
        i += 1
        while i < end and text[i].isspace():
            i += 1
        value: list[str] = []
        quoted = i < end and text[i] == "'"
        i += quoted
        while i < end and (text[i] != "'" if quoted else not text[i].isspace()):
            if text[i] == "\\" and i + 1 < end:
                i += 1
            value.append(text[i])
            i += 1
        if quoted:
            if i == end:
                raise ConfigurationError(
                    f"{source} has a quoted value of {key!r} with no closing quote; "
                    f"{_KEYWORDS_FORM}"
                )
            i += 1
        pairs[key] = "".join(value)
        last = key
    return pairs
