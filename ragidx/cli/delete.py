"""``ragidx delete``: remove documents from an index by id or source glob."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ragidx.cli.console import PARTIAL_EXIT, err, handle_errors, one_line, out, plain, plural
from ragidx.cli.options import DEFAULT_INDEX, Json
from ragidx.errors import reporting_commits


@handle_errors
def delete_command(
    index: Annotated[Path, typer.Argument(help="Index directory.")] = Path(DEFAULT_INDEX),
    ids: Annotated[list[str] | None, typer.Option("--id", help="Document id to remove (repeatable).")] = None,
    sources: Annotated[
        list[str] | None,
        typer.Option(
            "--source", help="Glob on the source path or document id, e.g. '*/drafts/*' (repeatable)."
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would go; change nothing.")] = False,
    as_json: Json = False,
) -> None:
    """Remove documents (their vectors and rows) and commit a new generation atomically.

    Examples:  ragidx delete my-index --id notes/old.md ;  ragidx delete my-index --source '*/drafts/*'

    Exit status: 0 done; 1 error (nothing changed); 3 done, but some --id matched nothing.
    """
    from ragidx.index.delete import delete

    with reporting_commits():  # Ctrl-C after the commit says what was committed
        report = delete(index, ids or [], sources or [], dry_run=dry_run)
        if as_json:
            out.print_json(json.dumps({**report.to_dict(), "dry_run": dry_run}, ensure_ascii=False))
        else:
            verb = "would remove" if dry_run else "removed"
            removed = plural(len(report.removed), "document")
            out.print(f"{verb} {removed} from {plain(str(index))}", highlight=False)
            for doc_id in report.removed:
                out.print(f"  {one_line(doc_id)}", highlight=False, markup=False)
        for doc_id in report.not_found:
            line = one_line(f"warning: {index}: no document with id {doc_id!r}")
            err.print(line, highlight=False, markup=False)
        if report.not_found:
            raise typer.Exit(PARTIAL_EXIT)
