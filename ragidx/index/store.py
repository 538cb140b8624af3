"""The Parquet store beside the FAISS index: what each vector id means.

Two tables (pyarrow, Parquet on disk; no pickle):

* **documents** — one row per document: id, source, content sha256, title, text, token count,
  tokens embedded, how it was embedded (``whole``, ``chunk``, ``pcw``, ``truncate``,
  ``extend:<method>``, ``late``, ``late+extend:<method>``), vector count,
  metadata (JSON) and ingest time;
* **vectors** — one row per FAISS id: the document it belongs to, its ordinal in that document and
  its token and character span. Chunk-level vectors are numbered 0, 1, … in document order; the
  document-level vector of a hybrid index (``[long_doc] hybrid``, kept in the second FAISS index,
  see ``ragidx.index.directory``) has ordinal ``-1`` and spans the tokens its plan covers.

Mutations are buffered and applied when the tables are next read whole or written: adding or
removing a document, and reading one document's hash or record, cost O(1) (after one O(n) index
of the stored rows), so an ingest that adds or replaces n documents costs O(n), not O(n²).

Both files are written so that damage costs little (:meth:`Store.to_bytes`; read back by
``ragidx.index.salvage`` in a repair): small row groups, a CRC on every page, and in the vectors
file a copy of the documents file's footer and the commit's block CRCs of its FAISS files.
"""

from __future__ import annotations

import base64
import io
import json
import struct
import zlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ragidx.errors import IndexFormatError

DOCUMENT_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("sha256", pa.string()),
        ("title", pa.string()),
        ("text", pa.large_string()),
        ("n_tokens", pa.int64()),
        ("n_embedded", pa.int64()),
        ("embed_mode", pa.string()),
        ("n_vectors", pa.int32()),
        ("metadata", pa.string()),
        ("ingested_at", pa.string()),
    ]
)
VECTOR_SCHEMA = pa.schema(
    [
        ("vid", pa.int64()),
        ("doc_id", pa.string()),
        ("ordinal", pa.int32()),
        ("tok_start", pa.int64()),
        ("tok_end", pa.int64()),
        ("char_start", pa.int64()),
        ("char_end", pa.int64()),
    ]
)

DOCUMENT_LEVEL = -1  # the ordinal of a hybrid index's document-level vector (chunks: 0, 1, …)
_NO_VECTORS = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32))
# How the store is written for salvage (``ragidx.index.salvage``): a damaged page costs its row group
SALVAGE_ROW_GROUPS = 256  # at most this many row groups of equal row counts per file…
SALVAGE_GROUP_BYTES = 1 << 20  # …and a documents row group ends once its texts reach this size
DOCUMENTS_FOOTER_KEY = "ragidx.documents_footer"  # vectors file metadata: CRC32:base64 of that footer


def read_parquet(data: bytes) -> pa.Table:
    """A Parquet file's bytes as a table, decoded on the calling thread. ``pq.read_table`` reads
    through Arrow's IO thread pool even with ``use_threads=False``; a pool thread still alive at
    interpreter shutdown made commands that opened an index abort at exit now and then
    (``terminate called without an active exception``, exit 134; apache/arrow#34314)."""
    table: pa.Table = pq.ParquetFile(pa.BufferReader(data), pre_buffer=False).read(use_threads=False)
    return table


@dataclass
class DocumentRecord:
    doc_id: str
    source: str
    sha256: str
    title: str | None
    text: str
    n_tokens: int
    n_embedded: int
    embed_mode: str
    n_vectors: int
    metadata: dict[str, Any] = field(default_factory=dict)
    ingested_at: str = ""

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["metadata"] = json.dumps(self.metadata, ensure_ascii=False, sort_keys=True)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> DocumentRecord:
        row = dict(row)
        row["metadata"] = json.loads(row["metadata"] or "{}")
        return cls(**row)


@dataclass
class VectorRecord:
    vid: int
    doc_id: str
    ordinal: int
    tok_start: int
    tok_end: int
    char_start: int
    char_end: int


def _vector_row(record: VectorRecord) -> dict[str, Any]:
    """``asdict(record)`` without its recursive copy (every field is an int or a str)."""
    return {
        "vid": record.vid,
        "doc_id": record.doc_id,
        "ordinal": record.ordinal,
        "tok_start": record.tok_start,
        "tok_end": record.tok_end,
        "char_start": record.char_start,
        "char_end": record.char_end,
    }


