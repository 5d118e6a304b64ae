"""The `sweepq` command line (typer + rich): parses options, calls the library, renders."""

from .main import cli, main

__all__ = ["cli", "main"]
