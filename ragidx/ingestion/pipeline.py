"""Ingest: files → documents → tokens → long-document plan → vectors → index commit.

:func:`ingest` is the pipeline behind ``ragidx ingest``. It takes the index's writer lock, opens
the index (or creates it with the configured encoder, long-document policy and FAISS factory) and
removes a crashed writer's leftovers, reads documents, skips those whose content is unchanged since
the last ingest (sha256; the embedding settings are fixed per index), replaces changed ones, plans
each document by the long-document policy, and embeds windows from many documents together in
batches of ``[ingest] batch_tokens`` (sorted by length across documents). A document larger than a
batch, a long text and a streamed file are embedded on their own, as a stream
(``ragidx.ingestion.streaming``: tokenized piece by piece, in bounded memory), batch by batch. Each
finished batch is checkpointed (``ragidx.ingestion.checkpoints``; inside one document too), so a
killed ingest resumes without embedding it again; a damaged checkpoint is dropped with a warning.
Inside one document (:func:`embed_checkpointed`, shared with the Ray actors) a resumed stream checks
each part's token sha256 against the tokens it reads: parts of other text (the file was rewritten
while a killed ingest streamed it, then restored) are dropped with a warning and the document is
embedded from its start.
Two threads keep the encoder busy (issue 38; ``benchmarks/ingest_pipeline.py`` measures the rest of
the pipeline with a model of zero cost): a producer reads, hashes and tokenizes the next documents in
groups (``ragidx.ingestion.prefetch``), and one batch is embedded in an embedding thread while this
thread checkpoints and adds the batch before it and plans the next (:meth:`_Run.submit`). Batches,
checkpoints, vector ids and vectors are those of the sequential order; both threads are stopped and
joined before :func:`ingest` returns or raises (Ctrl-C included).
A streamed file whose text changed between its hash and its embedding is skipped (the index keeps
what it had). With ``prune``, documents whose source disappeared are removed. Everything is
committed once at the end: until then the index on disk is untouched. Every document records how it
was embedded; files that cannot be read are skipped and reported.

:func:`add_documents` is the embedding half on its own, for documents that come from memory (the
LangChain vector store) rather than from files; :func:`add_embedded` adds documents whose vectors
were made outside ragidx. Neither commits.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ragidx import faults
from ragidx.config import RagidxConfig
from ragidx.embed.config import LongDocConfig
from ragidx.embed.documents import embed_plans, plan_tokens
from ragidx.embed.encoder import Encoder, Tokens
from ragidx.embed.plan import EmbedPlan
from ragidx.embed.pooling import l2_normalize
from ragidx.errors import ConfigError, InputError
from ragidx.index.directory import STAGING_NAME, Index
from ragidx.index.lexical import Postings, analyse
from ragidx.index.lock import WriterLock
from ragidx.index.manifest import now
from ragidx.index.store import DocumentRecord, VectorRecord
from ragidx.ingestion.checkpoints import DAMAGED_REASON, Checkpoints, Parts
from ragidx.ingestion.prefetch import Prefetch
from ragidx.ingestion.streaming import (
    PIECE_CHARS,
    Spool,
    StaleParts,
    StreamedEmbedding,
    content_sha256,
    embed_streamed,
    hashed_pieces,
    streamable,
    streams,
    whitespace_pieces,
)
from ragidx.read.formats import suffix_list
from ragidx.read.walk import Document, Skipped, iter_documents

_PROGRESS_EVERY = 0.1  # seconds between progress reports while waiting for the embedding thread
CHANGED_LEXICAL_REASON = (
    "changed while its words were being read for the lexical index: its BM25 still covers only "
    "the start stored in the index; ingest again once the file is no longer written"
)
STALE_PARTS_REASON = (
    "its checkpointed windows were embedded from other text (the file was rewritten while a killed "
    "ingest read it): dropped, the document is embedded again from its start"
)
CHANGED_REASON = (
    "changed while it was being ingested (its text differs from when it was first read): not "
    "stored this time (the index keeps what it had); ingest it again once it is no longer written"
)


class Progress(Protocol):
    """What ingest reports while it runs (the CLI draws it with rich). An implementation may also
    have ``warned(item: Skipped)``: a document was ingested, but something in it was repaired; and
    ``read_all()``: every document has been read (the rest is embedding and the commit)."""

    def planned(self, document: Document, n_tokens: int) -> None: ...
    def embedded(self, n_tokens: int) -> None: ...
    def skipped(self, item: Skipped) -> None: ...


class _Silent:
    def planned(self, document: Document, n_tokens: int) -> None:
        pass

    def embedded(self, n_tokens: int) -> None:
        pass

    def skipped(self, item: Skipped) -> None:
        pass


@dataclass
class IngestReport:
    """What an ingest did."""

    index: str
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    resumed: int = 0  # documents whose vectors came from a killed ingest's checkpoints
    skipped: list[Skipped] = field(default_factory=list)
    warnings: list[Skipped] = field(default_factory=list)  # ingested, but something was repaired
    by_mode: Counter[str] = field(default_factory=Counter)
    tokens: int = 0
    tokens_embedded: int = 0
    window_tokens: int = 0
    vectors: int = 0
    seconds: float = 0.0
    embed_seconds: float = 0.0  # --engine ray: the wall time of the Ray job
    engine: str = "local"
    workers: int = 1
    cut: int = 0  # documents embedded in part (truncate, max_tokens, an extension's length)
    largest_cut: tuple[str, int, int] | None = None  # (doc_id, tokens, tokens embedded)
    missing: list[str] = field(default_factory=list)  # kept without prune: their source is gone

    def count_cut(self, doc_id: str, n_tokens: int, n_embedded: int) -> None:
        """Record a document of which only ``n_embedded`` of ``n_tokens`` tokens were embedded."""
        if n_embedded >= n_tokens:
            return
        self.cut += 1
        if self.largest_cut is None or n_tokens - n_embedded > self.largest_cut[1] - self.largest_cut[2]:
            self.largest_cut = (doc_id, n_tokens, n_embedded)

    @property
    def tokens_per_second(self) -> float:
        """Model throughput: window tokens (specials and prompts included) per embedding second."""
        return self.window_tokens / self.embed_seconds if self.embed_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "added": self.added,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "removed": self.removed,
            "resumed": self.resumed,
            "skipped": [{"source": s.source, "reason": s.reason} for s in self.skipped],
            "warnings": [{"source": w.source, "reason": w.reason} for w in self.warnings],
            "by_mode": dict(self.by_mode),
            "tokens": self.tokens,
            "tokens_embedded": self.tokens_embedded,
            "vectors": self.vectors,
            "seconds": round(self.seconds, 3),
            "embed_seconds": round(self.embed_seconds, 3),
            "tokens_per_second": round(self.tokens_per_second, 1),
            "engine": self.engine,
            "workers": self.workers,
            "cut": self.cut,
            "largest_cut": None
            if self.largest_cut is None
            else dict(zip(("doc_id", "tokens", "tokens_embedded"), self.largest_cut, strict=True)),
            "missing": self.missing,
        }


@dataclass
class _Planned:
    document: Document
    sha256: str
    tokens: Tokens | None  # None for a streamed document (its rows are given)
    plan: EmbedPlan
    replaces: bool
    vectors: np.ndarray | None = None  # final vectors, once embedded or taken from a checkpoint
    rows: list[VectorRecord] | None = None
    postings: Postings | None = None  # its lexical analysis, made while the batch before is embedded


def ingest(
    paths: str | Path | Sequence[str | Path],
    index_dir: str | Path,
    config: RagidxConfig | None = None,
    *,
    progress: Progress | None = None,
) -> IngestReport:
    """Ingest files or folders into the index at ``index_dir`` (created if absent).

    Holds the index's writer lock throughout; removes what a crashed writer left; reuses the
    vectors of batches a killed ingest had checkpointed; with ``config.ingest.prune`` removes
    documents under ``paths`` whose source disappeared; commits once at the end.
    """
    config = config or RagidxConfig()
    paths = check_paths(paths)
    started = time.perf_counter()
    directory = Path(index_dir)
    with WriterLock(directory):
        index = open_for_ingest(directory, config)
        report = commit_files(index, paths, config, progress)
    report.seconds = time.perf_counter() - started
    return report


def check_paths(paths: str | Path | Sequence[str | Path]) -> list[str | Path]:
    """``paths`` as a list, every one of them existing (else :class:`InputError`)."""
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    for path in paths:
        if not Path(path).exists():
            raise InputError(f"{path}: no such file or directory")
    return paths


def open_for_ingest(directory: Path, config: RagidxConfig) -> Index:
    """The index at ``directory`` (or a new one, uncommitted) with a crashed writer's leftovers
    removed; call under the index's writer lock."""
    index = _open_or_create(directory, config)
    index.remove_leftovers()
    return index


