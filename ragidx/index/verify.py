"""``verify`` and ``repair``: a full integrity check of an index directory, and the way back to a
usable index from what is intact (what ``ragidx verify`` and ``ragidx verify --repair`` run).

Opening an index already checks each file's size and sha256 against the manifest and that FAISS
ids equal the store's vector ids; :func:`verify` does that without raising, and goes further: every
document's vector count equals its rows in the vector table, every row belongs to a document,
vector ids are unique and below the manifest's next id, and the manifest's counts match the store.
It also notes (without failing) what a writer left behind: a lock, the checkpoints an interrupted
ingest can resume from, temp files or files of other generations, a ``manifest.backup.json`` that
is missing or not a copy of the manifest.

:func:`repair` (under the writer lock) throws away nothing that can be read. From what
``ragidx.index.salvage`` finds sound in the damaged files it keeps every document whose record,
vector rows and vectors are sound and agree; embeds again, from its stored text and with the
index's own model and settings (``ragidx.ingestion.repair``, loaded only when needed), every
document whose text is sound but whose vectors, rows or counts are not; and drops only documents
whose text is lost (or that cannot be embedded again: vectors made outside ragidx, a streamed file
whose store holds its head only), naming each with the reason. It rebuilds the lexical index from
the stored texts and the manifest's counts and next id. Before it commits the result as the next
generation, every data file of the damaged generation and its manifest are hard-linked (copied
where links fail) into ``DIR/quarantine/generation-NNNNNN/`` with ``dropped.jsonl`` (what reads of
the dropped documents, as ``ragidx ingest`` reads JSONL): the commit removes nothing that is not
also there, and the folder stays until the user removes it (:func:`verify` notes it). With
``dry_run`` it only says what it would keep, re-embed and drop; :func:`verify` says it in a line
(:attr:`VerifyReport.repair_plan`).

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

import json
import os
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import faiss
import numpy as np
import pyarrow as pa

from ragidx.errors import IndexFormatError
from ragidx.index.config import FaissConfig, LexicalConfig
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
    write_atomic,
)
from ragidx.index.salvage import Salvage, read_files, salvage
from ragidx.index.shards import ShardedFaissIndex, VectorIndex, create_vectors
from ragidx.index.store import DOCUMENT_LEVEL, DOCUMENT_SCHEMA, VECTOR_SCHEMA, DocumentRecord, Store

T = TypeVar("T")
QUARANTINE_NAME = "quarantine"  # DIR/quarantine/generation-NNNNNN/: a repaired generation's files
DROPPED_NAME = "dropped.jsonl"  # in it: the documents the repair dropped, as ragidx ingest reads them


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
    repair_plan: str | None = None  # what it would do: ``keep 10, re-embed 2, drop 0``

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
            "repair_plan": self.repair_plan,
        }


def verify(directory: str | Path, *, plan: bool = True) -> VerifyReport:
    """Check an index directory; never raises for a damaged index (see :class:`VerifyReport`).
    ``plan``: work out what a repair would do (:attr:`VerifyReport.repair_plan`)."""
    directory = Path(directory)
    report = VerifyReport(directory=str(directory))
    try:
        manifest, _, store, _, _ = load_generation(directory)
    except IndexFormatError as exc:
        report.problems.append(str(exc))
        current, report.repairable = _listed(directory)
        _notes(directory, current, report)
        report.repair_plan = plan_summary(directory) if plan and report.repairable else None
        return report
    report.generation = manifest.generation
    report.documents, report.vectors = store.n_documents, store.n_vectors
    report.problems += _store_problems(directory, manifest, store)
    report.repairable = not report.ok
    report.repair_plan = plan_summary(directory) if plan and report.repairable else None
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
    quarantined = sorted(p.name for p in (directory / QUARANTINE_NAME).glob("generation-*"))
    if quarantined:
        report.notes.append(
            f"{directory / QUARANTINE_NAME}: the damaged files that ragidx verify --repair replaced "
            f"({', '.join(quarantined)}; dropped documents in their {DROPPED_NAME}); remove it once "
            "you no longer need them"
        )
    for path in sorted(directory.iterdir()):
        stale = current is not None and DATA_FILE.match(path.name) and path.name not in current
        leftover = stale or ".tmp-" in path.name
        if leftover:
            report.notes.append(f"{path}: left by an interrupted write; the next ingest removes it")


# ----------------------------------------------------------------------------- repair
@dataclass
class RepairReport:
    """What :func:`repair` did (or, ``dry_run``, would do): ``damage`` found, documents ``kept``
    as they were, ``reembedded`` from their stored text (id → why), ``dropped`` (id → why), fields
    ``reset`` (id → names), and where the damaged generation's files were put (``quarantine``)."""

    directory: str
    generation: int | None = None  # the generation it committed (None: nothing needed repair, or dry run)
    documents: int = 0
    vectors: int = 0
    damage: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    reembedded: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    dropped_unnamed: int = 0  # dropped documents whose ids were lost with the store
    reset: dict[str, list[str]] = field(default_factory=dict)
    manifest_from: str | None = None  # the backup a damaged manifest was rebuilt from
    quarantine: str | None = None  # the folder holding the damaged generation's files
    dry_run: bool = False
    notes: list[str] = field(default_factory=list)  # files it found and did not restore

    @property
    def repaired(self) -> bool:
        return self.generation is not None

    @property
    def needed(self) -> bool:
        """Whether the index needs (or needed) repair: anything damaged, rebuilt, re-embedded or dropped."""
        changed = self.damage or self.rebuilt or self.reembedded or self.dropped or self.dropped_unnamed
        return bool(changed or self.manifest_from)

    def summary(self) -> str:
        """``keep 10, re-embed 2, drop 0`` (dropped: named and unnamed)."""
        dropped = len(self.dropped) + self.dropped_unnamed
        return f"keep {len(self.kept)}, re-embed {len(self.reembedded)}, drop {dropped}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "repaired": self.repaired,
            "dry_run": self.dry_run,
            "generation": self.generation,
            "documents": self.documents,
            "vectors": self.vectors,
            "damage": self.damage,
            "rebuilt": self.rebuilt,
            "kept": self.kept,
            "reembedded": self.reembedded,
            "dropped": self.dropped,
            "dropped_unnamed": self.dropped_unnamed,
            "reset": self.reset,
            "manifest_from": self.manifest_from,
            "quarantine": self.quarantine,
            "notes": self.notes,
        }


