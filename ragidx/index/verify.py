"""``verify`` and ``repair``: a full integrity check of an index directory, and the way back to a
usable index from what is intact (what ``ragidx verify`` and ``ragidx verify --repair`` run).

Opening an index already checks each file's size and sha256 against the manifest and that FAISS
ids equal the store's vector ids; :func:`verify` does that without raising, and goes further: every
document's vector count equals its rows in the vector table, every row belongs to a document,
vector ids are unique and below the manifest's next id, and the manifest's counts match the store.
It also notes (without failing) what a writer left behind: a lock, the checkpoints an interrupted
ingest can resume from, temp files or files of other generations, a ``manifest.backup.json`` that
is missing or not a copy of the manifest.

:func:`repair` (under the writer lock) keeps every document whose record, vector rows and vectors
are all intact and agree, drops the others, naming each with the reason, and commits the result as
the next generation (the damaged files go with the old one). What it can rebuild it rebuilds
instead of dropping: the lexical index from the stored texts, a damaged shard as an empty copy of
an intact one, the manifest's counts and next id. Dropped documents come back with the next
``ragidx ingest`` of their files.

A damaged ``manifest.json`` (missing, unreadable, invalid, failing its checksum) is rebuilt from
``manifest.backup.json``, the copy of a committed manifest that each commit writes after its switch
(see ``ragidx.index.directory``), checked as strictly as the manifest (its own checksum) and used
only where some of its generation's files are here; the repair above then runs over the files it
lists (their sizes and sha256 come from it too), and the result is committed as the next
generation, numbered past any data file found. Files of a newer generation than the copy's (a
commit that crashed at its switch, or one whose copy was not yet written) are named and not
restored: only a generation known to have been committed comes back. Settings are never guessed:
without a copy to trust (indexes written before it existed, a copy damaged too or out of date) the
repair is refused with one line saying why and what to do, and nothing is written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import faiss
import numpy as np

from ragidx.errors import IndexFormatError
from ragidx.index.config import FaissConfig
from ragidx.index.directory import (
    DATA_FILE,
    DOCUMENT_KEY,
    LEXICAL_KEY,
    STAGING_NAME,
    Index,
    document_faiss,
    load_generation,
    vector_keys,
)
from ragidx.index.faiss_index import FaissIndex
from ragidx.index.lexical import LexicalIndex
from ragidx.index.lock import LOCK_NAME, WriterLock, is_stale, read_holder
from ragidx.index.manifest import (
    BACKUP_NAME,
    MANIFEST_NAME,
    Manifest,
    ManifestDamagedError,
    backup_note,
)
from ragidx.index.shards import ShardedFaissIndex, VectorIndex, create_vectors
from ragidx.index.store import DOCUMENT_LEVEL, Store

T = TypeVar("T")


@dataclass
class VerifyReport:
    """What :func:`verify` found: ``problems`` make the index unusable, ``notes`` do not."""

    directory: str
    generation: int | None = None
    documents: int = 0
    vectors: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    repairable: bool = False  # damaged, and :func:`repair` can fix it (its manifest or the backup reads)

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
            "repairable": self.repairable,
        }


def verify(directory: str | Path) -> VerifyReport:
    """Check an index directory; never raises for a damaged index (see :class:`VerifyReport`)."""
    directory = Path(directory)
    report = VerifyReport(directory=str(directory))
    try:
        manifest, _, store, _, _ = load_generation(directory)
    except IndexFormatError as exc:
        report.problems.append(str(exc))
        current, report.repairable = _listed(directory)
        _notes(directory, current, report)
        return report
    report.generation = manifest.generation
    report.documents, report.vectors = store.n_documents, store.n_vectors
    report.problems += _store_problems(directory, manifest, store)
    report.repairable = not report.ok
    _notes(directory, _names(manifest), report)
    note = backup_note(directory, manifest)
    if note is not None:
        report.notes.append(note)
    return report


def _listed(directory: Path) -> tuple[set[str] | None, bool]:
    """The data files of the generation a repair would keep (the manifest's, or a damaged one's
    backup's; None: unknown), and whether :func:`repair` can make the index usable."""
    try:
        manifest = Manifest.read(directory)
    except ManifestDamagedError as exc:
        return (None, False) if exc.backup is None else (_names(exc.backup), True)
    except IndexFormatError:  # no index here: files of a first commit that never switched are leftovers
        return (None if (directory / MANIFEST_NAME).exists() else set()), False
    return _names(manifest), True


def _names(manifest: Manifest) -> set[str]:
    return {entry.name for entry in manifest.files.values()}


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


def _notes(directory: Path, current: set[str] | None, report: VerifyReport) -> None:
    """Notes on what writers left; ``current``: the data files in use (None: unknown, so none is
    called a leftover)."""
    if not directory.is_dir():
        return
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
        stale = current is not None and DATA_FILE.match(path.name) and path.name not in current
        leftover = stale or ".tmp-" in path.name
        if leftover:
            report.notes.append(f"{path}: left by an interrupted write; the next ingest removes it")


# ----------------------------------------------------------------------------- repair
@dataclass
class RepairReport:
    """What :func:`repair` did: ``damage`` found, documents ``dropped`` (id → why), what it kept."""

    directory: str
    generation: int | None = None  # the generation it committed (None: nothing needed repair)
    documents: int = 0
    vectors: int = 0
    damage: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)
    dropped_unnamed: int = 0  # dropped documents whose ids were lost with the store
    manifest_from: str | None = None  # the backup a damaged manifest was rebuilt from
    notes: list[str] = field(default_factory=list)  # files it found and did not restore

    @property
    def repaired(self) -> bool:
        return self.generation is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "repaired": self.repaired,
            "generation": self.generation,
            "documents": self.documents,
            "vectors": self.vectors,
            "damage": self.damage,
            "rebuilt": self.rebuilt,
            "dropped": self.dropped,
            "dropped_unnamed": self.dropped_unnamed,
            "manifest_from": self.manifest_from,
            "notes": self.notes,
        }


