"""An index directory: FAISS vectors + Parquet store + manifest, opened and committed as one.

Layout of ``DIR``::

    manifest.json                 # the current generation (see ragidx.index.manifest)
    manifest.backup.json          # a copy of it, written after each switch
    vectors-000003.faiss          # FAISS index (IDMap2 over the factory), FAISS binary format
                                  # or, with [index] shards = N, vectors-000003-s000.faiss …
                                  # (manifest keys faiss.0 …; see ragidx.index.shards)
    vectors-000003-doc.faiss      # hybrid indexes only: the document-level vectors (key
                                  # faiss.document), a Flat IDMap2 index of the same dim
    documents-000003.parquet      # one row per document
    chunks-000003.parquet         # one row per vector id

A commit writes the next generation's files beside the current ones, fsyncs them, then switches
``manifest.json`` with an atomic rename and deletes the old generation: a reader opening the
directory at any moment sees one complete generation (a reader that read the old manifest just
before the switch finds its files gone and reads the new one instead). A commit that fails or is
interrupted before the switch removes its new files and leaves the index as it was; from the switch
on it stands, whatever happens next: nothing is removed but the previous generation's files, and
an interrupt is re-raised as :class:`InterruptedAfterCommit`, naming the generation committed
(whether the switch landed is read from disk, so this holds even for a signal mid-rename). Every
file's size and sha256 are checked on open, and FAISS ids must equal the store's vector ids. Writers hold
``ragidx.index.lock.WriterLock``; leftovers of a crashed writer (temp files, a generation whose manifest
switch never happened) are removed by :meth:`Index.remove_leftovers` under that lock.

Right after the switch a commit writes ``manifest.backup.json``, a copy of the manifest it switched
to, so a copy exists only of a manifest that was committed: what ``ragidx verify --repair``
rebuilds a damaged manifest from (``ragidx.index.verify``); it never names a generation whose
switch did not happen. A crash between the switch and that copy leaves the previous generation's
copy (and files, removed only after it): :meth:`Index.remove_leftovers` brings it up to date, as it
does for indexes written before the copy existed. Nothing removes it; a directory that holds one
but no ``manifest.json`` held a committed index, and is refused as a new one (repair it instead).

A hybrid index (``[long_doc] hybrid``) has two FAISS levels: every document's document-level
vector (store ordinal ``-1``) in :attr:`Index.document_vectors`, its chunk-level vectors in
:attr:`Index.vectors`; both levels' ids together equal the store's, each document has exactly one
document-level vector, and other indexes are written exactly as before (no second file).
``Index.open(dir).search(query, k)`` is the Python entry point for queries; ``ragidx.ingestion.pipeline``
adds documents through ``add``/``commit``; ``get`` and ``remove`` read and delete documents by id.

An index whose vectors come from outside ragidx (a LangChain ``Embeddings`` object) records an
:class:`~ragidx.index.manifest.ExternalEncoderInfo`: it has no ragidx encoder, and is searched with query
vectors its caller embeds (:meth:`Index.search_by_vectors`).
"""

from __future__ import annotations

import errno
import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Unpack

import numpy as np

from ragidx import __version__, faults
from ragidx.embed.config import EncoderConfig, LongDocConfig
from ragidx.embed.pooling import l2_normalize
from ragidx.errors import (
    IndexFormatError,
    InputError,
    InterruptedAfterCommit,
    ModelError,
    RagidxError,
    note_commit,
)
from ragidx.index.config import FaissConfig, LexicalConfig
from ragidx.index.faiss_index import FaissIndex
from ragidx.index.lexical import LexicalIndex, Postings, analyse
from ragidx.index.manifest import (
    BACKUP_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    EncoderInfo,
    ExternalEncoderInfo,
    FileEntry,
    Manifest,
    ManifestDamagedError,
    now,
    refresh_backup,
    repair_hint,
    write_atomic,
)
from ragidx.index.salvage import block_checks
from ragidx.index.shards import VectorIndex, create_vectors, vectors_from_bytes
from ragidx.index.store import DOCUMENT_LEVEL, DocumentRecord, Store, VectorRecord

if TYPE_CHECKING:
    from ragidx.embed.encoder import Encoder
    from ragidx.search.options import Mode, SearchKwargs
    from ragidx.search.retriever import SearchResult