def commit_files(
    index: Index,
    paths: Sequence[str | Path],
    config: RagidxConfig,
    progress: Progress | None = None,
    *,
    fresh: frozenset[str] = frozenset(),
) -> IngestReport:
    """Read ``paths`` into ``index`` (embedding what the checkpoints do not hold), prune, and
    commit once; the body of :func:`ingest`, under the writer lock its caller holds. ``fresh``:
    content sha256 of documents a distributed run embedded into the checkpoints just now (not
    counted as resumed)."""
    progress = progress or _Silent()
    directory = index.directory
    assert directory is not None
    run = _Run(index, config, progress, IngestReport(index=str(directory)), fresh=fresh)
    options = config.ingest
    items = (
        item
        for path in paths
        for item in iter_documents(path, options.include, options.exclude, options.stream_bytes)
    )
    # reading, hashing and tokenizing run ahead in a thread (ragidx.ingestion.prefetch), the
    # encoder in another (_Run.submit); both are stopped and joined on the way out
    with run, Prefetch(items, _content_sha256, run.tokenize, run.wanted) as prepared:
        for ready in prepared:
            run.take(ready.item, ready.digest, ready.tokens)
        read_all = getattr(progress, "read_all", None)  # optional in Progress implementations
        if read_all is not None:
            read_all()
        run.flush()
    report = run.report
    if config.ingest.prune:
        run.prune(paths)
    else:
        report.missing = run.gone(paths)
    changed = report.added + report.updated + report.removed
    if not changed and not Index.exists(directory):
        found = f"{len(report.skipped)} skipped" if report.skipped else "no supported files"
        raise InputError(
            f"{', '.join(map(str, paths))}: no documents to ingest ({found}); supported: {suffix_list()}"
        )
    if config.ingest.strict and report.skipped:
        first = report.skipped[0]
        raise InputError(
            f"{len(report.skipped)} skipped under --strict (first: {first.source}: {first.reason}); "
            "nothing was committed; fix or exclude them, or drop --strict (embedded batches are kept "
            "and reused)"
        )
    committed = index.manifest.generation > 0
    added_lexical = index.lexical is not None and committed and not _has_lexical_file(index)
    if changed or added_lexical:
        faults.point("before-commit")
        index.commit()
    if run.checkpoints:
        run.checkpoints.clear()
    return report


