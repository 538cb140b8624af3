"""What is still readable in a damaged generation, per document: the reading half of ``ragidx verify
--repair`` (``ragidx.index.verify`` decides and commits, ``ragidx.ingestion.repair`` re-embeds).

Nothing here trusts a file because it parses. Every file of a generation fails or passes its
manifest sha256 as a whole; inside a damaged one, this module finds the parts that are still sound:

* **Parquet** (documents, vector rows): read row group by row group, column by column, each page
  checked against its CRC (``ragidx.index.store`` writes small row groups with page checksums) and
  each column's length against its row group's. A documents footer that differs from the copy the
  vector-rows file keeps is replaced by that copy. A text is trusted only where it hashes to its
  stored sha256 (streamed files store their head only, which cannot be checked: trusted if its page
  passed). Indexes written before page checksums are read the same way, checked by what they have.
* **FAISS**: a file that passes its checksum is read whole. A damaged ``Flat`` file (the default,
  and every document-level file) is read by its layout, which its size fixes: each vector whose
  bytes and id lie in blocks that still match the CRC32 the commit recorded
  (:data:`BLOCK_CHECKS_KEY`, in the vector-rows file) is kept; without those CRCs, and for other
  factories, every vector of a damaged file counts as lost (a parse proves nothing).

:func:`salvage` returns, for every document it can find, whether it is **kept** (record, vector
rows and vectors all sound and agreeing), **re-embedded** (its text is sound and the index knows its
model, but its vectors, rows or counts are not) or **dropped** (its text is lost, or cannot be embedded
again), with the reason, and what was reset (source, title, metadata, ingest time lost with a damaged
page). Ids lost with a page come back from the vector table's order (documents and their rows are
written in the same order) where that table is whole.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import struct
import zlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ragidx.errors import IndexFormatError
from ragidx.index.config import FaissConfig
from ragidx.index.faiss_index import FaissIndex
from ragidx.index.manifest import ExternalEncoderInfo, FileEntry, Manifest
from ragidx.index.store import (
    DOCUMENT_LEVEL,
    DOCUMENT_SCHEMA,
    DOCUMENTS_FOOTER_KEY,
    VECTOR_SCHEMA,
    DocumentRecord,
    VectorRecord,
    parquet_footer,
)

BLOCK_CHECKS_KEY = "ragidx.block_crc32"  # vector-rows file metadata: CRC32 per block of other files
SMALLEST_BLOCK = 256  # bytes per CRC32 block of a small file (a 64-d vector and its id: 264)…
MOST_BLOCKS = 16384  # …doubled until a file has at most this many
DOCUMENT_KEY = "faiss.document"  # a hybrid index's document-level FAISS file (ragidx.index.directory)
# the fields a kept document needs as they were; the others are reset when a page of theirs is lost
ESSENTIAL = ("doc_id", "sha256", "text", "n_tokens", "n_embedded", "embed_mode", "n_vectors")
RESETTABLE: dict[str, Any] = {"source": "", "title": None, "metadata": "{}", "ingested_at": ""}


# ----------------------------------------------------------------------------- block checks
def block_size(length: int) -> int:
    """The CRC block size of a file of ``length`` bytes: :data:`SMALLEST_BLOCK`, doubled until the
    file has at most :data:`MOST_BLOCKS` blocks (so the CRCs cost at most 4 × MOST_BLOCKS bytes)."""
    size = SMALLEST_BLOCK
    while length > size * MOST_BLOCKS:
        size *= 2
    return size


def block_checks(payloads: Mapping[str, bytes]) -> dict[str, str]:
    """What a commit records of its FAISS files (manifest key → payload) beside them: the CRC32 of
    each block (:func:`block_size`), as key-value metadata of the vector-rows file."""
    files = {}
    for key, payload in payloads.items():
        if key.startswith("faiss"):
            size = block_size(len(payload))
            crcs = _crc32s(payload, size).astype("<u4").tobytes()
            files[key] = {"block": size, "crc32": base64.b64encode(crcs).decode("ascii")}
    return {BLOCK_CHECKS_KEY: json.dumps(files, sort_keys=True)}


def _crc32s(data: bytes, size: int) -> np.ndarray:
    view = memoryview(data)
    return np.array(
        [zlib.crc32(view[start : start + size]) for start in range(0, len(data), size)], dtype=np.uint32
    )


@dataclass
class Blocks:
    """A file's recorded block CRCs."""

    size: int
    crc32: np.ndarray

    def bad(self, data: bytes) -> np.ndarray:
        """Which blocks of ``data`` fail their CRC32 (missing bytes fail)."""
        found = _crc32s(data, self.size)
        bad = np.ones(len(self.crc32), dtype=bool)
        same = min(len(found), len(self.crc32))
        bad[:same] = found[:same] != self.crc32[:same]
        return bad