Level = Literal["chunk", "document"]  # a hybrid index's two levels of vectors
DATA_FILE = re.compile(r"^(vectors|documents|chunks|lexical)-(\d{6})(?:-s\d{3}|-doc)?\.(faiss|parquet|npz)$")
LEXICAL_KEY = "lexical"  # manifest key of the BM25 index (ragidx.index.lexical)
STAGING_NAME = ".ragidx-staging"  # an interrupted ingest's checkpoints (ragidx.ingestion.checkpoints)
DOCUMENT_KEY = "faiss.document"  # manifest key of a hybrid index's document-level FAISS file
# What a document id may not hold: the characters ingest refuses in ids (ragidx.read.document's
# control_character, which this stage may not import): C0 and C1 controls, DEL, U+2028, U+2029
ID_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class Index:
    """A ragidx index directory; see the module docstring."""

    def __init__(
        self,
        directory: Path | None,
        manifest: Manifest,
        vectors: VectorIndex,
        store: Store,
        encoder: Encoder | None = None,
        encoder_config: EncoderConfig | None = None,
        document_vectors: FaissIndex | None = None,
        lexical: LexicalIndex | None = None,
    ):
        self.directory = directory
        self.lexical = lexical  # the BM25 index (None: dense only)
        self.lexical_from_head: set[str] = set()  # streamed documents analysed from their stored head
        self.manifest = manifest
        self.vectors = vectors
        self.document_vectors = document_vectors  # hybrid: the document-level vectors (ordinal -1)
        self.store = store
        self._encoder = encoder
        self._encoder_config = encoder_config or EncoderConfig()
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []  # (vectors, ids) not yet in FAISS
        self._pending_documents: list[tuple[np.ndarray, np.ndarray]] = []  # the same, document level

    # ----------------------------------------------------------------------------- lifecycle
    @classmethod
    def open(
        cls,
        directory: str | Path,
        *,
        encoder: Encoder | None = None,
        encoder_config: EncoderConfig | None = None,
    ) -> Index:
        """Open an existing index. The encoder is loaded on first search (from the manifest's
        model, with the run-time settings of ``encoder_config``: device, dtype, batch sizes)."""
        directory = Path(directory)
        manifest, vectors, store, document_vectors, lexical = load_generation(directory)
        index = cls(
            directory,
            manifest,
            vectors,
            store,
            encoder_config=encoder_config,
            document_vectors=document_vectors,
            lexical=lexical,
        )
        if encoder is not None:
            index.check_encoder(encoder)
            index._encoder = encoder
        return index

    @classmethod
    def create(
        cls,
        directory: str | Path | None,
        encoder: Encoder | ExternalEncoderInfo,
        long_doc: LongDocConfig | None = None,
        faiss_config: FaissConfig | None = None,
        lexical: LexicalConfig | None = None,
    ) -> Index:
        """A new, empty index (nothing is written until :meth:`commit`). ``encoder`` is a ragidx
        encoder, or the description of one outside ragidx whose vectors the caller adds.
        ``directory`` ``None``: an in-memory index, written where its first commit says.
        ``lexical``: the BM25 index's settings (None, or ``enabled = false``: dense only)."""
        if directory is not None:
            directory = Path(directory)
            _check_new_directory(directory)
        faiss_config = faiss_config or FaissConfig()
        info: EncoderInfo | ExternalEncoderInfo
        long_doc = long_doc or LongDocConfig()
        if isinstance(encoder, ExternalEncoderInfo):
            info = encoder
        else:
            precision = None if encoder.precision == "float32" else encoder.precision
            info = EncoderInfo.model_validate({**encoder.describe(), "precision": precision})
            long_doc = long_doc.for_model(encoder.window_size, encoder.folder.max_seq_length)  # recorded
        manifest = Manifest(
            ragidx_version=__version__,
            encoder=info,
            long_doc=long_doc,
            faiss=faiss_config,
            lexical=lexical if lexical is not None and lexical.enabled else None,
        )
        vectors = create_vectors(encoder.dim, faiss_config)
        document_vectors = None
        if manifest.long_doc.hybrid is not None:
            document_vectors = FaissIndex.create(encoder.dim, document_faiss(faiss_config))
        return cls(
            directory,
            manifest,
            vectors,
            Store.empty(),
            encoder=None if isinstance(encoder, ExternalEncoderInfo) else encoder,
            document_vectors=document_vectors,
            lexical=None if manifest.lexical is None else LexicalIndex.empty(manifest.lexical),
        )

    @property
    def name(self) -> str:
        """The directory, or ``in-memory index`` before the first commit of one created without."""
        return str(self.directory) if self.directory is not None else "in-memory index"

    @property
    def hybrid(self) -> bool:
        """True when the index holds document-level vectors beside the chunk-level ones."""
        return self.document_vectors is not None

    @staticmethod
    def exists(directory: str | Path) -> bool:
        return (Path(directory) / MANIFEST_NAME).is_file()

    # ----------------------------------------------------------------------------- encoder
    @property
    def encoder(self) -> Encoder:
        """The index's encoder, loaded on first use from the manifest's model."""
        if self._encoder is None:
            info = self._ragidx_encoder_info()
            runtime = self._encoder_config
            asked = runtime.model if "model" in runtime.model_fields_set else None
            config = runtime.model_copy(
                update={
                    "model": asked or info.name,
                    "revision": None if info.revision in (None, "bundled") else info.revision,
                    "max_length": info.window,
                    "pooling": info.pooling.modes,
                    "landmark_every": info.pooling.landmark_every,
                    "landmark_placement": info.pooling.landmark_placement,
                    "multicls_every": info.pooling.multicls_every,
                    "mean_every": info.pooling.mean_every,
                    "query_prompt": info.query_prompt,
                    "document_prompt": info.document_prompt,
                    **_recorded_backend(info.precision, runtime),
                }
            )
            from ragidx.embed.encoder import Encoder  # torch: loaded only when a search needs it

            encoder = Encoder.from_settings(config, self.manifest.long_doc)
            self.check_encoder(encoder)
            self._encoder = encoder
        return self._encoder

    def check_encoder(self, encoder: Encoder) -> None:
        """Refuse an encoder other than the one the index was built with."""
        built = self._ragidx_encoder_info()
        if encoder.dim != built.dim:
            raise ModelError(
                f"{self.name}: index holds {built.dim}-d vectors from {built.name}, but "
                f"{encoder.folder.name} makes {encoder.dim}-d vectors; query with {built.name}"
            )
        fingerprint = encoder.folder.fingerprint()
        if fingerprint != built.fingerprint:
            raise ModelError(
                f"{self.name}: index was built with {built.name} (fingerprint "
                f"{built.fingerprint}), not {encoder.folder.name} ({fingerprint}); query with the "
                "same model or re-ingest"
            )

    @property
    def external(self) -> bool:
        """True when the vectors were made outside ragidx (see the module docstring)."""
        return isinstance(self.manifest.encoder, ExternalEncoderInfo)

    def _ragidx_encoder_info(self) -> EncoderInfo:
        info = self.manifest.encoder
        if isinstance(info, ExternalEncoderInfo):
            raise ModelError(
                f"{self.name}: index holds {info.dim}-d vectors made outside ragidx by "
                f"{info.name}; search it with that embedding (ragidx.integrations.langchain."
                "RagidxVectorStore.load(path, embedding=...))"
            )
        return info

    # ----------------------------------------------------------------------------- queries
    # The search entry points users call. They hand over to ragidx.search at call time: at import
    # time this package never imports the search stage (see docs/architecture.md).
    def search(
        self,
        query: str,
        k: int = 10,
        **options: Unpack[SearchKwargs],
    ) -> list[SearchResult]:
        """The ``k`` best documents for ``query`` (chunks are merged per document; ``per="chunk"``
        ranks chunks instead). ``where`` keeps only documents it accepts, still returning ``k``
        when that many match: a dict of conditions (``{"tags": "bees", "year": {"$gte": 2020}}``,
        the filter language of ``ragidx.search.filters``), a ``Filter``, or a callable on a
        stored document. A hybrid index fuses document and best-chunk cosines as its manifest
        says, or as ``hybrid`` says (another fusion without re-ingesting; see ``ragidx.search``).
        A chunked document scores by its best chunk, or by the mean of its ``best_chunks`` best
        (default: the manifest's ``best_chunks``). ``mode``: ``dense``, ``lexical`` (BM25) or
        ``hybrid`` (both fused; the default where the index has a lexical index), with
        ``lexical_weight`` (or ``"rrf"``) overriding the manifest's. ``rerank``: a cross-encoder
        re-scores the first stage's best documents on their best passages (``"MODEL:N"`` or a
        ``Rerank``; ``ragidx.search.rerank``). See :class:`~ragidx.search.options.SearchOptions`."""
        return self.search_many([query], k, **options)[0]

    def search_many(
        self,
        queries: Sequence[str],
        k: int = 10,
        **options: Unpack[SearchKwargs],
    ) -> list[list[SearchResult]]:
        """:meth:`search` for several queries, embedded in one batch."""
        from ragidx.search.options import SearchOptions
        from ragidx.search.retriever import Retriever

        return Retriever(self).search_many(queries, k, SearchOptions(**options))

    def search_by_vectors(
        self,
        queries: Sequence[str],
        vectors: np.ndarray | None,
        k: int = 10,
        **options: Unpack[SearchKwargs],
    ) -> list[list[SearchResult]]:
        """Like :meth:`search_many` for query vectors embedded by the caller (L2-normalised here);
        ``queries`` only pick each result's snippet (``mode="lexical"``: they rank, ``vectors`` may be
        None)."""
        from ragidx.search.options import SearchOptions
        from ragidx.search.retriever import Retriever

        if vectors is not None:
            vectors = np.asarray(vectors, dtype=np.float32).reshape(len(queries), -1)
            self.check_query_vectors(vectors)
            vectors = l2_normalize(vectors)
        return Retriever(self).rank(queries, vectors, k, SearchOptions(**options))

    def search_mode(self, **options: Unpack[SearchKwargs]) -> Mode:
        """The mode a search with these options runs in (no ``mode``: hybrid where the index has a
        lexical index and ranks documents, else dense); raises as :meth:`search` would for a mode
        the index cannot run."""
        from ragidx.search.options import SearchOptions
        from ragidx.search.retriever import Retriever

        return Retriever(self).mode(SearchOptions(**options))

    def check_query_vectors(self, vectors: np.ndarray) -> None:
        """Refuse query vectors of another dimension than the index's."""
        if vectors.shape[-1] != self.manifest.encoder.dim:
            raise ModelError(
                f"{self.name}: query vectors are {vectors.shape[-1]}-d, the index holds "
                f"{self.manifest.encoder.dim}-d vectors from {self.manifest.encoder.name}"
            )

    # ----------------------------------------------------------------------------- reading
    # What the search stage reads: vectors by level, records by id. Nothing else of the index's
    # internals (store, FAISS files, pending vectors) is used outside this package.
    @property
    def long_doc(self) -> LongDocConfig:
        """How the documents were embedded (the manifest's long-document settings)."""
        return self.manifest.long_doc

    def vector_count(self, level: Level = "chunk") -> int:
        """How many vectors the level holds (``document``: 0 unless the index is hybrid)."""
        self.flush()
        if level == "document":
            return 0 if self.document_vectors is None else self.document_vectors.ntotal
        return self.vectors.ntotal

    def vectors_per_document(self) -> float:
        """The mean number of vectors per document (at least 1)."""
        return max(1.0, self.store.n_vectors / max(self.store.n_documents, 1))

    def nearest(self, queries: np.ndarray, n: int, level: Level = "chunk") -> tuple[np.ndarray, np.ndarray]:
        """Search of one level: (scores, vector ids), each (len(queries), n); id -1 pads. FAISS,
        or torch on a CUDA device for a Flat index (``ragidx.index.backend``; :attr:`search_backend`)."""
        self.flush()
        if level == "document":
            if self.document_vectors is None:
                raise ModelError(f"{self.name}: not a hybrid index (no document-level vectors)")
            return self.document_vectors.search(queries, n)
        return self.vectors.search(queries, n)

    @property
    def search_backend(self) -> str | None:
        """What searched the (chunk-level) vectors: ``faiss-gpu``, ``torch-cuda float32`` (or
        ``float16``) or ``faiss-cpu`` (``ragidx.index.backend``); None until a search of them ran."""
        backend = self.vectors.backend
        return None if backend is None else backend.label

    def vector_record(self, vid: int) -> VectorRecord:
        """The span (document, ordinal, tokens, characters) of one vector."""
        return self.store.vector(vid)

    def document(self, doc_id: str) -> DocumentRecord:
        """One stored document (text, source, metadata, how it was embedded)."""
        return self.store.document(doc_id)

    def doc_ids(self) -> list[str]:
        """Every document id, in store order."""
        return self.store.doc_ids()

    def summaries(self) -> list[dict[str, Any]]:
        """One row per document: id, source, tokens, tokens embedded, how, vectors (``info --documents``)."""
        return self.store.summaries()

    def vector_ids(self, doc_id: str) -> tuple[np.ndarray, int | None]:
        """One document's chunk-level vector ids in order, and its document-level vector id
        (None unless the index is hybrid)."""
        vids, ordinals = self.store.document_vids(doc_id)
        document_level = vids[ordinals == DOCUMENT_LEVEL]
        return vids[ordinals != DOCUMENT_LEVEL], int(document_level[0]) if len(document_level) else None

    def reconstruct(self, vids: np.ndarray, level: Level = "chunk") -> np.ndarray:
        """The stored vectors with these ids from one level, float32 (len(vids), dim)."""
        self.flush()
        if level == "document":
            if self.document_vectors is None:
                raise ModelError(f"{self.name}: not a hybrid index (no document-level vectors)")
            return self.document_vectors.reconstruct(vids)
        return self.vectors.reconstruct(vids)

    def get(self, doc_ids: Iterable[str]) -> list[DocumentRecord]:
        """The stored documents with these ids, in the order asked; unknown ids are left out."""
        return [self.store.document(d) for d in doc_ids if self.store.sha256(d) is not None]

    def vectors_of(self, vids: Sequence[int]) -> np.ndarray:
        """The stored vectors with these ids (of either level of a hybrid index), float32 (n, dim)."""
        self.flush()
        ids = np.asarray(vids, dtype=np.int64)
        if self.document_vectors is None:
            return self.vectors.reconstruct(ids)
        document_level = np.isin(ids, self.document_vectors.ids())
        out = np.zeros((len(ids), self.vectors.dim), dtype=np.float32)
        if document_level.any():
            out[document_level] = self.document_vectors.reconstruct(ids[document_level])
        if not document_level.all():
            out[~document_level] = self.vectors.reconstruct(ids[~document_level])
        return out

    def __len__(self) -> int:
        return self.store.n_documents

    # ----------------------------------------------------------------------------- writes
    def add(
        self,
        document: DocumentRecord,
        vectors: np.ndarray,
        spans: list[VectorRecord],
        text: Iterable[str] | None = None,
        postings: Postings | None = None,
    ) -> None:
        """Add one document with its vectors (``spans[i]`` describes ``vectors[i]``; ids are
        assigned here). A document with the same id is replaced. In a hybrid index the span with
        ordinal -1 is the document-level vector: exactly one per document. The lexical index
        analyses ``document.text``, or ``text`` when given (a streamed file's whole text, in
        pieces cut at whitespace), unless ``postings`` are given: this document's analysis, made
        ahead with this index's analyzer (ingest analyses a batch while the one before embeds). An
        id with a control character is refused, as ingest refuses it: it would break (or drive the
        terminal from) every line that shows it."""
        control = ID_CONTROL.search(document.doc_id)
        if control is not None:
            raise InputError(
                f"{self.name}: document id {document.doc_id!r} has a control character "
                f"({control.group()!r}), which would break every line that shows it; "
                "give it an id without one"
            )
        document_level = np.array([span.ordinal == DOCUMENT_LEVEL for span in spans], dtype=bool)
        if self.document_vectors is not None and document_level.sum() != 1:
            raise IndexFormatError(
                f"{self.name}: document {document.doc_id!r} has {int(document_level.sum())} "
                "document-level vectors; "
                "a hybrid index needs exactly one (ingest it with the index's long-document policy)"
            )
        if self.store.sha256(document.doc_id) is not None:
            self.remove({document.doc_id})
        start = self.manifest.next_vid
        ids = np.arange(start, start + len(vectors), dtype=np.int64)
        for vid, span in zip(ids, spans, strict=True):
            span.vid = int(vid)
        self.manifest.next_vid = start + len(vectors)
        vectors = np.asarray(vectors, dtype=np.float32)
        if self.document_vectors is None:
            self._pending.append((vectors, ids))
        else:
            self._pending.append((vectors[~document_level], ids[~document_level]))
            self._pending_documents.append((vectors[document_level], ids[document_level]))
        self.store.add(document, spans)
        if self.lexical is not None:
            if postings is None:
                postings = analyse(self.lexical.analyzer, [document.doc_id], [text or [document.text]])
            elif postings.doc_ids != [document.doc_id]:
                raise ValueError(f"postings of {postings.doc_ids} given for document {document.doc_id!r}")
            self.lexical.add(postings)

    def enable_lexical(self, config: LexicalConfig) -> None:
        """Add a lexical index to an index that has none (one written before ragidx 0.2, or built
        with ``lexical.enabled = false``): every stored document is analysed from its stored text;
        a streamed file's store holds only its head, so it is listed in :attr:`lexical_from_head`
        for the ingest that reads the file again to analyse all of it. Committed with the next
        generation."""
        if self.lexical is not None:
            return
        self.manifest.lexical = config
        self.lexical = LexicalIndex.empty(config)
        records = [self.store.document(d) for d in self.store.doc_ids()]
        doc_ids, texts = [r.doc_id for r in records], [r.text for r in records]
        self.lexical.add(analyse(self.lexical.analyzer, doc_ids, texts))
        self.lexical_from_head = {r.doc_id for r in records if r.metadata.get("streamed")}

    def add_lexical_text(
        self, doc_id: str, text: Iterable[str], unchanged: Callable[[], bool] | None = None
    ) -> bool:
        """Re-analyse a stored document from its whole text (pieces cut at whitespace). With
        ``unchanged``: asked once the text is read; False keeps the index as it was (the text read
        is not the stored document's). Returns whether the analysis was added."""
        if self.lexical is None:
            return False
        postings = analyse(self.lexical.analyzer, [doc_id], [text])
        if unchanged is not None and not unchanged():
            return False
        self.lexical.add(postings)
        self.lexical_from_head.discard(doc_id)
        return True

    def remove(self, doc_ids: Iterable[str]) -> int:
        """Drop documents by id (unknown ids are ignored); returns how many were dropped."""
        present = {d for d in doc_ids if self.store.sha256(d) is not None}
        self.flush()
        vids, ordinals = self.store.remove_vectors(present)
        if self.lexical is not None:
            self.lexical.remove(present)
        if self.document_vectors is not None:  # by the store's ordinals: O(1) per document
            document_level = ordinals == DOCUMENT_LEVEL
            self.document_vectors.remove(vids[document_level])
            vids = vids[~document_level]
        self.vectors.remove(vids)
        return len(present)

    def flush(self) -> None:
        """Hand vectors added since the last flush to FAISS in one call (an untrained factory
        trains on them); searches and commits do this first."""
        levels = ((self._pending, self.vectors), (self._pending_documents, self.document_vectors))
        for pending, level in levels:
            if pending and level is not None:
                vectors, ids = zip(*pending, strict=True)
                level.add(np.vstack(vectors), np.concatenate(ids))
                pending.clear()

    def commit(
        self, directory: str | Path | None = None, *, replacing: ManifestDamagedError | None = None
    ) -> None:
        """Write the next generation and switch the manifest to it (see the module docstring).
        ``directory``: write to (and from now on use) another directory, which must not hold an
        index yet. ``replacing`` (repair only): the damaged manifest this commit replaces, which
        must still be as it was read, instead of the generation this index was opened at."""
        if directory is not None and Path(directory) != self.directory:
            _check_new_directory(Path(directory))
            self.directory = Path(directory)
        if self.directory is None:
            raise IndexFormatError("in-memory index: give commit() the directory to write it to")
        self._check_unchanged_on_disk(replacing)
        self.flush()
        self.directory.mkdir(parents=True, exist_ok=True)
        generation = self.manifest.generation + 1
        shards = self.vectors.shard_bytes()
        payloads = _faiss_keys(shards)
        if self.document_vectors is not None:
            payloads[DOCUMENT_KEY] = self.document_vectors.to_bytes()
        # the FAISS files' block CRCs go in the vector-rows file, for repair (ragidx.index.salvage);
        # the store's Parquet files are written in a thread (Arrow releases the GIL) while this one
        # merges and packs the lexical index
        with ThreadPoolExecutor(1, thread_name_prefix="ragidx-commit") as writer:
            store = writer.submit(self.store.to_bytes, block_checks(payloads))
            lexical = self.lexical.to_bytes() if self.lexical is not None else None
            payloads["documents"], payloads["chunks"] = store.result()
        if lexical is not None:
            payloads[LEXICAL_KEY] = lexical
        names = {key: _faiss_file(key, generation) for key in payloads if key.startswith("faiss")}
        if LEXICAL_KEY in payloads:
            names[LEXICAL_KEY] = f"lexical-{generation:06d}.npz"
        names["documents"] = f"documents-{generation:06d}.parquet"
        names["chunks"] = f"chunks-{generation:06d}.parquet"
        files: dict[str, FileEntry] = {}
        manifest, switch = self.manifest, None
        try:
            for key, payload in payloads.items():
                write_atomic(self.directory / names[key], payload)
                digest = hashlib.sha256(payload).hexdigest()
                files[key] = FileEntry(name=names[key], sha256=digest, bytes=len(payload))
            faults.point("mid-commit")
            manifest = self.manifest.model_copy(deep=True)
            manifest.generation = generation
            manifest.files = files
            manifest.updated = now()
            manifest.ragidx_version = __version__
            manifest.format_version = FORMAT_VERSION  # a format 1 index gains its checksum
            manifest.counts = manifest.counts.model_validate(self.store.stats())
            switch = manifest.to_bytes()
            write_atomic(self.directory / MANIFEST_NAME, switch)  # the switch, then a directory fsync
            note_commit(self.directory, generation)  # an interrupt from here on reports it
            write_atomic(self.directory / BACKUP_NAME, switch)  # a copy of a committed manifest only
            faults.point("after-commit")
            self._remove_stale_files(keep=set(names.values()))
        except BaseException as exc:
            if switch is None or not _holds(self.directory / MANIFEST_NAME, switch):
                for name in names.values():  # the switch did not happen: the new files are garbage
                    (self.directory / name).unlink(missing_ok=True)
                if isinstance(exc, OSError):
                    raise _not_committed(exc, self.directory) from exc
                raise
            self.manifest = manifest  # it did: the commit landed, whatever failed after it
            note_commit(self.directory, generation)
            if not isinstance(exc, KeyboardInterrupt | Exception):
                raise  # SystemExit and the like, as they are
            raise _after_switch(exc, self.directory, generation) from exc
        self.manifest = manifest

    def _check_unchanged_on_disk(self, replacing: ManifestDamagedError | None = None) -> None:
        """Refuse to commit over a generation this index has not seen: another writer committed
        since it was opened, and writing now would drop that writer's changes."""
        assert self.directory is not None
        if replacing is not None:
            if not replacing.still_there():
                raise IndexFormatError(
                    f"{replacing.path}: changed on disk while it was being repaired; nothing was written: "
                    "check it again with ragidx verify"
                )
            return
        if not (self.directory / MANIFEST_NAME).exists():
            return
        current = Manifest.read(self.directory).generation
        if current != self.manifest.generation:
            raise IndexFormatError(
                f"{self.directory}: changed on disk since it was opened (generation {current}, opened at "
                f"{self.manifest.generation}); nothing was written: open it again and redo the change"
            )

    def remove_leftovers(self) -> None:
        """Delete what a crashed writer left: temp files and data files of generations the
        manifest does not list; bring ``manifest.backup.json`` up to date (a commit interrupted
        between its switch and its backup, an index written before backups). Call only while
        holding the writer lock."""
        if self.directory is not None and self.directory.is_dir():
            refresh_backup(self.directory, self.manifest)
            self._remove_stale_files(keep={entry.name for entry in self.manifest.files.values()})

    def info(self) -> dict[str, Any]:
        """The manifest as a plain dict (what ``ragidx info`` prints)."""
        data = self.manifest.model_dump(mode="json")
        data["directory"] = None if self.directory is None else str(self.directory)
        return data

    # ----------------------------------------------------------------------------- internals
    def _remove_stale_files(self, keep: set[str]) -> None:
        """Delete data files not in ``keep`` and temp files; never the manifest or its backup."""
        assert self.directory is not None
        for path in self.directory.iterdir():
            stale = DATA_FILE.match(path.name) and path.name not in keep
            temp = path.name.startswith(".") and ".tmp-" in path.name and path.is_file()
            if stale or (temp and not path.name.startswith(".ragidx-lock")):  # lock temps: WriterLock's
                path.unlink(missing_ok=True)