def add_documents(
    index: Index,
    documents: Iterable[Document | Skipped],
    *,
    report: IngestReport | None = None,
    progress: Progress | None = None,
) -> IngestReport:
    """Embed documents (from files or from memory) into ``index`` by its encoder and long-document
    policy, without committing and without checkpoints. A document whose text, title and metadata
    are unchanged is left as it is; one with a known id and other content replaces it; a repeated
    id is skipped."""
    report = report or IngestReport(index=index.name)
    started = time.perf_counter()
    with _Run(index, RagidxConfig(), progress or _Silent(), report, checkpoints=False) as run:
        for item in documents:
            run.take(item)
        run.flush()
    report.seconds += time.perf_counter() - started
    return report


def add_embedded(
    index: Index, documents: Sequence[Document], vectors: np.ndarray, embed_mode: str = "external"
) -> None:
    """Add documents embedded outside ragidx, one vector each (L2-normalised here), without
    committing; a document with a known id replaces it. ragidx does not tokenize them: their token
    counts are recorded as 0 and their mode as ``embed_mode``."""
    vectors = np.asarray(vectors, dtype=np.float32).reshape(len(documents), -1)
    vectors = l2_normalize(vectors)
    for doc, vector in zip(documents, vectors, strict=True):
        record = DocumentRecord(
            doc_id=doc.doc_id,
            source=doc.source,
            sha256=hashlib.sha256(doc.text.encode("utf-8")).hexdigest(),
            title=doc.title,
            text=doc.text,
            n_tokens=0,
            n_embedded=0,
            embed_mode=embed_mode,
            n_vectors=1,
            metadata=doc.metadata,
            ingested_at=now().isoformat(),
        )
        span = VectorRecord(-1, doc.doc_id, 0, 0, 0, 0, len(doc.text))
        index.add(record, vector[None, :], [span])


