"""Errors of the sweeps layer.

They all derive from `SweepError`, itself a `sweepq.SweepqError`::

    SweepqError
    └── SweepError
        ├── InvalidSweepError   a Sweep that cannot run: bad settings, a table, column or key
        │                       that does not exist or is not unique, params that are not JSON
        ├── UnknownSweepError   start of a sweep no class is registered for
        └── SweepFault          the walk went wrong during a run (cursor did not advance, link
                                ceiling, an item served twice, too many failures): the run fails
                                with this message
"""

from __future__ import annotations

from collections.abc import Iterable

from ..core.errors import SweepqError, not_registered


class SweepError(SweepqError):
    """The root of the errors of the sweeps layer."""


class InvalidSweepError(SweepError, ValueError):
    """A sweep declaration, or the params of a run, that cannot work; the message names the fix."""


class UnknownSweepError(SweepError, LookupError):
    """No sweep is registered under this name."""

    def __init__(self, sweep: str, known: Iterable[str]) -> None:
        self.sweep = sweep
        self.known = sorted(known)
        fix = "register it with app.register_sweep before starting it"
        super().__init__(not_registered("sweep", repr(sweep), self.known, fix))


class SweepFault(SweepError):
    """A fault of the whole pass, found by a link; the run is failed with this message."""