def _holds(path: Path, data: bytes) -> bool:
    """Whether ``path`` holds exactly ``data``: how a failed commit tells whether its switch landed."""
    try:
        return path.read_bytes() == data
    except OSError:
        return False


def _after_switch(
    exc: KeyboardInterrupt | Exception, directory: Path, generation: int
) -> InterruptedAfterCommit | RagidxError:
    """What a commit raises for ``exc``, raised after its manifest switch: the commit stands."""
    landed = f"{directory}: generation {generation} was committed"
    if isinstance(exc, KeyboardInterrupt):
        return InterruptedAfterCommit(f"{landed} (interrupted after the manifest switch)")
    return RagidxError(f"{landed}, but finishing it failed ({exc}); check it with ragidx verify {directory}")


def _not_committed(exc: OSError, directory: Path) -> OSError:
    """A commit's write failure before its switch, as one line: what failed, that nothing was
    committed, and what to do (an ``OSError`` still, of the same errno)."""
    failed = exc.strerror or str(exc)
    if exc.filename is not None:  # raised by the OS with the file named apart
        failed = f"cannot write {exc.filename} ({failed})"
    elif not failed.startswith("cannot write"):
        failed = f"cannot write to {directory} ({failed})"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        remedy = f"free space on the disk of {directory} (or raise your quota) and run the command again"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        remedy = f"make {directory} writable for you and run the command again"
    else:
        remedy = "fix that and run the command again"
    return OSError(exc.errno, f"{failed}; nothing was committed: {remedy}")


