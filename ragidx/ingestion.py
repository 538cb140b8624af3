"""Ingest: files → documents → tokens → long-document plan → vectors → index commit.

:func:`ingest` is the pipeline behind ``ragidx ingest``. It opens the index (or creates it with
the configured encoder, long-document policy and FAISS factory), reads documents, skips those whose
content is unchanged since the last ingest (sha256), replaces changed ones, plans each document by
the long-document policy, embeds windows from many documents together (so batches are sorted by
length across documents), and commits once at the end: until then the index on disk is untouched.
Every document records how it was embedded; files that cannot be read are skipped and reported.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ragidx.config import RagidxConfig
from ragidx.documents import Document, Skipped, iter_documents
from ragidx.encoder import Encoder, Tokens
from ragidx.errors import ConfigError, InputError
from ragidx.index import Index
from ragidx.longdoc import EmbedPlan, LongDocConfig, combine, plan
from ragidx.manifest import now
from ragidx.store import DocumentRecord, VectorRecord

FLUSH_TOKENS = 1 << 17  # embed once this many tokens are planned (bounds memory, keeps batches full)


class Progress(Protocol):
    """What ingest reports while it runs (the CLI draws it with rich)."""

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
    skipped: list[Skipped] = field(default_factory=list)
    by_mode: Counter[str] = field(default_factory=Counter)
    tokens: int = 0
    tokens_embedded: int = 0
    window_tokens: int = 0
    vectors: int = 0
    seconds: float = 0.0
    embed_seconds: float = 0.0

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
            "skipped": [{"source": s.source, "reason": s.reason} for s in self.skipped],
            "by_mode": dict(self.by_mode),
            "tokens": self.tokens,
            "tokens_embedded": self.tokens_embedded,
            "vectors": self.vectors,
            "seconds": round(self.seconds, 3),
            "embed_seconds": round(self.embed_seconds, 3),
            "tokens_per_second": round(self.tokens_per_second, 1),
        }


@dataclass
class _Planned:
    document: Document
    sha256: str
    tokens: Tokens
    plan: EmbedPlan
    replaces: bool


def ingest(
    paths: str | Path | Sequence[str | Path],
    index_dir: str | Path,
    config: RagidxConfig | None = None,
    *,
    progress: Progress | None = None,
) -> IngestReport:
    """Ingest files or folders into the index at ``index_dir`` (created if absent)."""
    config = config or RagidxConfig()
    progress = progress or _Silent()
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    for path in paths:
        if not Path(path).exists():
            raise InputError(f"{path}: no such file or directory")
    started = time.perf_counter()
    index = _open_or_create(Path(index_dir), config)
    encoder = index.encoder
    long_doc = index.manifest.long_doc  # the index's policy applies to every document in it
    report = IngestReport(index=str(index_dir))
    pending: list[_Planned] = []
    seen: dict[str, str] = {}
    planned_tokens = 0

    for path in paths:
        for item in iter_documents(path, config.ingest.include, config.ingest.exclude):
            if isinstance(item, Skipped):
                report.skipped.append(item)
                progress.skipped(item)
                continue
            if item.doc_id in seen:
                dup = Skipped(
                    item.source, f"duplicate document id {item.doc_id!r} (first from {seen[item.doc_id]})"
                )
                report.skipped.append(dup)
                progress.skipped(dup)
                continue
            seen[item.doc_id] = item.source
            digest = hashlib.sha256(item.text.encode("utf-8")).hexdigest()
            previous = index.store.sha256(item.doc_id)
            if previous == digest:
                report.unchanged += 1
                continue
            tokens = encoder.tokenize(item.text, "document")
            if not len(tokens):
                gone = Skipped(item.source, "no tokens after tokenization (nothing to embed)")
                report.skipped.append(gone)
                progress.skipped(gone)
                continue
            extended = encoder.content_budget(tokens, extended=True) if long_doc.policy == "extend" else None
            doc_plan = plan(len(tokens), encoder.content_budget(tokens), long_doc, extended)
            pending.append(_Planned(item, digest, tokens, doc_plan, replaces=previous is not None))
            progress.planned(item, doc_plan.n_embedded)
            planned_tokens += doc_plan.n_embedded
            if planned_tokens >= FLUSH_TOKENS:
                _embed(pending, index, encoder, report, progress, long_doc)
                pending, planned_tokens = [], 0
    _embed(pending, index, encoder, report, progress, long_doc)

    if report.added + report.updated == 0 and not Index.exists(index_dir):
        found = f"{len(report.skipped)} skipped" if report.skipped else "no supported files"
        raise InputError(
            f"{', '.join(map(str, paths))}: no documents to ingest ({found}); supported: "
            ".txt .md .html .htm .pdf .jsonl"
        )
    if report.added + report.updated:
        index.commit()
    report.seconds = time.perf_counter() - started
    return report


def _open_or_create(directory: Path, config: RagidxConfig) -> Index:
    if not Index.exists(directory):
        encoder = Encoder(config.model, extension=config.long_doc.extension)
        return Index.create(directory, encoder, config.long_doc, config.index)
    index = Index.open(directory, encoder_config=config.model)
    manifest = index.manifest
    for section, built in (("long_doc", manifest.long_doc), ("index", manifest.faiss)):
        asked = getattr(config, section)
        for name in asked.model_fields_set:
            if getattr(asked, name) != getattr(built, name):
                raise ConfigError(
                    f"{directory}: index was built with {section}.{name} = {getattr(built, name)!r}, "
                    f"not {getattr(asked, name)!r}; ingest into a new index to change it"
                )
    return index


def _embed(
    pending: list[_Planned],
    index: Index,
    encoder: Encoder,
    report: IngestReport,
    progress: Progress,
    long_doc: LongDocConfig,
) -> None:
    """Embed every window of the pending documents in one length-sorted run, then add them."""
    if not pending:
        return
    windows = [encoder.window(p.tokens, s, e) for p in pending for s, e in p.plan.spans]
    started = time.perf_counter()
    raw = encoder.embed_windows(windows, normalize=False, on_batch=progress.embedded)
    report.embed_seconds += time.perf_counter() - started
    report.window_tokens += sum(len(w.input_ids) for w in windows)
    at = 0
    for item in pending:
        vectors, spans = combine(item.plan, raw[at : at + len(item.plan.spans)])
        at += len(item.plan.spans)
        doc = item.document
        record = DocumentRecord(
            doc_id=doc.doc_id,
            source=doc.source,
            sha256=item.sha256,
            title=doc.title,
            text=doc.text,
            n_tokens=item.plan.n_tokens,
            n_embedded=item.plan.n_embedded,
            embed_mode=long_doc.extension.label() if item.plan.mode == "extend" else item.plan.mode,
            n_vectors=len(vectors),
            metadata=doc.metadata,
            ingested_at=now().isoformat(),
        )
        rows = [_span_record(doc.doc_id, i, s, e, item.tokens) for i, (s, e) in enumerate(spans)]
        index.add(record, vectors, rows)
        report.updated += item.replaces
        report.added += not item.replaces
        report.by_mode[record.embed_mode] += 1
        report.tokens += item.plan.n_tokens
        report.tokens_embedded += item.plan.n_embedded
        report.vectors += len(vectors)


def _span_record(doc_id: str, ordinal: int, start: int, end: int, tokens: Tokens) -> VectorRecord:
    if tokens.offsets is None:
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
