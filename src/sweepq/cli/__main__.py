"""`python -m sweepq.cli`: the same as the `sweepq` console script."""

from . import main

main()