def _check_new_directory(directory: Path) -> None:
    if (directory / MANIFEST_NAME).exists():
        raise IndexFormatError(f"{directory}: already holds an index; open it instead")
    if (directory / BACKUP_NAME).exists():  # an index whose manifest.json is missing
        Manifest.read(directory)  # raises, saying whether it can be repaired
    if directory.exists() and not directory.is_dir():
        raise IndexFormatError(f"{directory}: exists and is not a directory")
    listed = directory.iterdir() if directory.is_dir() else iter(())
    found = sorted(p.name for p in listed if DATA_FILE.match(p.name))
    if found:  # an index from before backups whose manifest.json is gone: never start over on it
        raise IndexFormatError(
            f"{directory}: holds an index's data files ({found[0]}, …) but no {MANIFEST_NAME} nor "
            f"{BACKUP_NAME} to rebuild it from; nothing was changed: restore {MANIFEST_NAME} from a "
            "backup, or use another directory (or remove those files to start over here)"
        )


def _faiss_keys(shards: list[bytes]) -> dict[str, bytes]:
    """Manifest keys of the FAISS files: ``faiss`` for one index, ``faiss.0`` … for shards."""
    if len(shards) == 1:
        return {"faiss": shards[0]}
    return {f"faiss.{number}": payload for number, payload in enumerate(shards)}


