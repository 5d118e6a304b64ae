"""Checking what callers pass, before anything is written: one clear error per bad value.

Every check raises `InvalidJobOptionError` naming the option, what it must be and the value it
got (shortened), and returns the value as the statements take it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from .errors import InvalidJobOptionError

MAX_KEY_LENGTH = 512
# The idempotency index holds scope and key together; a btree entry holds at most 2,704 bytes.
MAX_IDEMPOTENCY_BYTES = 2048
# Durations (delay, deadline, unique_for) and run_at's distance from now: far beyond any real
# schedule, far inside what PostgreSQL's timestamptz and Python's datetime can hold.
MAX_SPAN = timedelta(days=36_525)
MAX_SPAN_TEXT = "100 years"
MAX_INT4 = 2**31 - 1
MAX_INT8 = 2**63 - 1


def storable_text(value: str) -> bool:
    """Whether PostgreSQL text can hold `value`: no NUL, and valid UTF-8 (no lone surrogates)."""
    if "\x00" in value:
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def show(value: object) -> str:
    """`repr(value)`, shortened: a message must stay one readable line."""
    shown = value.isoformat() if isinstance(value, datetime) else repr(value)
    return shown if len(shown) <= 80 else f"{shown[:60]}...({len(shown):,} characters)"


def seconds(value: object, what: str, *, allow_zero: bool) -> float:
    """Seconds of a duration option: a timedelta or a finite number, at most 100 years."""
    if isinstance(value, timedelta):
        total = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        # abs() first: float() of a huge int raises; NaN fails every comparison below.
        total = float(value) if abs(value) <= MAX_SPAN.total_seconds() else math.inf
    else:
        total = math.nan
    lowest_ok = total > 0 or (allow_zero and total == 0)
    if not (lowest_ok and total <= MAX_SPAN.total_seconds()):
        span = "between 0 and" if allow_zero else "above 0 and at most"
        raise InvalidJobOptionError(
            f"{what} must be a timedelta or a finite number of seconds {span} "
            f"{MAX_SPAN_TEXT}, got {show(value)}"
        )
    return total


def int_in(value: object, what: str, allowed: range) -> int:
    """An int (not a bool) within `allowed`."""
    if not isinstance(value, int) or isinstance(value, bool) or value not in allowed:
        raise InvalidJobOptionError(
            f"{what} must be an int in {allowed.start}..{allowed.stop - 1}, got {show(value)}"
        )
    return value


def text(value: object, what: str, *, empty_ok: bool = False, longest: int = MAX_KEY_LENGTH) -> str:
    """A string PostgreSQL can store (and index): at most `longest` characters, no NUL."""
    if not isinstance(value, str) or (not value and not empty_ok) or len(value) > longest:
        kind = "string" if empty_ok else "non-empty string"
        raise InvalidJobOptionError(
            f"{what} must be a {kind} of at most {longest} characters, got {show(value)}"
        )
    if not storable_text(value):
        raise InvalidJobOptionError(
            f"{what} cannot hold NUL ('\\x00') or lone surrogate characters, which PostgreSQL "
            f"text cannot store; remove or encode them, got {show(value)}"
        )
    return value


def optional_text(value: object, what: str) -> str | None:
    """None, or a non-empty `text`."""
    return None if value is None else text(value, what)


def run_at(value: object) -> datetime | None:
    """None, or a timezone-aware datetime within 100 years of now."""
    if value is None:
        return None
    if isinstance(value, datetime) and _aware_and_near(value):
        return value
    raise InvalidJobOptionError(
        f"run_at must be a timezone-aware datetime within {MAX_SPAN_TEXT} of now, "
        f"got {show(value)}; use e.g. datetime.now(UTC) + timedelta(hours=1)"
    )


def _aware_and_near(value: datetime) -> bool:
    # An aware difference is computed in UTC and cannot overflow, whatever the offsets.
    return value.utcoffset() is not None and abs(value - datetime.now(UTC)) <= MAX_SPAN


def optional_seconds(value: object, what: str, *, allow_zero: bool = False) -> float | None:
    """None, or the `seconds` of a duration."""
    return None if value is None else seconds(value, what, allow_zero=allow_zero)


def concurrency_limit(key: object, limit: object) -> tuple[str, int | None]:
    """Check the arguments of `App.set_concurrency_limit`."""
    checked = text(key, "concurrency key")
    if limit is not None and (
        not isinstance(limit, int) or isinstance(limit, bool) or not 0 <= limit <= MAX_INT4
    ):
        raise InvalidJobOptionError(
            f"limit must be an int >= 0 or None (at most {MAX_INT4:,}), got {show(limit)}"
        )
    return checked, limit


def key_weight(weight: object) -> int | None:
    """A key's weight (`App.set_concurrency_limit(weight=)`): turns in a row, 1 to 1,000."""
    if weight is None:
        return None
    if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 1_000:
        raise InvalidJobOptionError(
            f"weight must be an int from 1 to 1,000 (turns in a row), got {show(weight)}"
        )
    return weight


