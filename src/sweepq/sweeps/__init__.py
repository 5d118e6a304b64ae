"""Sweeps: walk a whole population by keyset pages, one job per item, link by link.

A sweep is built from plain core jobs: per run, a chain of *links* (each reads one page after the
committed cursor and fans it out) and one *leaf* per item. The `sweep_runs` row is the run's
single-flight guard and the source of its status. The stable names are re-exported from
`sweepq`.
"""

from .app import App
from .errors import InvalidSweepError, SweepError, SweepFault, UnknownSweepError
from .runs import SweepRun, SweepStarted, SweepState
from .sweep import Sweep
from .table import TableSweep

__all__ = [
    "App",
    "InvalidSweepError",
    "Sweep",
    "SweepError",
    "SweepFault",
    "SweepRun",
    "SweepStarted",
    "SweepState",
    "TableSweep",
    "UnknownSweepError",
]