def vector_keys(manifest: Manifest) -> list[str]:
    """Manifest keys of the chunk-level FAISS files, in shard order (see :func:`_faiss_keys`)."""
    shards = manifest.faiss.shards
    return ["faiss"] if shards == 1 else [f"faiss.{number}" for number in range(shards)]


def _faiss_file(key: str, generation: int) -> str:
    if key == "faiss":
        return f"vectors-{generation:06d}.faiss"
    if key == DOCUMENT_KEY:
        return f"vectors-{generation:06d}-doc.faiss"
    return f"vectors-{generation:06d}-s{int(key.partition('.')[2]):03d}.faiss"


def document_faiss(config: FaissConfig) -> FaissConfig:
    """The FAISS settings of a hybrid index's document-level vectors: exact (Flat), one file."""
    return FaissConfig(factory="Flat", gpu=config.gpu, gpu_dtype=config.gpu_dtype)


def load_generation(
    directory: Path, attempts: int = 5
) -> tuple[Manifest, VectorIndex, Store, FaissIndex | None, LexicalIndex | None]:
    """Read the current generation: manifest, checked data files, FAISS index, store, (hybrid
    indexes) the document-level FAISS index and (indexes with one) the lexical index. A commit that
    switches the manifest while this runs makes it read the new generation instead."""
    for attempt in range(attempts):
        manifest = Manifest.read(directory)
        try:
            data = {key: entry.read(directory) for key, entry in manifest.files.items()}
            break
        except IndexFormatError:
            switched = Manifest.read(directory).generation != manifest.generation
            if not switched or attempt == attempts - 1:
                raise
    keys = vector_keys(manifest)
    hybrid = manifest.long_doc.hybrid is not None
    lexical_config = manifest.lexical
    optional = [*([DOCUMENT_KEY] if hybrid else []), *([LEXICAL_KEY] if lexical_config else [])]
    needed = (*keys, "documents", "chunks", *optional)
    missing = [key for key in needed if key not in data]
    if missing:
        raise IndexFormatError(f"{directory / MANIFEST_NAME}: lists no {missing[0]} file")
    shards = [data[key] for key in keys]
    source = str(directory)
    vectors = vectors_from_bytes(shards, manifest.faiss, source)
    store = Store.from_bytes(data["documents"], data["chunks"], source)
    document_vectors = None
    if hybrid:
        path = directory / manifest.files[DOCUMENT_KEY].name
        config = document_faiss(manifest.faiss)
        document_vectors = FaissIndex.from_bytes(data[DOCUMENT_KEY], config, str(path))
    lexical = None
    if lexical_config is not None:
        path = directory / manifest.files[LEXICAL_KEY].name
        lexical = LexicalIndex.from_bytes(data[LEXICAL_KEY], lexical_config, str(path))
    check_agreement(directory, manifest, vectors, store, document_vectors, lexical)
    return manifest, vectors, store, document_vectors, lexical


