"""The ``ragidx`` command line: a thin Typer shell over the library API (see ``app``)."""

from ragidx.cli.app import app, main

__all__ = ["app", "main"]
