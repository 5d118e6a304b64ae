"""Finding the database to use, and showing it without its password."""

from __future__ import annotations

import os
import re

from .errors import ConfigurationError

_PASSWORD = re.compile(r"(?P<head>://[^:/@]*:)[^@]*(?P<tail>@)")
_PASSWORD_PARAM = re.compile(r"(?i)(password=)[^&\s]*")


def resolve_dsn(dsn: str | None) -> str:
    """`dsn` if given, else SWEEPQ_DSN, else DATABASE_URL; otherwise a clear error."""
    for value in (dsn, os.environ.get("SWEEPQ_DSN"), os.environ.get("DATABASE_URL")):
        if value:
            return value
    raise ConfigurationError(
        "no database given: pass App(dsn='postgresql://...'), or --dsn on the command line, "
        "or set SWEEPQ_DSN (or DATABASE_URL)"
    )


def redact(dsn: str) -> str:
    """The DSN with any password replaced by '***'."""
    return _PASSWORD_PARAM.sub(r"\1***", _PASSWORD.sub(r"\g<head>***\g<tail>", dsn))