def check_agreement(
    directory: Path,
    manifest: Manifest,
    vectors: VectorIndex,
    store: Store,
    document_vectors: FaissIndex | None = None,
    lexical: LexicalIndex | None = None,
) -> None:
    """FAISS and the store must hold exactly the same vector ids, of the manifest's dimension; in
    a hybrid index, the document-level FAISS index exactly the ids of ordinal -1, one per document,
    and the chunk-level one all the others; the lexical index exactly the store's documents."""
    if lexical is not None:
        stored, analysed = set(store.doc_ids()), set(lexical.doc_ids)
        if analysed != stored:
            raise IndexFormatError(
                f"{directory}: the lexical index lacks {len(stored - analysed)} stored documents and "
                f"holds {len(analysed - stored)} others; {repair_hint(directory)}"
            )
    vids = store.vids()
    if document_vectors is not None:
        document_level = store.ordinals() == DOCUMENT_LEVEL
        doc_vids = vids[document_level]
        _check_level(directory, "document-level FAISS index", document_vectors, doc_vids, manifest)
        owners = {doc_id for doc_id, up in zip(store.vector_doc_ids(), document_level, strict=True) if up}
        if int(document_level.sum()) != store.n_documents or len(owners) != store.n_documents:
            raise IndexFormatError(
                f"{directory}: {int(document_level.sum())} document-level vectors for {store.n_documents} "
                f"documents, {len(owners)} of which have one (a hybrid index has one each); "
                f"{repair_hint(directory)}"
            )
        vids = vids[~document_level]
    _check_level(directory, "FAISS index", vectors, vids, manifest)