def repair(directory: str | Path) -> RepairReport:
    """Make a damaged index usable again from what is intact (see the module docstring); an index
    that verifies is left as it is, but for a crashed writer's leftovers."""
    directory = Path(directory)
    _damaged_manifest(directory)  # the usual one-line error for a missing or unrepairable index
    with WriterLock(directory):
        damaged = _damaged_manifest(directory)  # again: another writer may have come before the lock
        if damaged is not None:
            index, report = _rebuild_manifest(directory, damaged)
            index.commit(replacing=damaged)
        else:
            found = verify(directory)
            if found.ok:
                Index.open(directory).remove_leftovers()
                return RepairReport(str(directory), documents=found.documents, vectors=found.vectors)
            index, report = _salvage(directory, Manifest.read(directory), RepairReport(str(directory)))
            index.commit()
        left = verify(directory).problems
        if left:  # a kind of damage the salvage does not know: say so rather than claim success
            raise IndexFormatError(f"{directory}: repaired what it could, but {left[0]}")
    report.generation = index.manifest.generation
    report.documents, report.vectors = len(index), index.store.n_vectors
    return report


def _damaged_manifest(directory: Path) -> ManifestDamagedError | None:
    """The manifest's damage where its backup can repair it; None: the manifest reads. Raises
    what :meth:`Manifest.read` raises otherwise (no index; damaged, and no backup to trust)."""
    try:
        Manifest.read(directory)
    except ManifestDamagedError as exc:
        if exc.backup is None:
            raise
        return exc
    return None