def embed_checkpointed(
    item: Document,
    digest: str,
    encoder: Encoder,
    long_doc: LongDocConfig,
    batch_tokens: int,
    checkpoints: Checkpoints | None,
    warn: Callable[[Skipped], None],
    *,
    embed: bool = True,
    on_batch: Callable[[int], None] | None = None,
    spool: Spool | None = None,
) -> tuple[StreamedEmbedding, bool]:
    """Stream ``item`` (content sha256 ``digest``; embedding it unless ``embed`` is false) through
    :func:`ragidx.ingestion.streaming.embed_streamed`, resuming from its checkpointed parts and
    saving a part after each finished batch (the ``after-batch`` fault point); also whether parts
    were resumed. Damaged parts, and parts whose token sha256 is not that of the windows read now
    (:class:`StaleParts`), are dropped and reported through ``warn``; in the second case the
    document is streamed again from its start (``spool``, its private copy, restarted)."""
    parts = checkpoints.part(digest) if checkpoints and embed else None
    if checkpoints:
        warn_damaged(checkpoints, warn)

    def save_part(first: int, raw: np.ndarray, tokens: str) -> None:
        assert checkpoints is not None
        checkpoints.save_part(digest, first, raw, tokens)
        faults.point("after-batch")

    def run(done: Parts | None) -> StreamedEmbedding:
        return embed_streamed(
            item,
            encoder,
            long_doc,
            batch_tokens,
            embed=embed,
            on_batch=on_batch,
            done=done,
            on_part=save_part if checkpoints else None,
            on_piece=None if spool is None else spool.write,
        )

    try:
        return run(parts), parts is not None and len(parts) > 0
    except StaleParts:  # raised before anything was embedded
        assert checkpoints is not None
        checkpoints.drop_parts(digest)
        warn(Skipped(item.source, STALE_PARTS_REASON))
        if spool is not None:
            spool.reset()
        return run(None), False


def checkpointed_inside(
    doc_plan: EmbedPlan, batch_tokens: int, encoder: Encoder, long_doc: LongDocConfig
) -> bool:
    """Whether a document is larger than a batch and embedded batch by batch, each one
    checkpointed (``chunk`` and ``pcw`` windows, when streaming gives the same vectors)."""
    return (
        doc_plan.n_embedded > batch_tokens
        and long_doc.policy in ("chunk", "pcw")
        and streamable(encoder, long_doc)
    )


def warn_damaged(checkpoints: Checkpoints, warn: Callable[[Skipped], None]) -> None:
    """Report each damaged checkpoint file found since the last call, once."""
    for path in checkpoints.damaged:
        warn(Skipped(str(path), DAMAGED_REASON))
    checkpoints.damaged.clear()


