"""The root Typer app: global options, error handling, and one module per command.

Commands live in ``ragidx.cli.<command>`` and are registered here. Every command runs inside
:func:`handle_errors`: a :class:`~ragidx.errors.RagidxError` becomes ``error: <one line>`` on stderr
and a non-zero exit, with the traceback only under ``--debug``.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from typing import Annotated, ParamSpec, TypeVar

import typer
from rich.console import Console

from ragidx import __version__
from ragidx.errors import RagidxError

P = ParamSpec("P")
PARTIAL_EXIT = 3  # the command did its work, but some inputs were skipped (like rsync's code 23)
R = TypeVar("R")

out = Console(soft_wrap=True)  # results (stdout)
err = Console(stderr=True, soft_wrap=True)  # progress and warnings

app = typer.Typer(
    name="ragidx",
    help=(
        "Embed whole long documents, index them with FAISS, and retrieve them.\n\n"
        "Start with:  ragidx ingest ./docs --index my-index  then  "
        "ragidx query 'your question' --index my-index"
    ),
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    add_completion=False,
)


class _State:
    debug = False


state = _State()


def handle_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn user-facing errors into one line and an exit code."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except RagidxError as exc:
            if state.debug:
                raise
            typer.echo(f"error: {exc}", err=True)  # one plain line, never wrapped
            raise typer.Exit(exc.exit_code) from None
        except OSError as exc:  # a disk or permission failure while writing: nothing was committed
            if state.debug:
                raise
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            typer.echo("interrupted: nothing was committed", err=True)
            raise typer.Exit(130) from None

    return wrapper


def one_line(text: str) -> str:
    """``text`` with control characters (a newline in a file name…) escaped: warnings stay one line."""
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: repr(m.group())[1:-1], text)


def _version(value: bool) -> None:
    if value:
        out.print(f"ragidx {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """ragidx: long-document retrieval."""
    state.debug = debug
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    """Console-script entry point."""
    app()


# Commands register themselves on import (one module each, Typer-style).
from ragidx.cli import delete, eval, info, ingest, probe, query, verify  # noqa: E402,F401
