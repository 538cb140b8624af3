"""``verify``: a full integrity check of an index directory (what ``ragidx verify`` runs).

Opening an index already checks each file's size and sha256 against the manifest and that FAISS
ids equal the store's vector ids; :func:`verify` does that without raising, and goes further: every
document's vector count equals its rows in the vector table, every row belongs to a document,
vector ids are unique and below the manifest's next id, and the manifest's counts match the store.
It also notes (without failing) what a writer left behind: a lock, the checkpoints an interrupted
ingest can resume from, temp files or files of other generations.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragidx.errors import IndexFormatError
from ragidx.index.directory import DATA_FILE, STAGING_NAME, load_generation
from ragidx.index.lock import LOCK_NAME, is_stale, read_holder
from ragidx.index.manifest import MANIFEST_NAME, Manifest
from ragidx.index.store import Store


@dataclass
class VerifyReport:
    """What :func:`verify` found: ``problems`` make the index unusable, ``notes`` do not."""

    directory: str
    generation: int | None = None
    documents: int = 0
    vectors: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "ok": self.ok,
            "generation": self.generation,
            "documents": self.documents,
            "vectors": self.vectors,
            "problems": self.problems,
            "notes": self.notes,
        }


def verify(directory: str | Path) -> VerifyReport:
    """Check an index directory; never raises for a damaged index (see :class:`VerifyReport`)."""
    directory = Path(directory)
    report = VerifyReport(directory=str(directory))
    try:
        manifest, _, store, _, _ = load_generation(directory)
    except IndexFormatError as exc:
        report.problems.append(str(exc))
        _notes(directory, None, report)
        return report
    report.generation = manifest.generation
    report.documents, report.vectors = store.n_documents, store.n_vectors
    report.problems += _store_problems(directory, manifest, store)
    _notes(directory, manifest, report)
    return report


def _store_problems(directory: Path, manifest: Manifest, store: Store) -> list[str]:
    problems: list[str] = []
    vids = store.vids()
    if len(np.unique(vids)) != len(vids):
        problems.append(f"{directory}: vector ids repeat in the store")
    if len(vids) and int(vids.max()) >= manifest.next_vid:
        top = int(vids.max())
        problems.append(f"{directory}: vector id {top} ≥ the manifest's next id {manifest.next_vid}")
    rows = Counter(store.vector_doc_ids())
    summaries = store.summaries()
    for row in summaries:
        if rows.pop(row["doc_id"], 0) != row["n_vectors"]:
            problems.append(
                f"{directory}: document {row['doc_id']!r} says {row['n_vectors']} vectors, the vector "
                "table disagrees"
            )
    if rows:
        problems.append(f"{directory}: {sum(rows.values())} vector rows belong to no document")
    if manifest.counts.model_dump() != manifest.counts.model_validate(store.stats()).model_dump():
        problems.append(f"{directory / MANIFEST_NAME}: counts differ from the store")
    return problems


def _notes(directory: Path, manifest: Manifest | None, report: VerifyReport) -> None:
    if not directory.is_dir():
        return
    current = {entry.name for entry in manifest.files.values()} if manifest else set()
    lock = directory / LOCK_NAME
    if lock.exists():
        holder = read_holder(lock)
        state = "stale (its process is gone)" if holder and is_stale(holder) else "held"
        report.notes.append(f"{lock}: writer lock {state}: {holder}")
    if (directory / STAGING_NAME).is_dir():
        report.notes.append(
            f"{directory / STAGING_NAME}: checkpoints of an interrupted ingest; the next ingest reuses them"
        )
    for path in sorted(directory.iterdir()):
        leftover = (DATA_FILE.match(path.name) and path.name not in current) or ".tmp-" in path.name
        if leftover:
            report.notes.append(f"{path}: left by an interrupted write; the next ingest removes it")