def _rebuild_manifest(directory: Path, damaged: ManifestDamagedError) -> tuple[Index, RepairReport]:
    """:func:`_salvage` of the generation the backup lists, numbered to commit past every data
    file here; files of newer generations are named (not restored)."""
    assert damaged.backup is not None
    backup = damaged.backup
    report = RepairReport(str(directory), manifest_from=str(directory / BACKUP_NAME))
    report.damage.append(f"{damaged.path}: {damaged.problem}")
    report.rebuilt.append(f"the manifest, from {directory / BACKUP_NAME} (generation {backup.generation})")
    newer: dict[int, list[str]] = {}
    for path in sorted(directory.iterdir()):
        match = DATA_FILE.match(path.name)
        if match and int(match[2]) > backup.generation:
            newer.setdefault(int(match[2]), []).append(path.name)
    for generation, names in sorted(newer.items()):
        report.notes.append(
            f"{directory}: files of generation {generation} ({', '.join(names)}) are newer than "
            f"{BACKUP_NAME}: a commit that crashed at its manifest switch, or just after it; they are "
            "not restored (only a generation known to be committed is) and go with this repair: if "
            "an ingest or delete said it committed them, run it again"
        )
    index, report = _salvage(directory, backup, report)
    index.manifest.generation = max([backup.generation, *newer])  # the commit writes the next one
    return index, report


def _salvage(directory: Path, manifest: Manifest, report: RepairReport) -> tuple[Index, RepairReport]:
    """The index rebuilt in memory from the intact files ``manifest`` lists, and what was dropped
    on the way (added to ``report``)."""
    data: dict[str, bytes] = {}
    for key, entry in manifest.files.items():
        try:
            data[key] = entry.read(directory)
        except IndexFormatError as exc:
            report.damage.append(str(exc))
    lexical: LexicalIndex | None = _load(report, lambda: _lexical(directory, manifest, data))
    store = _salvage_store(directory, manifest, data, lexical, report)
    vectors, document_vectors = _salvage_vectors(directory, manifest, data, report)
    copy = manifest.model_copy(deep=True)
    index = Index(directory, copy, vectors, store, document_vectors=document_vectors)
    dropped = {**report.dropped, **_unusable(store, vectors, document_vectors)}
    kept = set(store.doc_ids()) - dropped.keys()
    if manifest.lexical is not None and (lexical is None or set(lexical.doc_ids) - dropped.keys() != kept):
        lexical = None  # rebuilt below from the stored texts, but for streamed files' (their head only)
        for doc_id in sorted(kept):
            if store.document(doc_id).metadata.get("streamed"):
                dropped[doc_id] = "its BM25 entries were lost, and only its streamed file's head is stored"
        report.rebuilt.append("the lexical index, from the stored texts")
    orphans = {owner for owner in store.vector_doc_ids() if store.sha256(owner) is None}
    if orphans:
        report.rebuilt.append(f"the vector table, without the rows of {len(orphans)} unrecorded documents")
    store.remove(dropped.keys() | orphans)
    _drop_unowned(index)
    if lexical is not None:
        lexical.remove(dropped)
        index.lexical = lexical
    elif manifest.lexical is not None:
        index.enable_lexical(manifest.lexical)
    vids = store.vids()
    index.manifest.next_vid = max(manifest.next_vid, int(vids.max()) + 1 if len(vids) else 0)
    if manifest.counts != manifest.counts.model_validate(store.stats()):
        report.rebuilt.append("the manifest's counts")
    report.dropped = dropped
    return index, report


def _load(report: RepairReport, load: Callable[[], T]) -> T | None:
    """``load()``, or None when the file it reads is damaged (noted in ``report``)."""
    try:
        return load()
    except IndexFormatError as exc:
        report.damage.append(str(exc))
        return None


def _lexical(directory: Path, manifest: Manifest, data: dict[str, bytes]) -> LexicalIndex | None:
    if manifest.lexical is None or LEXICAL_KEY not in data:
        return None
    path = directory / manifest.files[LEXICAL_KEY].name
    return LexicalIndex.from_bytes(data[LEXICAL_KEY], manifest.lexical, str(path))


def _salvage_store(
    directory: Path,
    manifest: Manifest,
    data: dict[str, bytes],
    lexical: LexicalIndex | None,
    report: RepairReport,
) -> Store:
    """The store, or an empty one when either Parquet file is damaged: every document is dropped,
    named where the lexical index still lists it."""
    if "documents" in data and "chunks" in data:
        store = _load(report, lambda: Store.from_bytes(data["documents"], data["chunks"], str(directory)))
        if store is not None:
            return store
    named = lexical.doc_ids if lexical is not None else []
    report.dropped.update({doc_id: "the store (its text and vector rows) is damaged" for doc_id in named})
    report.dropped_unnamed = max(0, manifest.counts.documents - len(named))
    return Store.empty()