def _check_level(
    directory: Path, what: str, vectors: VectorIndex, vids: np.ndarray, manifest: Manifest
) -> None:
    if vectors.ntotal != len(vids) or vectors.dim != manifest.encoder.dim:
        raise IndexFormatError(
            f"{directory}: {what} ({vectors.ntotal} vectors of {vectors.dim}-d) does not "
            f"match the store ({len(vids)} rows, {manifest.encoder.dim}-d); {repair_hint(directory)}"
        )
    if not np.array_equal(np.sort(vectors.ids()), np.sort(vids)):
        raise IndexFormatError(
            f"{directory}: {what.replace('index', 'ids')} differ from the store's vector ids; the index "
            f"is inconsistent, {repair_hint(directory)}"
        )


def _recorded_backend(precision: str | None, runtime: EncoderConfig) -> dict[str, str]:
    """An index whose documents ONNX Runtime embedded (``onnx-float32``, ``onnx-int8``) reopens on
    that backend and precision unless the run-time settings name a backend or a dtype other than
    auto: queries and added documents are then embedded as its documents were. Other precisions
    stay run-time choices."""
    chosen = "backend" in runtime.model_fields_set or runtime.dtype != "auto"
    if precision is None or not precision.startswith("onnx-") or chosen:
        return {}
    return {"backend": "onnx", "dtype": precision.removeprefix("onnx-")}
