"""What every command shares: the two consoles, ``--debug`` state, exit codes and error handling.

A :class:`~ragidx.errors.RagidxError` raised inside a command becomes ``error: <one line>`` on
stderr and its exit code (see docs/cli.md), with the traceback only under ``--debug``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console

from ragidx.errors import RagidxError

P = ParamSpec("P")
PARTIAL_EXIT = 3  # the command did its work, but some inputs were skipped (like rsync's code 23)
R = TypeVar("R")

out = Console(soft_wrap=True)  # results (stdout)
err = Console(stderr=True, soft_wrap=True)  # progress and warnings

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
        except KeyboardInterrupt as exc:  # one raised after a commit's switch says what it committed
            typer.echo(f"interrupted: {str(exc) or 'nothing was committed'}", err=True)
            raise typer.Exit(130) from None

    return wrapper


def one_line(text: str) -> str:
    """``text`` with control characters (a newline in a file name…) escaped: warnings stay one line."""
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: repr(m.group())[1:-1], text)
