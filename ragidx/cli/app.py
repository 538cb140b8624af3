"""The root Typer app: global options, and the one place where commands are registered.

Each command lives in its own module, ``ragidx.cli.<command>``, as a plain function; this module
imports them and registers them, so dependencies point one way (app → commands → library).
Command modules import torch and the other heavy libraries inside the function that needs them,
so ``ragidx --help``, ``ragidx COMMAND --help``, ``info`` and ``verify`` start without them.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from ragidx import __version__
from ragidx.cli import delete, eval, info, ingest, probe, query, verify
from ragidx.cli.console import out, state

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
app.add_typer(eval.eval_app, name="eval")
app.add_typer(probe.probe_app, name="probe")
