"""What a request may ask for: ids, filters and form values, checked before anything is read or
written. A value that does not fit is a `BadInput`, shown as a 400 page that says which and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from urllib.parse import urlencode

from sweepq.core.browse import JobFilter
from sweepq.core.jobs import JobState
from sweepq.sweeps.naming import leaf_group

MAX_TEXT = 200  # the longest queue, task, key or group name a filter takes
MAX_ID = 9_223_372_036_854_775_807
FILTER_FIELDS = ("state", "queue", "task", "key", "group", "run", "since", "until")


class BadInput(Exception):
    """A request's value that does not fit; its message says which, and what would."""


def row_id(value: str | None, what: str = "job id") -> int:
    """A positive id (of a job, a run) from a path or a form."""
    if value is None or not value.isascii() or not value.isdigit():
        raise BadInput(f"the {what} must be a whole number, got {value!r}")
    number = int(value)
    if not 1 <= number <= MAX_ID:
        raise BadInput(f"the {what} must be between 1 and {MAX_ID}, got {value}")
    return number


def text(value: str | None, what: str) -> str | None:
    """An optional name (empty: none), at most MAX_TEXT characters, without control chars."""
    if value is None or value.strip() == "":
        return None
    if len(value) > MAX_TEXT:
        raise BadInput(f"the {what} is longer than {MAX_TEXT} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise BadInput(f"the {what} holds control characters")
    return value


def moment(value: str | None, what: str) -> datetime | None:
    """An ISO 8601 date and time (a browser's `datetime-local` field gives one without an
    offset: UTC is assumed, as the pages show every time in UTC)."""
    if value is None or value.strip() == "":
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise BadInput(
            f"{what} must be a date and time like 2026-12-05T13:40 (UTC), got {value!r}"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def state(value: str | None) -> JobState | None:
    if value is None or value == "":
        return None
    try:
        return JobState(value)
    except ValueError:
        known = ", ".join(s.value for s in JobState)
        raise BadInput(f"there is no job state {value!r} (states: {known})") from None


def job_filter(params: Mapping[str, str]) -> JobFilter:
    """The filter of a listing or a batch action, from its query or form fields."""
    run = params.get("run")
    group = text(params.get("group"), "group")
    if run:
        if group is not None:
            raise BadInput("give a group or a sweep run, not both (a run's items are a group)")
        group = leaf_group(row_id(run, "sweep run id"))
    since, until = moment(params.get("since"), "since"), moment(params.get("until"), "until")
    if since is not None and until is not None and since >= until:
        raise BadInput("since must be before until")
    return JobFilter(
        state=state(params.get("state")),
        queue=text(params.get("queue"), "queue"),
        task=text(params.get("task"), "task"),
        concurrency_key=text(params.get("key"), "concurrency key"),
        group=group,
        since=since,
        until=until,
    )


def filter_fields(params: Mapping[str, str]) -> dict[str, str]:
    """The filter's fields as given (non-empty ones only), to carry into links and forms."""
    return {k: params[k] for k in FILTER_FIELDS if params.get(k)}


def query(fields: Mapping[str, str | int | None]) -> str:
    """`?a=1&b=2` of the fields that are set ("" for none)."""
    kept = {k: str(v) for k, v in fields.items() if v not in (None, "")}
    return f"?{urlencode(kept)}" if kept else ""


def limit(value: str | None) -> int | None:
    """A concurrency limit: a whole number from 0, or empty for no limit."""
    if value is None or value.strip() == "":
        return None
    value = value.strip()
    if not value.isascii() or not value.isdigit() or int(value) > 2_147_483_647:
        raise BadInput(f"a limit must be a whole number from 0 (or empty: none), got {value!r}")
    return int(value)


def display_name(value: str | None) -> str | None:
    """The name a token's holder gives at login, recorded with their actions."""
    name = text(value, "name")
    if name is not None and len(name) > 64:
        raise BadInput("a name is at most 64 characters")
    return name
