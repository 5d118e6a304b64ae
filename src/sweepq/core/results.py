"""Job results: what a handler returns, stored with its job as JSON, bounded in size.

A handler that returns None stores nothing. Any other value is encoded as msgspec encodes it
(JSON values, and also Structs, dataclasses, datetimes, ... in their JSON form) and must fit the
App's `result_max_bytes`; a value that does not fails the execution with `InvalidResultError`,
as if the handler had raised it. The result is written with the job's completion, in the same
statement, and removed with the job by retention.
"""

from __future__ import annotations

import os

import msgspec

from .checks import json_text_too_deep, too_deep_message
from .errors import ConfigurationError, InvalidResultError

DEFAULT_RESULT_MAX_BYTES = 65_536
# A result rides in its job's row: every read of the job carries it until retention removes it.
# Outputs larger than this belong in storage of their own, the result pointing at them.
RESULT_MAX_BYTES_RANGE = range(1, 16 * 1_048_576 + 1)
RESULT_MAX_BYTES_ENV = "SWEEPQ_RESULT_MAX_BYTES"


def result_max_bytes(value: object) -> int:
    """The result size limit: `value`, else SWEEPQ_RESULT_MAX_BYTES, else 64 KiB.

    Raises:
        ConfigurationError: a limit that is not a whole number of bytes in 1..16 MiB.
    """
    source = "result_max_bytes"
    if value is None:
        text = os.environ.get(RESULT_MAX_BYTES_ENV, "").strip()
        if not text:
            return DEFAULT_RESULT_MAX_BYTES
        source = RESULT_MAX_BYTES_ENV
        value = int(text) if text.isdigit() else text
    allowed = RESULT_MAX_BYTES_RANGE
    if not isinstance(value, int) or isinstance(value, bool) or value not in allowed:
        raise ConfigurationError(
            f"{source} must be a whole number of bytes in {allowed.start}..{allowed.stop - 1:,} "
            f"(default {DEFAULT_RESULT_MAX_BYTES:,}), got {value!r}"
        )
    return value


def encode_result(value: object, *, task: str, max_bytes: int) -> str | None:
    """The result to store for a handler's return value: JSON text, or None for None.

    Raises:
        InvalidResultError: the value is not JSON-encodable, or its JSON is over `max_bytes`.
    """
    if value is None:
        return None
    try:
        data = msgspec.json.encode(value)
    except Exception as exc:  # TypeError, UnicodeEncodeError, RecursionError, ...: not storable
        raise InvalidResultError(
            task,
            f"it is not JSON-encodable ({type(exc).__name__}: {exc}); return JSON values (dict, "
            "list, str, int, float, bool), a msgspec Struct or a dataclass, or None to store "
            "nothing",
        ) from None
    if json_text_too_deep(data):
        raise InvalidResultError(task, too_deep_message("it"))
    if len(data) > max_bytes:
        raise InvalidResultError(
            task,
            f"its JSON is {len(data):,} bytes, over the limit of {max_bytes:,} bytes; return "
            "less (store large outputs elsewhere and return a reference to them), or raise the "
            f"limit with App(result_max_bytes=...) or {RESULT_MAX_BYTES_ENV}",
        )
    return data.decode()
