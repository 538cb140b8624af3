"""What every command shares: the two consoles, ``--debug`` state, exit codes and error handling.

A :class:`~ragidx.errors.RagidxError` raised inside a command becomes ``error: <one line>`` on
stderr (one such line per problem, when a config file has several) and its exit code (see
docs/cli.md), with the traceback only under ``--debug``. Text that is not ragidx's own markup (file
names, install hints such as ``pip install 'ragidx[eval]'``) goes through :func:`plain` before a
rich console prints it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

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
            for line in str(exc).splitlines() or [""]:  # plain lines, never wrapped
                typer.echo(f"error: {line}", err=True)
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
    """``text`` safe for a terminal and on one line: every character Python deems unprintable (C0
    and C1 controls, ESC, DEL, a newline in a file name, bidirectional overrides, zero-width marks,
    line separators) escaped as ``\\x1b``, ``\\u202e``; a space stays a space."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def plain(text: str) -> str:
    """``text`` as one line that a rich console prints as it is: ``[eval]`` in
    ``pip install 'ragidx[eval]'`` or a file name is not taken for markup."""
    return escape(one_line(text))


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 document``, ``2 documents``, ``1 worker``, ``0 workers`` (``many``: an irregular plural)."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"