# Embeds documents again into an index by its own model and settings (ragidx.ingestion.repair)
Embed = Callable[[Index, list[DocumentRecord]], None]


def repair(directory: str | Path, *, dry_run: bool = False, embed: Embed | None = None) -> RepairReport:
    """Make a damaged index usable again, losing only what is lost (see the module docstring); an
    index that verifies is left as it is, but for a crashed writer's leftovers. ``dry_run``: say
    what would be kept, re-embedded and dropped, and change nothing. ``embed``: how documents
    whose vectors were lost are embedded again (default: ``ragidx.ingestion.repair``, with the
    index's model, loaded only when some need it)."""
    directory = Path(directory)
    _damaged_manifest(directory)  # the usual one-line error for a missing or unrepairable index
    if dry_run:
        if _damaged_manifest(directory) is None and verify(directory, plan=False).ok:
            index = Index.open(directory)
            kept = index.doc_ids()
            return RepairReport(
                str(directory), documents=len(kept), vectors=index.store.n_vectors, kept=kept, dry_run=True
            )
        report = _plan(directory)[1]
        report.dry_run = True
        report.documents = len(report.kept) + len(report.reembedded)
        return report
    with WriterLock(directory):
        damaged = _damaged_manifest(directory)  # again: another writer may have come before the lock
        if damaged is None and verify(directory, plan=False).ok:
            index = Index.open(directory)
            index.remove_leftovers()
            kept = index.doc_ids()
            return RepairReport(str(directory), documents=len(kept), vectors=index.store.n_vectors, kept=kept)
        index, report, salvaged = _plan(directory)
        if salvaged.reembed:
            records = [record for record, _ in salvaged.reembed.values()]
            (embed or _embed_again)(index, records)
        report.quarantine = str(_quarantine(directory, index.manifest.generation, salvaged))
        index.commit(replacing=damaged)
        left = verify(directory, plan=False).problems
        if left:  # a kind of damage the salvage does not know: say so rather than claim success
            raise IndexFormatError(f"{directory}: repaired what it could, but {left[0]}")
    report.generation = index.manifest.generation
    report.documents, report.vectors = len(index), index.store.n_vectors
    return report