class _Run:
    """One ingest's state: documents planned but not yet embedded, ids seen, checkpoints."""

    def __init__(
        self,
        index: Index,
        config: RagidxConfig,
        progress: Progress,
        report: IngestReport,
        checkpoints: bool = True,
        fresh: frozenset[str] = frozenset(),
    ):
        self.index = index
        self.fresh = fresh
        self.encoder = index.encoder
        self.long_doc = index.manifest.long_doc  # the index's policy applies to every document in it
        self.batch_tokens = config.ingest.batch_tokens
        self.progress = progress
        self.report = report
        manifest = index.manifest
        self.checkpoints = None
        if checkpoints and index.directory is not None:
            fingerprint = manifest.embedding_fingerprint()
            self.checkpoints = Checkpoints(index.directory, fingerprint, manifest.encoder.dim)
        self.checkpointed = self.checkpoints.load() if self.checkpoints else {}
        self.warn_damaged()
        self.pending: list[_Planned] = []
        self.planned_tokens = 0
        self.seen: dict[str, str] = {}
        self.skipped_sources: set[str] = set()
        # held while the index changes, and by the prefetch thread while it reads the store (wanted)
        self.lock = threading.Lock()
        self.worker: ThreadPoolExecutor | None = None  # the embedding thread, started with a batch
        self.in_flight: tuple[list[_Planned], Future[tuple[dict[str, np.ndarray], float, int]]] | None = None
        self.embedded_tokens: deque[int] = deque()  # encoder batches ended, not reported yet
        self.stopping = threading.Event()

    def __enter__(self) -> _Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wanted(self, item: Document, digest: str) -> bool:
        """Whether :meth:`take` will tokenize ``item`` whole (asked ahead, from the prefetch
        thread): not streamed, and its content not in the index already."""
        if streams(item, self.encoder, self.long_doc):
            return False
        with self.lock:
            return self.index.store.sha256(item.doc_id) != digest

    def tokenize(self, texts: list[str]) -> list[Tokens]:
        """Documents' texts tokenized in one call (the prefetch thread's groups)."""
        return self.encoder.tokenize_many(texts, "document")

    def take(self, item: Document | Skipped, digest: str | None = None, tokens: Tokens | None = None) -> None:
        """Plan one document (or record one skipped file); embed when a batch is full. ``digest``:
        its content sha256, ``tokens``: its tokens, when they were made ahead (else made here)."""
        if isinstance(item, Skipped):
            self.skip(item)
            return
        if item.doc_id in self.seen:
            first = self.seen[item.doc_id]
            self.skip(Skipped(item.source, f"duplicate document id {item.doc_id!r} (first from {first})"))
            return
        self.seen[item.doc_id] = item.source
        digest = content_sha256(item) if digest is None else digest
        with self.lock:
            previous = self.index.store.sha256(item.doc_id)
            unchanged = previous == digest and _same_record(self.index.store.document(item.doc_id), item)
        if unchanged:
            self.report.unchanged += 1
            if item.doc_id in self.index.lexical_from_head:  # a streamed file, its lexical part new
                now = hashlib.sha256()  # the file is read again: it must still be what was hashed
                with self.lock:
                    added = self.index.add_lexical_text(
                        item.doc_id, hashed_pieces(item, now), lambda: now.hexdigest() == digest
                    )
                if not added:
                    self.warn(Skipped(item.source, CHANGED_LEXICAL_REASON))
            return
        warning = item.metadata.get("warning")
        if warning:
            self.warn(Skipped(item.source, str(warning)))
        if streams(item, self.encoder, self.long_doc):
            self.take_streamed(item, digest, previous is not None)
            return
        tokens = self.encoder.tokenize(item.text, "document") if tokens is None else tokens
        if not len(tokens):
            self.skip(Skipped(item.source, "no tokens after tokenization (nothing to embed)"))
            return
        doc_plan = plan_tokens(self.encoder, tokens, self.long_doc)
        vectors = self.checkpointed.pop(digest, None)
        if vectors is not None and len(vectors) != len(doc_plan.rows):
            vectors = None
        if vectors is None and self._checkpointed_inside(doc_plan):
            self.take_streamed(item, digest, previous is not None)
            return
        postings = self.analyse(item)
        self.pending.append(
            _Planned(item, digest, tokens, doc_plan, previous is not None, vectors, postings=postings)
        )
        self.progress.planned(item, doc_plan.n_embedded)
        if vectors is not None:
            self.progress.embedded(doc_plan.n_embedded)
            return
        self.planned_tokens += doc_plan.n_embedded
        if self.planned_tokens >= self.batch_tokens:
            self.submit()

    def analyse(self, item: Document) -> Postings | None:
        """``item``'s lexical postings (None without a lexical index), made when it is planned, so
        that adding its batch later costs no analysis (the index's own :func:`analyse`, by pieces
        for a long text as :meth:`add` would)."""
        lexical = self.index.lexical
        if lexical is None:
            return None
        text = item.text if len(item.text) <= PIECE_CHARS else (piece for piece, _ in whitespace_pieces(item))
        return analyse(lexical.analyzer, [item.doc_id], [text])

    def _checkpointed_inside(self, doc_plan: EmbedPlan) -> bool:
        return checkpointed_inside(doc_plan, self.batch_tokens, self.encoder, self.long_doc)

    def take_streamed(self, item: Document, digest: str, replaces: bool) -> None:
        """Embed a large document on its own, batch by batch, each batch checkpointed (bounded
        memory, see ``ragidx.ingestion.streaming``); a file whose content changed since ``digest``
        was taken is skipped (the index keeps what it had)."""
        self.flush()  # keep documents in reading order (vector ids as in any other run)
        vectors = self.checkpointed.pop(digest, None)
        spool = Spool(self.staging) if item.stream is not None and self.index.lexical is not None else None
        with spool or nullcontext():
            try:
                done, resumed = self._stream(item, digest, vectors is None, spool)
                if vectors is not None and len(vectors) != len(done.rows):  # a checkpoint of other spans
                    if spool is not None:
                        spool.reset()
                    vectors, (done, resumed) = None, self._stream(item, digest, True, spool)
            except ValueError as exc:
                self.skip(Skipped(item.source, str(exc).removeprefix(f"{item.source}: ")))
                return
            if done.sha256 != digest:
                if self.checkpoints:
                    self.checkpoints.drop_parts(digest)
                self.skip(Skipped(item.source, CHANGED_REASON))
                return
            if vectors is None:
                vectors = done.vectors
                if vectors is None:  # embed=True above: the stream always returns its vectors
                    raise RuntimeError(f"{item.source}: the streamed embedding returned no vectors")
                if self.checkpoints:
                    self.checkpoints.save({digest: vectors})
                    self.checkpoints.drop_parts(digest)
                faults.point("after-batch")
                self.report.resumed += resumed
            else:
                self.report.resumed += digest not in self.fresh
            self.report.embed_seconds += done.seconds
            self.report.window_tokens += done.window_tokens
            self.progress.planned(item, done.plan.n_embedded)
            rows = [VectorRecord(-1, item.doc_id, i, *row) for i, row in enumerate(done.rows)]
            planned = _Planned(item, digest, None, done.plan, replaces, vectors, rows)
            self.add(planned, text=None if spool is None else spool.pieces())

    def _stream(
        self, item: Document, digest: str, embed: bool, spool: Spool | None
    ) -> tuple[StreamedEmbedding, bool]:
        """Stream ``item`` (embedding it unless ``embed`` is false), resuming from and saving its
        checkpointed parts; also whether parts were resumed."""
        return embed_checkpointed(
            item,
            digest,
            self.encoder,
            self.long_doc,
            self.batch_tokens,
            self.checkpoints,
            self.warn,
            embed=embed,
            on_batch=self.progress.embedded,
            spool=spool,
        )

    @property
    def staging(self) -> Path | None:
        """Where an ingest keeps its temporary files: the staging folder of an index directory
        that exists (removed after the ingest), else None (the system's temporary folder)."""
        directory = self.index.directory
        return directory / STAGING_NAME if directory is not None and directory.is_dir() else None

    def warn(self, item: Skipped) -> None:
        """Report something repaired (the ingest goes on)."""
        self.report.warnings.append(item)
        warned = getattr(self.progress, "warned", None)  # optional in Progress implementations
        if warned is not None:
            warned(item)

    def warn_damaged(self) -> None:
        """Warn once for each damaged checkpoint file found since the last call."""
        if self.checkpoints:
            warn_damaged(self.checkpoints, self.warn)

    def skip(self, item: Skipped) -> None:
        self.report.skipped.append(item)
        self.skipped_sources.add(item.source)
        self.progress.skipped(item)

    def flush(self) -> None:
        """Embed the pending batch, checkpoint it, and add its documents to the index (and the
        batch before it, if it is still being embedded)."""
        self.submit()
        self.finish()

    def submit(self) -> None:
        """Hand the pending batch to the embedding thread, then checkpoint and add the batch before
        it: the encoder embeds one batch while this thread adds the one before and plans the next
        (on a GPU the encoder never waits for the index's work)."""
        if not self.pending:
            return
        batch, self.pending, self.planned_tokens = self.pending, [], 0
        self.report.resumed += sum(p.vectors is not None and p.sha256 not in self.fresh for p in batch)
        if self.worker is None:
            self.worker = ThreadPoolExecutor(1, thread_name_prefix="ragidx-embed")
        before, self.in_flight = (
            self.in_flight,
            (batch, self.worker.submit(_embed, batch, self.encoder, self.on_batch)),
        )
        self._finish(before)

    def finish(self) -> None:
        """Wait for the batch being embedded, checkpoint it, and add its documents to the index."""
        in_flight, self.in_flight = self.in_flight, None
        self._finish(in_flight)

    def _finish(
        self, in_flight: tuple[list[_Planned], Future[tuple[dict[str, np.ndarray], float, int]]] | None
    ) -> None:
        if in_flight is None:
            return
        batch, future = in_flight
        while True:  # progress is reported from this thread, as the batches of the encoder end
            try:
                embedded, seconds, window_tokens = future.result(timeout=_PROGRESS_EVERY)
                break
            except FutureTimeout:
                self.report_embedded()
        self.report_embedded()
        self.report.embed_seconds += seconds
        self.report.window_tokens += window_tokens
        if self.checkpoints:
            self.checkpoints.save(embedded)
        if embedded:
            faults.point("after-batch")
        for item in batch:
            self.add(item)

    def on_batch(self, n_tokens: int) -> None:
        """One batch of the encoder ended (called in the embedding thread)."""
        if self.stopping.is_set():
            raise _Stopped
        self.embedded_tokens.append(n_tokens)

    def report_embedded(self) -> None:
        while self.embedded_tokens:
            self.progress.embedded(self.embedded_tokens.popleft())

    def close(self) -> None:
        """Stop the embedding thread (after the encoder batch it is in) and wait for it."""
        self.stopping.set()
        if self.worker is not None:
            self.worker.shutdown(wait=True, cancel_futures=True)
            self.worker = None

    def add(self, item: _Planned, text: Iterable[str] | None = None) -> None:
        """Add an embedded document to the index; ``text``: its whole text in pieces (a streamed
        file's, for the lexical index; a long text is given in pieces here)."""
        assert item.vectors is not None
        doc, report = item.document, self.report
        record = DocumentRecord(
            doc_id=doc.doc_id,
            source=doc.source,
            sha256=item.sha256,
            title=doc.title,
            text=doc.text,
            n_tokens=item.plan.n_tokens,
            n_embedded=item.plan.n_embedded,
            embed_mode=self.long_doc.label(item.plan.mode),
            n_vectors=len(item.vectors),
            metadata=doc.metadata,
            ingested_at=now().isoformat(),
        )
        rows = item.rows or _span_records(doc.doc_id, item.plan, item.tokens)
        postings = item.postings if item.postings is not None or text is not None else self.analyse(doc)
        with self.lock:
            self.index.add(record, item.vectors, rows, text=text, postings=postings)
        report.updated += item.replaces
        report.added += not item.replaces
        report.by_mode[record.embed_mode] += 1
        report.tokens += item.plan.n_tokens
        report.tokens_embedded += item.plan.n_embedded
        report.count_cut(doc.doc_id, item.plan.n_tokens, item.plan.n_embedded)
        report.vectors += len(item.vectors)

    def prune(self, paths: Sequence[str | Path]) -> None:
        """Remove the documents of :meth:`gone`."""
        gone = self.gone(paths)
        self.index.remove(gone)
        self.report.removed += len(gone)

    def gone(self, paths: Sequence[str | Path]) -> list[str]:
        """Documents from under ``paths`` that this ingest did not see (their file or JSONL record
        is gone), in index order. Documents of a file that was skipped this time are not gone."""
        roots = [os.path.abspath(p) for p in paths]

        def under(source: str) -> bool:
            return any(source == root or source.startswith(root.rstrip(os.sep) + os.sep) for root in roots)

        return [
            row["doc_id"]
            for row in self.index.store.summaries()
            if row["doc_id"] not in self.seen
            and under(row["source"])
            and row["source"] not in self.skipped_sources
        ]