def key_ordered(ordered: object, limit: int | None) -> bool | None:
    """Whether a key's jobs start in enqueue order (None: as it is); an ordered key's limit is
    1."""
    if ordered is None:
        return None
    if not isinstance(ordered, bool):
        raise InvalidJobOptionError(f"ordered must be True, False or None, got {show(ordered)}")
    if ordered and limit != 1:
        raise InvalidJobOptionError(
            f"an ordered key runs its jobs one at a time: set its limit to 1, got {show(limit)}"
        )
    return ordered


def rate_limit(key: object, count: object, per: object) -> tuple[str, int | None, float]:
    """Check the arguments of `App.set_rate_limit`: a key, a count >= 1 (None removes the
    rate, whatever `per`) and a window of 1 ms to 100 years."""
    checked = text(key, "concurrency key")
    if count is not None and (
        not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_INT4
    ):
        raise InvalidJobOptionError(
            f"count must be an int >= 1 or None to remove the rate (at most {MAX_INT4:,}), "
            f"got {show(count)}"
        )
    if count is None:
        return checked, None, 0.0
    if per is None:
        raise InvalidJobOptionError(
            "per is required with a count: the window, e.g. per=timedelta(minutes=1)"
        )
    window = seconds(per, "per", allow_zero=False)
    if window < 0.001:
        raise InvalidJobOptionError(f"per must be at least 1 ms, got {show(per)}")
    return checked, count, window


def job_id(value: object) -> int:
    """A job id: an int that fits a bigint."""
    if not isinstance(value, int) or isinstance(value, bool) or not -MAX_INT8 <= value <= MAX_INT8:
        raise InvalidJobOptionError(f"a job id is an int, got {show(value)}")
    return value


def reason(value: object) -> str:
    """A cancellation's reason, recorded in the job's errors."""
    return text(value, "reason", empty_ok=True, longest=4_000)


def retention(older_than: object, batch_size: object) -> tuple[float, int]:
    """The arguments of `prune`: an age (timedelta, 0 to 100 years) and a batch size."""
    if not isinstance(older_than, timedelta):
        raise InvalidJobOptionError(f"older_than must be a timedelta, got {show(older_than)}")
    age = seconds(older_than, "older_than", allow_zero=True)
    return age, int_in(batch_size, "batch_size", range(1, 1_000_001))


def job_state(value: object) -> str:
    """A job state's name (`JobState` or its text)."""
    states = ("available", "running", "completed", "failed", "cancelled")
    if not isinstance(value, str) or value not in states:
        raise InvalidJobOptionError(f"state must be one of {', '.join(states)}, got {show(value)}")
    return str(value)


# How deep JSON values may nest (`[[1]]` is 2 deep): far deeper than any job's arguments, and far
# inside what the decoders can read back (msgspec and Python's json raise RecursionError past
# about 1,000 levels, in a worker already a few dozen frames deep). Every enqueue path refuses
# deeper values (the SQL function too), so that no stored job can break what reads it.
MAX_JSON_DEPTH = 64
_CONTAINERS = (dict, list, tuple)


def json_too_deep(value: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether `value` nests dicts, lists and tuples (msgspec Structs too) more than `limit`
    deep. Iterative: a value nested far too deep for recursion is measured all the same."""
    stack: list[tuple[object, int]] = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        if isinstance(item, _CONTAINERS):
            children: Iterable[object] = item.values() if isinstance(item, dict) else item
        elif hasattr(item, "__struct_fields__"):
            children = [getattr(item, f) for f in item.__struct_fields__]
        else:
            continue
        depth += 1
        if depth > limit:
            return True
        for child in children:
            if isinstance(child, _CONTAINERS) or hasattr(child, "__struct_fields__"):
                push((child, depth))
    return False


def json_text_too_deep(data: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON text nests more than `limit` deep. Text with no more brackets and braces
    than the limit cannot (two counts, at C speed: the case of nearly every job); the rest is
    decoded and measured."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    try:
        return json_too_deep(msgspec.json.decode(data), limit)
    except RecursionError:
        return True


def too_deep_message(what: str) -> str:
    """The refusal of a value nested deeper than `MAX_JSON_DEPTH`."""
    return (
        f"{what}: JSON nested more than {MAX_JSON_DEPTH} levels deep (the most sweepq stores); "
        "flatten the value, or store it elsewhere and pass a reference"
    )


def parse_json(text: str, what: str) -> Any:
    """JSON text given by a user (the CLI's `--args`, `-p`, `-o`), decoded, or an
    `InvalidJobOptionError` saying why it cannot be: not JSON, or nested too deep."""
    if not storable_text(text):
        raise InvalidJobOptionError(
            f"{what} holds NUL or characters that are not valid UTF-8 (a lone surrogate, as "
            f"undecodable bytes of a command line become); pass UTF-8 text: {show(text)}"
        )
    try:
        decoded = msgspec.json.decode(text)
    except RecursionError:
        raise InvalidJobOptionError(too_deep_message(what)) from None
    except msgspec.DecodeError as exc:
        raise InvalidJobOptionError(f"{what} is not valid JSON ({exc}): {show(text)}") from None
    if json_too_deep(decoded):
        raise InvalidJobOptionError(too_deep_message(what))
    return decoded