class Store:
    """Documents and vector rows; see the module docstring."""

    def __init__(self, documents: pa.Table, vectors: pa.Table):
        self._documents = documents
        self._vectors = vectors
        # documents added since the last _apply, in the order added: doc id → its row, its vector rows
        self._new_docs: dict[str, dict[str, Any]] = {}
        self._new_vectors: dict[str, list[dict[str, Any]]] = {}
        self._removed: set[str] = set()  # applied documents to drop at the next _apply
        # indexes of the applied tables, built when first needed
        self._doc_rows: dict[str, int] | None = None
        self._vid_rows: dict[int, int] | None = None
        self._vector_columns: dict[str, np.ndarray] | None = None  # with _vid_rows: see _vid_index
        self._doc_vectors: dict[str, tuple[np.ndarray, np.ndarray]] | None = None  # doc id → vids, ordinals

    @classmethod
    def empty(cls) -> Store:
        return cls(DOCUMENT_SCHEMA.empty_table(), VECTOR_SCHEMA.empty_table())

    @classmethod
    def from_bytes(cls, documents: bytes, vectors: bytes, source: str) -> Store:
        try:
            docs = read_parquet(documents)
            vecs = read_parquet(vectors)
        except (pa.ArrowInvalid, OSError) as exc:
            raise IndexFormatError(
                f"{source}: corrupt Parquet store ({exc}); repair the index with ragidx verify --repair"
            ) from exc
        if not docs.schema.equals(DOCUMENT_SCHEMA) or not vecs.schema.equals(VECTOR_SCHEMA):
            raise IndexFormatError(
                f"{source}: Parquet store has an unexpected schema; "
                "repair the index with ragidx verify --repair"
            )
        return cls(docs, vecs)

    def to_bytes(self, checks: dict[str, str] | None = None) -> tuple[bytes, bytes]:
        """(documents, vectors) as Parquet files (texts zstd), written for salvage (see
        ``ragidx.index.salvage``): small row groups (:data:`SALVAGE_ROW_GROUPS` or fewer, a
        document's text in its own group from :data:`SALVAGE_GROUP_BYTES` on), a CRC on every page,
        and in the vectors file's key-value metadata a copy of the documents file's footer
        (:data:`DOCUMENTS_FOOTER_KEY`) and ``checks`` (key → value: what the commit adds about its
        other files)."""
        self._apply()
        documents = _write_parquet(self._documents, _row_groups(self._documents))
        footer = parquet_footer(documents)  # with its CRC32: a damaged copy is not taken for the file's
        copy = f"{zlib.crc32(footer):08x}:{base64.b64encode(footer).decode('ascii')}"
        metadata = {DOCUMENTS_FOOTER_KEY: copy}
        vectors = self._vectors.replace_schema_metadata({**metadata, **(checks or {})})
        return documents, _write_parquet(vectors, _row_groups(vectors))

    # ----------------------------------------------------------------------------- mutations
    def add(self, document: DocumentRecord, vectors: list[VectorRecord]) -> None:
        """Queue a document (applied at the next read that needs it: adding n documents costs
        O(n), not O(n²); the rows of documents already applied do not move). A document with the
        same id queued since the last read is replaced."""
        self._new_docs.pop(document.doc_id, None)  # re-queued: goes to the end
        self._new_vectors.pop(document.doc_id, None)
        self._new_docs[document.doc_id] = document.to_row()
        self._new_vectors[document.doc_id] = [_vector_row(v) for v in vectors]

    def remove(self, doc_ids: set[str]) -> np.ndarray:
        """Drop documents (unknown ids are ignored); returns the vector ids that belonged to them,
        sorted. O(1) per document: the applied tables are filtered at the next whole read."""
        return self.remove_vectors(doc_ids)[0]

    def remove_vectors(self, doc_ids: set[str]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`remove`, returning the removed vector ids (sorted) and their ordinals
        (:data:`DOCUMENT_LEVEL` for a hybrid's document-level vector)."""
        vids: list[int] = []
        ordinals: list[int] = []
        for doc_id in doc_ids:
            if doc_id in self._new_docs:
                del self._new_docs[doc_id]
                rows = self._new_vectors.pop(doc_id)
                vids += (row["vid"] for row in rows)
                ordinals += (row["ordinal"] for row in rows)
            elif doc_id not in self._removed and doc_id in self._applied_rows():
                self._removed.add(doc_id)
                applied = self._applied_vectors().get(doc_id, _NO_VECTORS)
                vids += applied[0].tolist()
                ordinals += applied[1].tolist()
        order = np.argsort(np.asarray(vids, dtype=np.int64), kind="stable")
        return np.asarray(vids, dtype=np.int64)[order], np.asarray(ordinals, dtype=np.int64)[order]

    # ----------------------------------------------------------------------------- reads
    @property
    def n_documents(self) -> int:
        self._apply()
        return int(self._documents.num_rows)

    @property
    def n_vectors(self) -> int:
        self._apply()
        return int(self._vectors.num_rows)

    def sha256(self, doc_id: str) -> str | None:
        """The document's content hash (None: not in the store); answered without applying
        queued changes, so an ingest's per-document check stays O(1)."""
        if doc_id in self._new_docs:
            return str(self._new_docs[doc_id]["sha256"])
        row = self._applied_row(doc_id)
        return None if row is None else str(self._documents["sha256"][row].as_py())

    def document(self, doc_id: str) -> DocumentRecord:
        """One document's record (KeyError: not in the store); O(1), without applying queued
        changes."""
        if doc_id in self._new_docs:
            return DocumentRecord.from_row(self._new_docs[doc_id])
        row = self._applied_row(doc_id)
        if row is None:
            raise KeyError(doc_id)
        return DocumentRecord.from_row(self._documents.slice(row, 1).to_pylist()[0])

    def vector(self, vid: int) -> VectorRecord:
        row = self._vid_index()[int(vid)]
        assert self._vector_columns is not None  # built with the vid index
        value = {name: column[row] for name, column in self._vector_columns.items()}
        return VectorRecord(
            vid=int(value["vid"]),
            doc_id=str(value["doc_id"]),
            ordinal=int(value["ordinal"]),
            tok_start=int(value["tok_start"]),
            tok_end=int(value["tok_end"]),
            char_start=int(value["char_start"]),
            char_end=int(value["char_end"]),
        )

    def vids(self) -> np.ndarray:
        self._apply()
        vids: np.ndarray = self._vectors["vid"].to_numpy()
        return vids

    def ordinals(self) -> np.ndarray:
        """The ordinal of every vector row, in row order (-1: a hybrid's document-level vector)."""
        self._apply()
        ordinals: np.ndarray = self._vectors["ordinal"].to_numpy()
        return ordinals

    def document_vids(self, doc_id: str) -> tuple[np.ndarray, np.ndarray]:
        """(vector ids, ordinals) of one document's vectors, in row order (empty: unknown id)."""
        self._apply()
        return self._applied_vectors().get(doc_id, _NO_VECTORS)

    def vector_doc_ids(self) -> list[str]:
        """The document of every vector row, in row order."""
        self._apply()
        owners: list[str] = self._vectors["doc_id"].to_pylist()
        return owners

    def doc_ids(self) -> list[str]:
        self._apply()
        doc_ids: list[str] = self._documents["doc_id"].to_pylist()
        return doc_ids

    def content_hashes(self) -> dict[str, str]:
        """Document id → content sha256, for every document."""
        self._apply()
        ids, hashes = self._documents["doc_id"].to_pylist(), self._documents["sha256"].to_pylist()
        return dict(zip(ids, hashes, strict=True))

    def summaries(self) -> list[dict[str, Any]]:
        """One small dict per document (no text): how each was embedded, in index order."""
        self._apply()
        columns = ["doc_id", "source", "n_tokens", "n_embedded", "embed_mode", "n_vectors"]
        rows: list[dict[str, Any]] = self._documents.select(columns).to_pylist()
        return rows

    def stats(self) -> dict[str, Any]:
        """Counts for the manifest: documents, vectors, tokens, and documents per embed mode."""
        self._apply()
        docs = self._documents
        return {
            "documents": docs.num_rows,
            "vectors": self._vectors.num_rows,
            "tokens": int(pc.sum(docs["n_tokens"]).as_py() or 0),
            "tokens_embedded": int(pc.sum(docs["n_embedded"]).as_py() or 0),
            "by_mode": dict(sorted(Counter(docs["embed_mode"].to_pylist()).items())),
        }

    # ----------------------------------------------------------------------------- internals
    def _apply(self) -> None:
        if self._removed:
            gone = pa.array(sorted(self._removed))
            self._documents = self._documents.filter(pc.invert(pc.is_in(self._documents["doc_id"], gone)))
            self._vectors = self._vectors.filter(pc.invert(pc.is_in(self._vectors["doc_id"], gone)))
            self._removed = set()
            self._doc_rows = self._vid_rows = self._doc_vectors = None
        if self._new_docs:
            new = pa.Table.from_pylist(list(self._new_docs.values()), schema=DOCUMENT_SCHEMA)
            if self._doc_rows is not None:  # appended rows: extend the index instead of rebuilding it
                base = self._documents.num_rows
                self._doc_rows.update({d: base + i for i, d in enumerate(self._new_docs)})
            self._documents = pa.concat_tables([self._documents, new])
            rows = [row for doc_rows in self._new_vectors.values() for row in doc_rows]
            new = pa.Table.from_pylist(rows, schema=VECTOR_SCHEMA)
            self._vectors = pa.concat_tables([self._vectors, new])
            self._new_docs, self._new_vectors = {}, {}
            self._vid_rows = self._doc_vectors = None

    def _applied_row(self, doc_id: str) -> int | None:
        """The document's row in the applied table (None: absent, or removed since)."""
        return None if doc_id in self._removed else self._applied_rows().get(doc_id)

    def _applied_rows(self) -> dict[str, int]:
        """Document id → row in the applied table (queued changes are not in it)."""
        if self._doc_rows is None:
            self._doc_rows = {d: i for i, d in enumerate(self._documents["doc_id"].to_pylist())}
        return self._doc_rows

    def _applied_vectors(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Document id → (vector ids, ordinals) in the applied vector table, in row order."""
        if self._doc_vectors is None:
            vids, ordinals = self._vectors["vid"].to_numpy(), self._vectors["ordinal"].to_numpy()
            rows: dict[str, list[int]] = {}
            for row, owner in enumerate(self._vectors["doc_id"].to_pylist()):
                rows.setdefault(owner, []).append(row)
            self._doc_vectors = {d: (vids[r], ordinals[r]) for d, r in rows.items()}
        return self._doc_vectors

    def _vid_index(self) -> dict[int, int]:
        self._apply()
        if self._vid_rows is None:
            self._vid_rows = {int(v): i for i, v in enumerate(self._vectors["vid"].to_numpy())}
            # the columns as arrays, for :meth:`vector` (a search asks for hundreds of rows: a
            # one-row Arrow slice each took 18 µs)
            self._vector_columns = {
                name: self._vectors[name].to_numpy(zero_copy_only=False) for name in VECTOR_SCHEMA.names
            }
        return self._vid_rows


def parquet_footer(data: bytes) -> bytes:
    """The serialized FileMetaData of a Parquet file's bytes (what precedes its length and magic)."""
    length = struct.unpack("<I", data[-8:-4])[0] if len(data) >= 12 else len(data)
    return data[-8 - length : -8] if 8 + length <= len(data) else b""


def _row_groups(table: pa.Table) -> list[int]:
    """Row counts of the row groups :meth:`Store.to_bytes` writes ``table`` in: equal groups, at
    most :data:`SALVAGE_ROW_GROUPS`, cut earlier where texts reach :data:`SALVAGE_GROUP_BYTES`."""
    n = table.num_rows
    if n == 0:
        return []
    most = -(-n // SALVAGE_ROW_GROUPS)
    if "text" not in table.column_names:
        return [min(most, n - start) for start in range(0, n, most)]
    sizes = pc.binary_length(pc.cast(table["text"], pa.large_binary())).to_numpy(zero_copy_only=False)
    groups, rows, size = [], 0, 0
    for length in sizes.tolist():
        if rows and (rows == most or size + length > SALVAGE_GROUP_BYTES):
            groups.append(rows)
            rows, size = 0, 0
        rows, size = rows + 1, size + length
    return [*groups, rows]


def _write_parquet(table: pa.Table, groups: list[int]) -> bytes:
    """``table`` as a Parquet file of these row groups, every page with its CRC."""
    sink = io.BytesIO()
    # no min/max statistics (nothing reads them: tables are read whole; for the texts they cost ~5
    # copies of a text) and no dictionaries (per small row group they cost more than they save, and
    # a damaged dictionary page loses its whole column chunk); zstd for the texts only: the other
    # columns' pages are a few bytes each in these small row groups, where a codec costs more time
    # than it saves bytes (all zstd: twice the time of a commit's Parquet writes, the same size)
    compression = {name: "zstd" if name == "text" else "none" for name in table.column_names}
    with pq.ParquetWriter(
        sink,
        table.schema,
        compression=compression,
        write_statistics=False,
        use_dictionary=False,
        write_page_checksum=True,
    ) as writer:
        start = 0
        for rows in groups or [0]:
            writer.write_table(table.slice(start, rows), row_group_size=max(rows, 1))
            start += rows
    return sink.getvalue()