def _content_sha256(document: Document) -> str:
    """:func:`content_sha256`, looked up when called (tests replace it)."""
    return content_sha256(document)


def _has_lexical_file(index: Index) -> bool:
    """Whether the committed generation has its lexical index (an ingest that adds one commits)."""
    return "lexical" in index.manifest.files


def _same_record(stored: DocumentRecord, document: Document) -> bool:
    return stored.title == document.title and stored.metadata == document.metadata


def _open_or_create(directory: Path, config: RagidxConfig) -> Index:
    if not Index.exists(directory):
        encoder = Encoder.from_settings(config.model, config.long_doc)
        return Index.create(directory, encoder, config.long_doc, config.index, config.lexical)
    index = Index.open(directory, encoder_config=config.model)
    manifest = index.manifest
    asked_lexical = config.lexical.enabled and "enabled" in config.lexical.model_fields_set
    if manifest.lexical is None and asked_lexical:
        index.enable_lexical(config.lexical)  # an index from before 0.2, or built without one
    sections = [("long_doc", manifest.long_doc), ("index", manifest.faiss)]
    if manifest.lexical is not None:
        sections.append(("lexical", manifest.lexical))
    for section, built in sections:
        asked = getattr(config, section)
        for name in asked.model_fields_set:
            if getattr(asked, name) != getattr(built, name):
                raise ConfigError(
                    f"{directory}: index was built with {section}.{name} = {getattr(built, name)!r}, "
                    f"not {getattr(asked, name)!r}; ingest into a new index to change it"
                )
    return index