def _embed_again(index: Index, records: list[DocumentRecord]) -> None:
    from ragidx.ingestion.repair import embed_again  # torch and the ingest pipeline: only when needed

    embed_again(index, records)


def _plan(directory: Path) -> tuple[Index, RepairReport, Salvage]:
    """The repaired index in memory (without the documents to embed again), what it keeps,
    re-embeds and drops, and the salvage it came from; nothing is written."""
    damaged = _damaged_manifest(directory)
    if damaged is not None:
        return _rebuild_manifest(directory, damaged)
    return _salvage(directory, Manifest.read(directory), RepairReport(str(directory)))


def plan_summary(directory: Path) -> str | None:
    """What :func:`repair` would do to a damaged index (``keep 10, re-embed 2, drop 0``); None
    when that cannot be worked out (no manifest to trust)."""
    try:
        return _plan(directory)[1].summary()
    except Exception:  # verify never raises for a damaged index: the hint is left without its plan
        return None


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


def _rebuild_manifest(directory: Path, damaged: ManifestDamagedError) -> tuple[Index, RepairReport, Salvage]:
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
            "not restored (only a generation known to be committed is) and go with this repair to its "
            "quarantine folder: if an ingest or delete said it committed them, run it again"
        )
    index, report, salvaged = _salvage(directory, backup, report)
    index.manifest.generation = max([backup.generation, *newer])  # the commit writes the next one
    return index, report, salvaged


def _salvage(
    directory: Path, manifest: Manifest, report: RepairReport
) -> tuple[Index, RepairReport, Salvage]:
    """The index rebuilt in memory from what is sound in the files ``manifest`` lists (see
    ``ragidx.index.salvage``), without the documents to embed again, and what it keeps, re-embeds
    and drops (added to ``report``)."""
    data, intact, problems = read_files(directory, manifest)
    report.damage += problems
    lexical: LexicalIndex | None = None
    if LEXICAL_KEY in intact:
        lexical = _load(report, lambda: _lexical(directory, manifest, data))
    configs = {key: manifest.faiss for key in vector_keys(manifest)}
    if manifest.long_doc.hybrid is not None:
        configs[DOCUMENT_KEY] = document_faiss(manifest.faiss)
    named = [] if lexical is None else list(lexical.doc_ids)
    found = salvage(directory, manifest, data, intact, list(configs), configs, named)
    report.damage += [problem for problem in found.problems if problem not in report.damage]
    kept = [record for record, _ in found.keep.values()]
    rows = [row for _, doc_rows in found.keep.values() for row in doc_rows]
    store = Store(
        pa.Table.from_pylist([record.to_row() for record in kept], schema=DOCUMENT_SCHEMA),
        pa.Table.from_pylist([asdict(row) for row in rows], schema=VECTOR_SCHEMA),
    )
    vectors, document_vectors = _levels(manifest, found, configs)
    copy = manifest.model_copy(deep=True)
    index = Index(directory, copy, vectors, store, document_vectors=document_vectors)
    _drop_unowned(index)
    report.kept = list(found.keep)
    report.reembedded = {doc_id: why for doc_id, (_, why) in found.reembed.items()}
    report.dropped = dict(found.drop)
    report.dropped_unnamed = found.dropped_unnamed
    report.reset = found.reset
    if manifest.lexical is not None:
        if lexical is not None:
            lexical.remove(set(lexical.doc_ids) - found.keep.keys())
        if lexical is not None and set(lexical.doc_ids) == found.keep.keys():
            index.lexical = lexical
        else:
            _rebuild_lexical(index, manifest.lexical, report, found)
    vids = store.vids()
    top = int(vids.max()) + 1 if len(vids) else 0
    sound = [max(level.sound) + 1 for level in found.levels.values() if level.sound]
    index.manifest.next_vid = max([manifest.next_vid, top, *sound])
    if manifest.counts != manifest.counts.model_validate(store.stats()) or found.reembed or found.drop:
        report.rebuilt.append("the manifest's counts")
    return index, report, found


