"""``ragidx verify``: check an index's files, checksums and internal agreement; ``--repair`` a damaged one
(its manifest too, from ``manifest.backup.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ragidx.cli.console import PARTIAL_EXIT, err, handle_errors, out
from ragidx.cli.options import DEFAULT_INDEX, Json

if TYPE_CHECKING:
    from ragidx.index.verify import RepairReport


@handle_errors
def verify_command(
    index: Annotated[Path, typer.Argument(help="Index directory.")] = Path(DEFAULT_INDEX),
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Rebuild a damaged index from what is intact: keep every document whose files agree, "
            "drop (and list) the others, commit that as the next generation. A damaged manifest.json "
            "is rebuilt from manifest.backup.json (the copy each commit writes) when that copy passes "
            "its checksum; never guessed.",
        ),
    ] = False,
    as_json: Json = False,
) -> None:
    """Check an index: file checksums, FAISS ids against store rows, counts, leftovers.

    Every file is checked against the manifest's size and sha256, FAISS ids against the store's
    rows, per-document vector counts against the manifest's counts; leftovers of interrupted
    writes are noted.

    --repair (under the writer lock) keeps every document whose record, vector rows and vectors
    are intact and agree, rebuilds the lexical index and counts, drops the other documents (each
    listed with why: re-ingest their files to add them back) and commits the next generation. A
    manifest.json that is missing, unreadable or fails its checksum is rebuilt first from
    manifest.backup.json, the copy of the committed manifest each commit writes (checked by its own
    checksum; files of a newer generation than it are named and not restored). Without a copy to
    trust (indexes written before it existed, or a copy damaged too) the manifest cannot be
    repaired: --repair says so and writes nothing; restore it from a backup, or ingest into a new
    index.

    Exit status: 0 the index is sound (after --repair: repaired, nothing dropped); 1 it is damaged
    (each problem on its own line), or could not be repaired; 3 repaired, but documents were dropped.
    """
    if repair:
        _repair(index, as_json)
        return
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
        if report.repairable:
            err.print(f"repair it with: ragidx verify --repair {index}", highlight=False, markup=False)
    if not report.ok:
        raise typer.Exit(1)


def _repair(index: Path, as_json: bool) -> None:
    from ragidx.index.verify import repair

    report = repair(index)
    if as_json:
        out.print_json(json.dumps(report.to_dict(), ensure_ascii=False))
    else:
        _print_repair(index, report)
    if report.dropped or report.dropped_unnamed:
        raise typer.Exit(PARTIAL_EXIT)


def _print_repair(index: Path, report: RepairReport) -> None:
    if not report.repaired:
        out.print(f"ok: {index}: nothing to repair, {report.documents} documents", highlight=False)
        return
    for damage in report.damage:
        err.print(f"damaged: {damage}", highlight=False, markup=False)
    for doc_id, why in report.dropped.items():
        err.print(f"dropped: {doc_id}: {why}", highlight=False, markup=False)
    if report.dropped_unnamed:
        err.print(
            f"dropped: {report.dropped_unnamed} more documents, whose ids were lost with the store",
            highlight=False,
            markup=False,
        )
    for rebuilt in report.rebuilt:
        err.print(f"rebuilt: {rebuilt}", highlight=False, markup=False)
    for note in report.notes:
        err.print(f"note: {note}", highlight=False, markup=False)
    dropped = len(report.dropped) + report.dropped_unnamed
    again = "; ingest their files again to add them back" if dropped else ""
    manifest = "" if report.manifest_from is None else f", manifest rebuilt from {report.manifest_from}"
    out.print(
        f"repaired: {index} generation {report.generation}{manifest}, {report.documents} documents "
        f"kept, {dropped} dropped{again}",
        highlight=False,
    )