def _recorded_checks(metadata: Mapping[bytes, bytes] | None) -> dict[str, Blocks]:
    """The block CRCs a vector-rows file's metadata holds (none: written before them, or unreadable)."""
    raw = (metadata or {}).get(BLOCK_CHECKS_KEY.encode())
    try:
        loaded = json.loads(raw) if raw else {}
        return {
            key: Blocks(int(value["block"]), np.frombuffer(base64.b64decode(value["crc32"]), dtype="<u4"))
            for key, value in loaded.items()
        }
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error):
        return {}


# ----------------------------------------------------------------------------- Parquet
@dataclass
class Rows:
    """What :func:`read_rows` read of a Parquet file: per row, the fields that read (a lost field
    is absent); ``counted``: whether the row count itself is known."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    counted: bool = False
    whole: bool = False
    metadata: Mapping[bytes, bytes] | None = None
    problem: str | None = None


def read_rows(data: bytes | None, schema: pa.Schema, source: str, footer: bytes | None = None) -> Rows:
    """Every row and column of a Parquet file that still reads (see the module docstring);
    ``footer``: a copy of the file's footer, used where the file's own differs."""
    if data is None:
        return Rows(problem=f"{source}: missing")
    own = parquet_footer(data)
    candidates = [footer] if footer and footer != own else []
    candidates.append(own)
    meta = None
    for candidate in candidates:
        try:
            meta = pq.read_metadata(
                io.BytesIO(b"PAR1" + candidate + struct.pack("<I", len(candidate)) + b"PAR1")
            )
            if meta.schema.to_arrow_schema().remove_metadata().equals(schema):
                break
        except (pa.ArrowException, OSError):
            pass
        meta = None
    if meta is None:
        return Rows(problem=f"{source}: its footer (row groups, schema) is unreadable")
    try:
        parquet = pq.ParquetFile(
            pa.BufferReader(data), metadata=meta, pre_buffer=False, page_checksum_verification=True
        )
    except (pa.ArrowException, OSError) as exc:
        return Rows(problem=f"{source}: unreadable ({exc})")
    rows: list[dict[str, Any]] = []
    lost = 0
    for group in range(meta.num_row_groups):
        count = meta.row_group(group).num_rows
        values: dict[str, list[Any]] = {}
        for name in schema.names:
            try:
                column = parquet.read_row_group(group, columns=[name], use_threads=False).column(0)
            except (pa.ArrowException, OSError, ValueError):
                lost += 1
                continue
            if len(column) == count and column.type == schema.field(name).type:
                values[name] = column.to_pylist()
            else:
                lost += 1
        rows += ({name: column[row] for name, column in values.items()} for row in range(count))
    problem = None if not lost else f"{source}: {lost} column chunks of {meta.num_row_groups} row groups lost"
    return Rows(rows, counted=True, whole=not lost, metadata=meta.metadata, problem=problem)


# ----------------------------------------------------------------------------- FAISS
def flat_vectors(data: bytes, dim: int, blocks: Blocks | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(ids, vectors) of a damaged IDMap2-over-Flat file whose bytes lie in blocks that pass their
    recorded CRCs (``blocks``: None, unknown, so nothing is sound). None: not that layout."""
    empty = faiss.index_factory(dim, "IDMap2,Flat", faiss.METRIC_INNER_PRODUCT)
    header = len(faiss.serialize_index(empty)) - 16  # what precedes the codes' and ids' sizes
    row = 4 * dim + 8
    n, extra = divmod(len(data) - header - 16, row)
    if extra or n < 0 or blocks is None:
        return None
    bad, block = blocks.bad(data), blocks.size
    codes_at = header + 8
    ids_at = codes_at + 4 * dim * n + 8
    ids = np.frombuffer(data, dtype="<i8", count=n, offset=ids_at).astype(np.int64)
    vectors = np.frombuffer(data, dtype="<f4", count=n * dim, offset=codes_at).reshape(n, dim)
    sound = np.ones(n, dtype=bool)
    for number in np.flatnonzero(bad).tolist():
        start, end = number * block, (number + 1) * block
        for first, size in ((codes_at, 4 * dim), (ids_at, 8)):
            low = max(0, (start - first) // size)
            high = max(0, min(n, -(-(end - first) // size)))
            sound[low:high] = False
    # the header and the two counts are read from nowhere: the file's size fixes the layout
    return ids[sound], np.ascontiguousarray(vectors[sound], dtype=np.float32)


@dataclass
class Level:
    """One FAISS file salvaged: its sound vectors (None: none could be read, build an empty one)."""

    index: FaissIndex | None
    sound: set[int]  # the vector ids it holds that are trusted
    problem: str | None = None


def read_level(
    data: bytes | None,
    intact: bool,
    dim: int,
    config: FaissConfig,
    source: str,
    recorded: Blocks | None,
    expected: int,
) -> Level:
    """A FAISS file as :class:`Level`: whole when it passes its checksum, else what :func:`flat_vectors`
    proves sound (nothing for other factories)."""
    if data is None:
        return Level(None, set(), f"{source}: missing; its vectors are embedded again")
    if intact:
        try:
            index = FaissIndex.from_bytes(data, config, source)
        except IndexFormatError as exc:
            return Level(None, set(), str(exc))
        if index.dim == dim:
            return Level(index, set(index.ids().tolist()))
        return Level(None, set(), f"{source}: {index.dim}-d vectors, the manifest says {dim}-d")
    found = None
    if config.factory == "Flat":
        padded = data[:expected] + bytes(max(0, expected - len(data)))  # a truncated end: its blocks fail
        found = flat_vectors(padded, dim, recorded)
    if found is None:
        return Level(None, set(), f"{source}: damaged; its vectors are embedded again")
    ids, vectors = found
    unique, counts = np.unique(ids, return_counts=True)
    keep = np.isin(ids, unique[counts == 1])
    index = FaissIndex.create(dim, config)
    index.add(vectors[keep], ids[keep])
    return Level(index, set(ids[keep].tolist()), f"{source}: damaged; its sound vectors are kept")


# ----------------------------------------------------------------------------- documents
@dataclass
class Salvage:
    """Per document: ``keep`` (record, vector rows), ``reembed`` (record with its sound text, why),
    ``drop`` (why), in the documents' order; and what was found on the way."""

    keep: dict[str, tuple[DocumentRecord, list[VectorRecord]]] = field(default_factory=dict)
    reembed: dict[str, tuple[DocumentRecord, str]] = field(default_factory=dict)
    drop: dict[str, str] = field(default_factory=dict)
    dropped_records: list[dict[str, Any]] = field(default_factory=list)  # what reads of dropped ones
    dropped_unnamed: int = 0
    reset: dict[str, list[str]] = field(default_factory=dict)  # doc id → fields reset
    problems: list[str] = field(default_factory=list)
    levels: dict[str, Level] = field(default_factory=dict)  # manifest key → salvaged FAISS file


def read_files(directory: Path, manifest: Manifest) -> tuple[dict[str, bytes], set[str], list[str]]:
    """The bytes of each file ``manifest`` lists that is here, the keys of those that pass their
    checks, and one line per file that does not."""
    data: dict[str, bytes] = {}
    intact: set[str] = set()
    problems: list[str] = []
    for key, entry in manifest.files.items():
        path = directory / entry.name
        try:
            data[key] = path.read_bytes()
        except OSError as exc:
            problems.append(f"{path}: unreadable ({exc.strerror or exc})")
            continue
        if _passes(entry, data[key]):
            intact.add(key)
        else:
            size = len(data[key])
            why = (
                "fails its sha256"
                if size == entry.bytes
                else f"{size} bytes, the manifest says {entry.bytes}"
            )
            problems.append(f"{path}: {why}")
    return data, intact, problems


def _passes(entry: FileEntry, data: bytes) -> bool:
    return len(data) == entry.bytes and hashlib.sha256(data).hexdigest() == entry.sha256


def salvage(
    directory: Path,
    manifest: Manifest,
    data: dict[str, bytes],
    intact: set[str],
    level_keys: list[str],
    configs: dict[str, FaissConfig],
    named: list[str],
) -> Salvage:
    """Decide every document's fate from the files read (``level_keys``: the FAISS files, each
    read with ``configs[key]``; ``named``: document ids known from elsewhere, the lexical index's,
    to name documents whose rows are unreadable)."""
    out = Salvage()
    names = {key: str(directory / entry.name) for key, entry in manifest.files.items()}
    vectors = read_rows(data.get("chunks"), VECTOR_SCHEMA, names.get("chunks", "chunks"))
    footer = None if "documents" in intact else _footer_copy(vectors.metadata)
    documents = read_rows(data.get("documents"), DOCUMENT_SCHEMA, names.get("documents", "documents"), footer)
    for rows, key in ((vectors, "chunks"), (documents, "documents")):
        if key not in intact and rows.problem:
            out.problems.append(rows.problem)
    recorded = _recorded_checks(vectors.metadata)
    for key in level_keys:
        entry = manifest.files.get(key)
        level = read_level(
            data.get(key),
            key in intact,
            manifest.encoder.dim,
            configs[key],
            names.get(key, key),
            recorded.get(key),
            0 if entry is None else entry.bytes,
        )
        if level.problem and key not in intact:
            out.problems.append(level.problem)
        out.levels[key] = level
    hybrid = DOCUMENT_KEY in out.levels
    sound = {vid for key, level in out.levels.items() if key != DOCUMENT_KEY for vid in level.sound}
    document_sound = out.levels[DOCUMENT_KEY].sound if hybrid else set()
    owners = _owners(vectors)
    ids = _ids_by_order(documents, vectors)
    repeated = Counter(row["vid"] for row in vectors.rows if "vid" in row)
    can_embed = not isinstance(manifest.encoder, ExternalEncoderInfo)
    seen: set[str] = set()
    for number, row in enumerate(documents.rows):
        doc_id = row.get("doc_id", ids[number] if ids else None)
        text_ok = _text_sound(row)
        if doc_id is None or doc_id in seen:
            out.dropped_unnamed += 1
            if text_ok:  # its text is kept, under a made-up id for ingest
                why = "its id was lost (a damaged page of the documents file)"
                out.dropped_records.append({**row, "doc_id": f"unnamed-{number}", "why": why})
            continue
        seen.add(doc_id)
        record, reset = _record(doc_id, row)
        if not text_ok or record is None:
            why = "its text was lost (a damaged page of the documents file)"
            out.drop[doc_id] = why
            out.dropped_records.append({**row, "doc_id": doc_id, "text": None, "why": why})
            continue
        problem = _vector_problem(
            record, row, owners.get(doc_id, []), sound, document_sound, repeated, hybrid
        )
        if problem is None:
            out.keep[doc_id] = (record, [VectorRecord(**r) for r in owners[doc_id]])
            if reset:
                out.reset[doc_id] = reset
            continue
        streamed = bool(record.metadata.get("streamed"))
        if can_embed and not streamed:
            out.reembed[doc_id] = (record, problem)
            if reset:
                out.reset[doc_id] = reset
            continue
        why = (
            f"{problem}; only its streamed file's head is stored: ingest the file again"
            if streamed
            else f"{problem}; its vectors were made outside ragidx ({manifest.encoder.name}): add it again "
            "with that embedding"
        )
        out.drop[doc_id] = why
        out.dropped_records.append({**row, "doc_id": doc_id, "why": why})
    if not documents.counted:  # no row of the documents file reads: name what other files name
        for doc_id in [*dict.fromkeys(owners), *named]:
            if doc_id not in out.drop:
                out.drop[doc_id] = "its record (text) was lost with the documents file"
                out.dropped_records.append({"doc_id": doc_id, "why": out.drop[doc_id]})
        out.dropped_unnamed = max(0, manifest.counts.documents - len(out.drop))
    return out


def _footer_copy(metadata: Mapping[bytes, bytes] | None) -> bytes | None:
    """The copy of the documents file's footer that the vector-rows file keeps, where it passes its
    CRC32 (None: none kept, or damaged)."""
    crc, _, encoded = (metadata or {}).get(DOCUMENTS_FOOTER_KEY.encode(), b"").partition(b":")
    try:
        footer = base64.b64decode(encoded, validate=True)
        return footer if f"{zlib.crc32(footer):08x}".encode() == crc else None
    except (ValueError, binascii.Error):
        return None


def _owners(vectors: Rows) -> dict[str, list[dict[str, Any]]]:
    """Document id → its vector rows that read whole, in row order."""
    owners: dict[str, list[dict[str, Any]]] = {}
    for row in vectors.rows:
        if len(row) == len(VECTOR_SCHEMA.names):
            owners.setdefault(row["doc_id"], []).append(row)
    return owners


def _ids_by_order(documents: Rows, vectors: Rows) -> list[str] | None:
    """Every document's id from the vector table's order (each document's rows follow the
    previous one's, in the documents' order), where that table is whole and agrees in length."""
    if not vectors.whole:
        return None
    order = list(dict.fromkeys(row["doc_id"] for row in vectors.rows))
    return order if len(order) == len(documents.rows) else None


def _text_sound(row: dict[str, Any]) -> bool:
    """Whether the row's text read and hashes to its sha256 (a streamed file's head cannot)."""
    text = row.get("text")
    if not isinstance(text, str):
        return False
    digest = row.get("sha256")
    if digest is None or hashlib.sha256(text.encode("utf-8")).hexdigest() == digest:
        return True
    metadata = _metadata(row.get("metadata"))
    return bool(metadata and metadata.get("streamed"))


def _metadata(raw: Any) -> dict[str, Any] | None:
    try:
        loaded = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    return loaded if isinstance(loaded, dict) else None


def _record(doc_id: str, row: dict[str, Any]) -> tuple[DocumentRecord | None, list[str]]:
    """The row as a record (None: its text is lost), its lost resettable fields reset (named),
    and its lost essential ones filled for embedding again (its sha256 from its text; counts 0)."""
    if not isinstance(row.get("text"), str):
        return None, []
    fields = dict(row)
    reset = [
        name
        for name in RESETTABLE
        if name not in fields or (name == "metadata" and _metadata(fields[name]) is None)
    ]
    for name in reset:
        fields[name] = RESETTABLE[name]
    fields["doc_id"] = doc_id
    fields.setdefault("sha256", hashlib.sha256(fields["text"].encode("utf-8")).hexdigest())
    for name in ("n_tokens", "n_embedded", "n_vectors"):
        fields.setdefault(name, -1)
    fields.setdefault("embed_mode", "")
    return DocumentRecord.from_row(fields), reset


def _vector_problem(
    record: DocumentRecord,
    row: dict[str, Any],
    rows: list[dict[str, Any]],
    sound: set[int],
    document_sound: set[int],
    repeated: Counter[int],
    hybrid: bool,
) -> str | None:
    """Why the document's vectors cannot be kept (None: they can)."""
    missing = [name for name in ESSENTIAL if name not in row]
    if missing:
        return f"its {', '.join(missing)} were lost"
    if len(rows) != record.n_vectors:
        return f"its record says {record.n_vectors} vectors, its readable vector rows are {len(rows)}"
    ordinals = sorted(r["ordinal"] for r in rows)
    expected = list(range(DOCUMENT_LEVEL if hybrid else 0, record.n_vectors - (1 if hybrid else 0)))
    if ordinals != expected:
        return "its vector rows are not numbered 0, 1, … (a hybrid: one document-level row)"
    if any(repeated[r["vid"]] > 1 for r in rows):
        return "its vector ids are also another document's"
    for r in rows:
        upper = hybrid and r["ordinal"] == DOCUMENT_LEVEL
        if r["vid"] not in (document_sound if upper else sound):
            return "its vectors were lost (in a damaged FAISS file, or missing from it)"
    return None
