"""Sizes and durations as people read them, short: `1.5 MB`, `45s`, `12m`, `3.5h`, `8.2d`.

The command line (`sweepq doctor`, `top`, `sweep`, `demo`) and the dashboard show them so.
"""

from __future__ import annotations


def format_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    """A short human duration: 45s, 12m, 3.5h, 8.2d."""
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"