class _Stopped(Exception):
    """The ingest ended (an error, Ctrl-C) while a batch was being embedded: the batch stops."""


def _embed(
    pending: list[_Planned], encoder: Encoder, on_batch: Callable[[int], None]
) -> tuple[dict[str, np.ndarray], float, int]:
    """Embed every window of the pending documents without vectors in one length-sorted run; set
    each one's final vectors (PCW averaged, L2-normalised) and return them by content sha256, with
    the seconds it took and the window tokens embedded (the ingest's embedding thread runs it)."""
    todo = [p for p in pending if p.vectors is None]
    if not todo:
        return {}, 0.0, 0
    started = time.perf_counter()
    window_tokens = 0

    def counted(n_tokens: int) -> None:
        nonlocal window_tokens
        window_tokens += n_tokens
        on_batch(n_tokens)

    embedded = embed_plans(encoder, [(p.tokens, p.plan) for p in todo if p.tokens is not None], counted)
    out: dict[str, np.ndarray] = {}
    for item, vectors in zip(todo, embedded, strict=True):
        item.vectors = out[item.sha256] = vectors
    return out, time.perf_counter() - started, window_tokens


def _span_records(doc_id: str, doc_plan: EmbedPlan, tokens: Tokens | None) -> list[VectorRecord]:
    """One record per vector of ``doc_plan`` (:attr:`EmbedPlan.rows`): chunk-level vectors numbered
    0, 1, …; a hybrid's document-level vector, the first row, ordinal -1 (see ``ragidx.index.store``)."""
    first = -1 if doc_plan.document is not None else 0
    return [
        _span_record(doc_id, first + i, start, end, tokens) for i, (start, end) in enumerate(doc_plan.rows)
    ]


def _span_record(doc_id: str, ordinal: int, start: int, end: int, tokens: Tokens | None) -> VectorRecord:
    if tokens is None or tokens.offsets is None:
        char_start = char_end = -1
    else:
        char_start, char_end = tokens.offsets[start][0], tokens.offsets[end - 1][1]
    return VectorRecord(
        vid=-1,
        doc_id=doc_id,
        ordinal=ordinal,
        tok_start=start,
        tok_end=end,
        char_start=char_start,
        char_end=char_end,
    )
