"""``ragidx verify``: check an index's files, checksums and internal agreement."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ragidx.cli.console import err, handle_errors, out
from ragidx.cli.options import DEFAULT_INDEX, Json


@handle_errors
def verify_command(
    index: Annotated[Path, typer.Argument(help="Index directory.")] = Path(DEFAULT_INDEX),
    as_json: Json = False,
) -> None:
    """Check an index: file checksums, FAISS ids against store rows, counts, leftovers.

    Every file is checked against the manifest's size and sha256, FAISS ids against the store's
    rows, per-document vector counts against the manifest's counts; leftovers of interrupted
    writes are noted.

    Exit status: 0 the index is sound; 1 it is damaged (each problem on its own line).
    """
    from ragidx.index.verify import verify

    report = verify(index)
    if as_json:
        out.print_json(json.dumps(report.to_dict(), ensure_ascii=False))
    else:
        for note in report.notes:
            err.print(f"note: {note}", highlight=False, markup=False)
        for problem in report.problems:
            err.print(f"problem: {problem}", highlight=False, markup=False)
        if report.ok:
            out.print(
                f"ok: {index} generation {report.generation}, {report.documents} documents, "
                f"{report.vectors} vectors",
                highlight=False,
            )
    if not report.ok:
        raise typer.Exit(1)
