"""How the pages show values: the templates' environment and its filters (`when`, `number`,
`duration`, `percent`, `pretty`, `last_line`, `rate`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from sweepq.core.admin import rate_text
from sweepq.core.units import format_duration


def environment() -> Environment:
    """The templates, autoescaped (every value a job holds is shown as text)."""
    env = Environment(
        loader=PackageLoader("sweepq.web", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    env.filters["number"] = number
    env.filters["duration"] = duration
    env.filters["pretty"] = pretty
    env.filters["percent"] = percent
    env.filters["last_line"] = last_line
    env.filters["rate"] = rate_text
    return env


def when(moment: datetime | None) -> str:
    """A time as the pages show it: UTC, to the second."""
    if moment is None:
        return "—"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def number(n: float | None) -> str:
    if n is None:
        return "—"
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.1f}"


def duration(seconds: float | None) -> str:
    """A short duration: 120 ms, 4.2s, then as the command line shows it (45s, 12m, 3.5h,
    8.2d)."""
    if seconds is None:
        return "—"
    seconds = max(seconds, 0.0)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.1f}s"
    return format_duration(seconds)


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} %"


def pretty(value: Any) -> str:
    """A JSON value laid out for reading (the template escapes it)."""
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(value)


def last_line(text: str | None) -> str:
    """The last line of an error or a note, which names what went wrong ("" for none)."""
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else ""