def _rebuild_lexical(index: Index, config: LexicalConfig, report: RepairReport, found: Salvage) -> None:
    """The lexical index analysed again from the kept texts; a streamed file's store holds its
    head only, so its documents are dropped (their files are read whole again by the next ingest)."""
    streamed = [d for d in index.store.doc_ids() if index.store.document(d).metadata.get("streamed")]
    for doc_id in streamed:
        why = "its BM25 entries were lost, and only its streamed file's head is stored"
        report.dropped[doc_id] = why
        report.kept.remove(doc_id)
        source = index.store.document(doc_id).source
        found.dropped_records.append({"doc_id": doc_id, "source": source, "why": why})
    index.remove(streamed)
    index.enable_lexical(config)
    report.rebuilt.append("the lexical index, from the stored texts")


def _levels(
    manifest: Manifest, found: Salvage, configs: dict[str, FaissConfig]
) -> tuple[VectorIndex, FaissIndex | None]:
    """The chunk-level vectors (a shard with nothing sound: an empty copy of a sound one, which
    keeps their shared training; else a new one) and, in a hybrid index, the document-level ones."""
    dim = manifest.encoder.dim
    shards = [found.levels[key].index for key in vector_keys(manifest)]
    intact = next((shard for shard in shards if shard is not None), None)
    vectors: VectorIndex
    if intact is None:
        vectors = create_vectors(dim, manifest.faiss)
    else:
        full = [shard or _emptied(intact) for shard in shards]
        vectors = full[0] if len(full) == 1 else ShardedFaissIndex(full, manifest.faiss)
    if DOCUMENT_KEY not in found.levels:
        return vectors, None
    document_vectors = found.levels[DOCUMENT_KEY].index
    return vectors, document_vectors or FaissIndex.create(dim, configs[DOCUMENT_KEY])


def _quarantine(directory: Path, generation: int, found: Salvage) -> Path:
    """Keep the damaged generation before a repair commits over it: every data file here (the
    commit removes them) and the manifest, hard-linked (copied where links fail) into
    ``DIR/quarantine/generation-NNNNNN/``, with ``dropped.jsonl``: what reads of the dropped
    documents, in the JSONL form ``ragidx ingest`` reads."""
    base = directory / QUARANTINE_NAME / f"generation-{generation:06d}"
    folder, number = base, 1
    while folder.exists():
        number += 1
        folder = base.with_name(f"{base.name}-{number}")
    folder.mkdir(parents=True)
    for path in sorted(directory.iterdir()):
        if DATA_FILE.match(path.name) or path.name in (MANIFEST_NAME, BACKUP_NAME):
            try:
                os.link(path, folder / path.name)
            except OSError:
                shutil.copy2(path, folder / path.name)
    lines = [
        json.dumps(_jsonl(record), ensure_ascii=False, sort_keys=True) for record in found.dropped_records
    ]
    if lines:
        write_atomic(folder / DROPPED_NAME, ("\n".join(lines) + "\n").encode("utf-8"))
    return folder


def _jsonl(row: dict[str, Any]) -> dict[str, Any]:
    """A dropped document's readable fields as a ``ragidx ingest`` JSONL record: its stored text as
    ``text`` (the title is already part of it), the rest beside it (a missing text: empty)."""
    metadata = row.get("metadata")
    try:
        extra = json.loads(metadata) if isinstance(metadata, str) else {}
    except ValueError:
        extra = {}
    record = {k: v for k, v in (extra if isinstance(extra, dict) else {}).items() if k not in _JSONL_KEYS}
    record.update({"_id": row.get("doc_id"), "text": row.get("text") or ""})
    record["ragidx_repair"] = {
        "why": row.get("why"),
        "source": row.get("source"),
        "title": row.get("title"),
        "sha256": row.get("sha256"),
        "text_sound": isinstance(row.get("text"), str),
    }
    return record


_JSONL_KEYS = frozenset({"_id", "id", "text", "title", "ragidx_repair"})


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


def _emptied(shard: FaissIndex) -> FaissIndex:
    """A copy of ``shard`` without its vectors: the same factory and training."""
    index = faiss.clone_index(shard.index)
    index.reset()
    return FaissIndex(index, shard.config)


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
