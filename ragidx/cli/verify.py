"""``ragidx verify``: check an index's files, checksums and internal agreement; ``--repair`` a damaged one
(its manifest too, from ``manifest.backup.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ragidx.cli.console import PARTIAL_EXIT, err, handle_errors, out, plain
from ragidx.cli.options import DEFAULT_INDEX, Json
from ragidx.errors import reporting_commits

if TYPE_CHECKING:
    from ragidx.index.verify import RepairReport


@handle_errors
def verify_command(
    index: Annotated[Path, typer.Argument(help="Index directory.")] = Path(DEFAULT_INDEX),
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Rebuild a damaged index from what is still readable: keep every document whose record, "
            "vector rows and vectors are sound, embed again (with the index's model) those whose text is "
            "sound but whose vectors are not, drop (and list) only those whose text is lost; the damaged "
            "files go to DIR/quarantine/. A damaged manifest.json is rebuilt from manifest.backup.json "
            "when that copy passes its checksum; never guessed.",
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="With --repair: list what it would keep, re-embed and drop, per document; change nothing.",
        ),
    ] = False,
    as_json: Json = False,
) -> None:
    """Check an index: file checksums, FAISS ids against store rows, counts, leftovers.

    Every file is checked against the manifest's size and sha256, FAISS ids against the store's
    rows, per-document vector counts against the manifest's counts; leftovers of interrupted
    writes are noted. A damaged index's hint says what --repair would do.

    --repair (under the writer lock) salvages every document it can: it reads each file of the
    damaged generation part by part (Parquet row groups and columns checked by their page CRCs,
    FAISS vectors by the block CRCs the commit recorded), keeps the documents whose record, vector
    rows and vectors are sound, embeds again from its stored text each document that lost its
    vectors (with the index's own model and settings), and drops only those whose text is lost (or
    whose vectors came from outside ragidx), each listed with why. It rebuilds the lexical index
    and the counts, moves the damaged generation's files to DIR/quarantine/generation-N/ (with
    dropped.jsonl: what is readable of the dropped documents, in the JSONL form ragidx ingest
    reads) and commits the next generation; nothing is deleted. Remove the quarantine folder when
    you no longer need it. A manifest.json that is missing, unreadable or fails its checksum is
    rebuilt first from manifest.backup.json, the copy of the committed manifest each commit writes
    (checked by its own checksum; files of a newer generation than it are named and not restored).
    Without a copy to trust (indexes written before it existed, or a copy damaged too) the
    manifest cannot be repaired: --repair says so and writes nothing; restore it from a backup, or
    ingest into a new index.

    Exit status: 0 the index is sound (after --repair: repaired, nothing dropped); 1 it is damaged
    (each problem on its own line), or could not be repaired; 3 repaired (or, with --dry-run, would
    be), but documents were dropped.
    """
    if dry_run and not repair:
        raise typer.BadParameter("--dry-run goes with --repair (ragidx verify --repair --dry-run DIR)")
    if repair:
        _repair(index, as_json, dry_run)
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
            plan = (
                ""
                if report.repair_plan is None
                else f" (it would {report.repair_plan}; --dry-run lists them)"
            )
            err.print(f"repair it with: ragidx verify --repair {index}{plan}", highlight=False, markup=False)
    if not report.ok:
        raise typer.Exit(1)


def _repair(index: Path, as_json: bool, dry_run: bool) -> None:
    from ragidx.index.verify import repair

    with reporting_commits():  # Ctrl-C after the repaired generation's switch says it was committed
        report = repair(index, dry_run=dry_run)
        if as_json:
            out.print_json(json.dumps(report.to_dict(), ensure_ascii=False))
        else:
            _print_repair(index, report)
    if report.dropped or report.dropped_unnamed:
        raise typer.Exit(PARTIAL_EXIT)


def _print_repair(index: Path, report: RepairReport) -> None:
    if not report.repaired and not (report.dry_run and report.needed):
        out.print(f"ok: {plain(str(index))}: nothing to repair, {report.documents} documents")
        return
    for damage in report.damage:
        err.print(f"damaged: {plain(damage)}")
    if report.dry_run:
        for doc_id in report.kept:
            out.print(f"keep: {plain(doc_id)}")
    console, embed, drop = (out, "re-embed", "drop") if report.dry_run else (err, "re-embedded", "dropped")
    for doc_id, why in report.reembedded.items():
        console.print(f"{embed}: {plain(doc_id)}: {plain(why)}")
    for doc_id, why in report.dropped.items():
        console.print(f"{drop}: {plain(doc_id)}: {plain(why)}")
    if report.dropped_unnamed:
        err.print(f"{drop}: {report.dropped_unnamed} more documents, whose ids were lost with the store")
    for doc_id, fields in report.reset.items():
        err.print(f"reset: {plain(doc_id)}: {plain(', '.join(fields))} (lost with a damaged page)")
    for rebuilt in report.rebuilt:
        err.print(f"{'would rebuild' if report.dry_run else 'rebuilt'}: {plain(rebuilt)}")
    for note in report.notes:
        err.print(f"note: {plain(note)}")
    dropped = len(report.dropped) + report.dropped_unnamed
    if report.dry_run:
        out.print(
            f"dry run: {plain(str(index))}: repair would {report.summary()}; nothing was changed",
            highlight=False,
        )
        return
    if report.quarantine is not None:
        err.print(
            f"quarantine: {plain(report.quarantine)} (the damaged files; remove it when no longer needed)"
        )
    again = "; ingest their files again to add them back" if dropped else ""
    manifest = "" if report.manifest_from is None else f", manifest rebuilt from {report.manifest_from}"
    out.print(
        f"repaired: {plain(str(index))} generation {report.generation}{plain(manifest)}, {len(report.kept)} "
        f"documents kept, {len(report.reembedded)} re-embedded, {dropped} dropped{again}",
        highlight=False,
    )
