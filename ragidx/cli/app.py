"""The root Typer app: global options, and the one place where commands are registered.

Each command lives in its own module, ``ragidx.cli.<command>``, as a plain function; this module
imports them and registers them, so dependencies point one way (app → commands → library).
Command modules import torch and the other heavy libraries inside the function that needs them,
so ``ragidx --help``, ``ragidx COMMAND --help``, ``info`` and ``verify`` start without them.

The root command's class (:class:`_Root`) tidies the help of every command under it: docstring
paragraphs are rewrapped to the terminal's width (not broken where the source lines end), flags
show no value type (``--prune``, not ``--prune <bool>``), and repeatable options show the type of
one value (``--include <str>``, not ``<list[str]>``).
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Any

import typer
import typer.core

from ragidx import __version__
from ragidx.cli import delete, eval, info, ingest, mcp, probe, query, serve, train, verify
from ragidx.cli.console import out, state


class _Root(typer.core.TyperGroup):
    """The ``ragidx`` group: built with every command under it, and tidies their help."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        tidy_help(self)


def tidy_help(command: Any) -> None:
    """Rewrap ``command``'s help paragraphs, drop the value type shown after its flags, show one
    value's type after its repeatable options; the same for every command under it."""
    if command.help:
        command.help = "\n\n".join(
            paragraph if paragraph.startswith("\b") else re.sub(r"[ \t]*\n[ \t]*", " ", paragraph)
            for paragraph in re.split(r"\n\s*\n", command.help.strip())
        )
    ctx = typer.Context(command)
    for param in [*command.params, command.get_help_option(ctx)]:  # --help is made on first use
        if not isinstance(param, typer.core.TyperOption):
            continue
        if param.is_flag and not param.count:
            param.metavar = ""  # a flag takes no value
        elif param.multiple and param.metavar is None:
            param.metavar = _one_value_type(param, ctx)
    for sub in getattr(command, "commands", {}).values():
        tidy_help(sub)


def _one_value_type(param: typer.core.TyperOption, ctx: typer.Context) -> str | None:
    """The type of one value of the repeatable option ``param`` (``<str>``), where typer shows that
    of the list (``<list[str]>``, typer ≥ 0.29, whose options have ``display_type``); ``None``
    (typer's own metavar) where typer already shows one value's type (``TEXT``, typer < 0.29)."""
    display_type = getattr(param, "display_type", None)
    if display_type is None:
        return None
    return re.sub(r"^<list\[(.*)\]>$", r"<\1>", str(display_type(ctx)))


app = typer.Typer(
    name="ragidx",
    cls=_Root,
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


app.command("ingest")(ingest.ingest_command)
app.command("query")(query.query_command)
app.command("info")(info.info_command)
app.command("verify")(verify.verify_command)
app.command("delete")(delete.delete_command)
app.command("serve")(serve.serve_command)
app.command("mcp")(mcp.mcp_command)
app.command("train")(train.train_command)
app.add_typer(eval.eval_app, name="eval")
app.add_typer(probe.probe_app, name="probe")