def _salvage_vectors(
    directory: Path, manifest: Manifest, data: dict[str, bytes], report: RepairReport
) -> tuple[VectorIndex, FaissIndex | None]:
    """The chunk-level vectors (a damaged shard replaced by an empty copy of an intact one, which
    keeps their shared training) and, in a hybrid index, the document-level ones (empty if damaged)."""
    dim, config = manifest.encoder.dim, manifest.faiss

    def level(key: str, settings: FaissConfig) -> FaissIndex | None:
        if key not in data:
            return None
        path = directory / manifest.files[key].name
        loaded = _load(report, lambda: FaissIndex.from_bytes(data[key], settings, str(path)))
        if loaded is not None and loaded.dim != dim:
            report.damage.append(f"{path}: {loaded.dim}-d vectors, the manifest says {dim}-d")
            return None
        return loaded

    shards = [level(key, config) for key in vector_keys(manifest)]
    intact = next((shard for shard in shards if shard is not None), None)
    vectors: VectorIndex
    if intact is None:
        vectors = create_vectors(dim, config)
    else:
        full = [shard or _emptied(intact) for shard in shards]
        vectors = full[0] if len(full) == 1 else ShardedFaissIndex(full, config)
    if manifest.long_doc.hybrid is None:
        return vectors, None
    upper = document_faiss(config)
    document_vectors = level(DOCUMENT_KEY, upper)
    return vectors, FaissIndex.create(dim, upper) if document_vectors is None else document_vectors


def _emptied(shard: FaissIndex) -> FaissIndex:
    """A copy of ``shard`` without its vectors: the same factory and training."""
    index = faiss.clone_index(shard.index)
    index.reset()
    return FaissIndex(index, shard.config)


def _unusable(store: Store, vectors: VectorIndex, document_vectors: FaissIndex | None) -> dict[str, str]:
    """The documents whose record, vector rows and vectors do not all agree, with the reason."""
    chunk_ids = set(vectors.ids().tolist())
    document_ids = set() if document_vectors is None else set(document_vectors.ids().tolist())
    repeated = Counter(store.vids().tolist())
    dropped: dict[str, str] = {}
    for row in store.summaries():
        doc_id, recorded = row["doc_id"], row["n_vectors"]
        vids, ordinals = store.document_vids(doc_id)
        upper = _upper(ordinals, document_vectors is not None)
        if len(vids) != recorded:
            dropped[doc_id] = f"its record says {recorded} vectors, the vector table {len(vids)}"
        elif any(repeated[vid] > 1 for vid in vids.tolist()):
            dropped[doc_id] = "its vector ids are also another document's"
        elif document_vectors is not None and int(upper.sum()) != 1:
            dropped[doc_id] = f"it has {int(upper.sum())} document-level vectors, not one"
        elif not (set(vids[~upper].tolist()) <= chunk_ids and set(vids[upper].tolist()) <= document_ids):
            dropped[doc_id] = "its vectors were lost (in a damaged FAISS file, or missing from it)"
    return dropped


def _upper(ordinals: np.ndarray, hybrid: bool) -> np.ndarray:
    """Which rows are document-level vectors (none outside a hybrid index)."""
    return ordinals == DOCUMENT_LEVEL if hybrid else np.zeros(len(ordinals), dtype=bool)


def _drop_unowned(index: Index) -> None:
    """Remove vectors that no stored row owns at their level (a chunk vector in the
    document-level index is unowned there)."""
    vids = index.store.vids()
    upper = _upper(index.store.ordinals(), index.document_vectors is not None)
    levels: list[tuple[VectorIndex, np.ndarray]] = [(index.vectors, vids[~upper])]
    if index.document_vectors is not None:
        levels.append((index.document_vectors, vids[upper]))
    for level, owned in levels:
        unowned = np.setdiff1d(level.ids(), owned)
        if len(unowned):
            level.remove(unowned)
