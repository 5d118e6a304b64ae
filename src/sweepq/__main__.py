"""`python -m sweepq`: the same as the `sweepq` command."""

from .cli import main

main()
