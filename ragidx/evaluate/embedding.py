"""Cached embedding of an evaluation's documents and queries.

:func:`embed_documents` plans every document of a task group with a strategy's
:class:`~ragidx.embed.config.LongDocConfig` (``ragidx.embed.plan.plan``, as ingest does), embeds the
windows the cache does not hold with :class:`~ragidx.embed.encoder.Encoder`, and combines them
(``ragidx.embed.plan.combine``: one vector, or one per chunk) into :class:`Embedded`;
:func:`embed_queries` embeds the queries. The cache (:mod:`ragidx.embed.cache`) holds each
document's *raw* vectors under keys that say what decides them (the encoder's identity, the
extension acting, the span, the text), so strategies share the windows they have in common and an
interrupted run resumes from what was flushed. :class:`Encoders` loads each distinct encoder once;
:func:`hardware` describes where one runs.
"""

from __future__ import annotations

import platform
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from ragidx.embed.cache import EmbeddingCache, content_hash, make_key
from ragidx.embed.config import EncoderConfig, ExtensionConfig, HybridConfig, LongDocConfig
from ragidx.embed.documents import embed_raw, plan_tokens
from ragidx.embed.encoder import Encoder, Tokens
from ragidx.embed.plan import EmbedPlan, combine
from ragidx.errors import ConfigError
from ragidx.evaluate.grid import EvalProgress
from ragidx.evaluate.report import Hardware
from ragidx.evaluate.tasks import TaskGroup
from ragidx.strategy import Strategy

__all__ = [
    "FLUSH_TOKENS",
    "EmbedStats",
    "Embedded",
    "Encoders",
    "embed_documents",
    "embed_queries",
    "hardware",
]

FLUSH_TOKENS = 1 << 16  # embed (and write the cache) once this many tokens are pending


@dataclass
class Embedded:
    """A task group's documents embedded for one strategy: what :mod:`ragidx.evaluate.scoring` scores."""

    doc_ids: list[str]
    vectors: np.ndarray  # (n vectors, dim), each document's vectors contiguous
    starts: np.ndarray  # first vector of each document
    modes: Counter[str] = field(default_factory=Counter)
    documents: np.ndarray | None = None  # hybrid: (n docs, dim) document-level vectors

    @property
    def vectors_per_doc(self) -> float:
        return len(self.vectors) / max(len(self.doc_ids), 1)


@dataclass
class EmbedStats:
    """What one record's embedding cost and what the cache served (the record's timing)."""

    embed_seconds: float = 0.0
    tokens: int = 0
    docs_embedded: int = 0
    docs_cached: int = 0
    queries_embedded: int = 0
    queries_cached: int = 0


class Encoders:
    """Loaded encoders, one per distinct (model, encoder overrides, active extension)."""

    def __init__(self, device: str, dtype: str, batch_size: int | None, backend: str = "torch") -> None:
        self.device = device
        self.dtype = dtype
        self.backend = backend
        self.batch_size = batch_size
        self._loaded: dict[str, tuple[Encoder, str]] = {}

    def get(self, model: str, overrides: dict[str, Any], extension: ExtensionConfig) -> tuple[Encoder, str]:
        """The encoder and its identity key (weights fingerprint, pooling, prompts, window)."""
        active = extension.method != "none" or extension.uses_tau
        key = make_key(model=model, overrides=overrides, extension=extension.model_dump() if active else None)
        if key not in self._loaded:
            settings: dict[str, Any] = {
                "model": model,
                "device": self.device,
                "dtype": self.dtype,
                "backend": self.backend,
                **overrides,
            }
            if self.batch_size:
                settings["batch_size"] = self.batch_size
            encoder = Encoder(EncoderConfig(**settings), extension=extension if active else None)
            self._loaded[key] = (encoder, make_key(encoder=_identity(encoder)))
        return self._loaded[key]


def _identity(encoder: Encoder) -> dict[str, object]:
    """What decides an encoder's vectors: its manifest description, plus the dtype when it is not
    float32 (float32 keys stay as they were, so older caches keep serving CPU runs) and the
    precision when ONNX Runtime computes them (``onnx-float32``, ``onnx-int8``)."""
    identity = encoder.describe()
    if encoder.dtype != torch.float32:
        identity["dtype"] = _dtype_name(encoder)
    if encoder.onnx is not None:
        identity["precision"] = encoder.precision
    return identity


def _dtype_name(encoder: Encoder) -> str:
    """The dtype a record's hardware names: the torch dtype, or ``onnx-float32`` / ``onnx-int8``."""
    return encoder.precision


def hardware(encoder: Encoder) -> Hardware:
    """Where ``encoder`` runs: its device (and GPU), the CPU and threads, torch, dtype, platform."""
    device = str(encoder.device)
    if encoder.device.type == "cuda":
        device += f" ({torch.cuda.get_device_name(encoder.device)})"
    return Hardware(
        device=device,
        cpu=platform.processor() or platform.machine(),
        threads=torch.get_num_threads(),
        torch=torch.__version__,
        dtype=_dtype_name(encoder),
        platform=platform.platform(),
    )


def embed_documents(
    encoder: Encoder,
    encoder_id: str,
    strategy: Strategy,
    long_doc: LongDocConfig,
    group: TaskGroup,
    cache: EmbeddingCache,
    stats: EmbedStats,
    progress: EvalProgress,
) -> Embedded:
    """Every document's vectors (from the cache, else embedded), in ``group.corpus`` order.

    The cache holds each document's *raw* vectors (un-normalised, one per window or late chunk, and
    the hybrid document vector; a late plan always computes its pass vector, which costs nothing), so
    ``late``, ``late+hybrid:…`` and ``late+vectors:K`` share one embedding run; a hybrid with a
    document plan of its own (``pcw+chunk:256+hybrid:rrf``) is embedded as its two strategies."""
    separate = long_doc.document_config()
    if separate is not None:
        chunk_level = long_doc.model_copy(update={"hybrid": None})
        chunks = embed_documents(encoder, encoder_id, strategy, chunk_level, group, cache, stats, progress)
        whole = embed_documents(encoder, encoder_id, strategy, separate, group, cache, stats, progress)
        return replace(chunks, documents=whole.vectors)
    fingerprint = encoder.folder.fingerprint()
    recipe = _embedding_config(long_doc)
    found: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    plans: dict[str, EmbedPlan] = {}
    modes: Counter[str] = Counter()
    pending: list[_Raw] = []
    for doc_id, text in group.corpus.items():
        tokens = encoder.tokenize(text, "document")
        if not len(tokens):
            raise ConfigError(f"document {doc_id!r} has no tokens; remove it from the corpus")
        plans[doc_id] = plan_tokens(encoder, tokens, long_doc)
        modes[long_doc.label(plans[doc_id].mode)] += 1
        raw_plan = plan_tokens(encoder, tokens, recipe)
        window = encoder.content_budget(tokens)
        sha = content_hash(text)
        raw = _Raw.look_up(cache, encoder_id, recipe.extension, window, doc_id, sha, tokens, raw_plan)
        if raw.complete:
            found[doc_id] = raw.vectors()
            stats.docs_cached += 1
            continue
        pending.append(raw)
    total = sum(_plan_tokens(encoder, raw.tokens, raw.todo) for raw in pending)
    progress.stage(f"{group.name}: embed documents", total)
    batch: list[_Raw] = []
    size = 0
    for item in pending:
        batch.append(item)
        size += _plan_tokens(encoder, item.tokens, item.todo)
        if size >= FLUSH_TOKENS:
            _embed_batch(encoder, strategy, fingerprint, batch, found, cache, stats, progress)
            batch, size = [], 0
    _embed_batch(encoder, strategy, fingerprint, batch, found, cache, stats, progress)
    doc_ids = list(group.corpus)
    final = {d: combine(plans[d], *found[d]) for d in doc_ids}
    skip = 1 if long_doc.hybrid is not None else 0  # a hybrid's document vector comes first
    documents = np.stack([final[d][0] for d in doc_ids]) if skip else None
    counts = [len(final[d]) - skip for d in doc_ids]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    vectors = np.concatenate([final[d][skip:] for d in doc_ids])
    return Embedded(doc_ids, vectors, starts, modes, documents)


def _embedding_config(long_doc: LongDocConfig) -> LongDocConfig:
    """What is embedded (and cached) for ``long_doc``: no vectors-per-doc grouping, no fusion or
    best-N scoring settings, and a late plan's pass vector always."""
    hybrid = long_doc.hybrid
    if long_doc.policy == "late" and (hybrid is None or hybrid.document == "pass"):
        hybrid = HybridConfig(document="pass")
    elif hybrid is not None:
        hybrid = HybridConfig(document=hybrid.document)
    return long_doc.model_copy(update={"vectors_per_doc": None, "hybrid": hybrid, "best_chunks": None})


def _plan_tokens(encoder: Encoder, tokens: Tokens, doc_plan: EmbedPlan) -> int:
    """Input tokens one plan runs through the encoder (for progress bars)."""
    spans = list(doc_plan.windows) + list(doc_plan.passes)
    extra = len(encoder.prefix_ids) + len(encoder.suffix_ids) + len(tokens.prompt_ids)
    return sum(e - s + extra for s, e in spans)


@dataclass
class _Raw:
    """One document's raw vectors (un-normalised, as :func:`~ragidx.embed.documents.embed_raw` returns them)
    and where the cache keeps them. A plan of plain windows (``whole``, ``truncate``, ``chunk``,
    ``pcw``, one ``extend`` pass) is cached per window, so strategies share the windows they have in
    common (``truncate``'s window is the first of ``chunk``'s and ``pcw``'s, and a document that fits
    the model's window is one vector whatever the strategy); a plan with late passes or its own
    document vector is cached as one entry."""

    doc_id: str
    sha: str
    tokens: Tokens
    plan: EmbedPlan
    keys: list[str]
    rows: list[np.ndarray | None]  # per key; None: still to embed

    @classmethod
    def look_up(
        cls,
        cache: EmbeddingCache,
        encoder_id: str,
        extension: ExtensionConfig,
        window: int,
        doc_id: str,
        sha: str,
        tokens: Tokens,
        plan: EmbedPlan,
    ) -> _Raw:
        """The document's cache keys, and the rows the cache already holds under them (``window``:
        the content tokens one window of the unextended model holds)."""
        if _per_window(plan):
            keys = [_window_key(encoder_id, extension, span, window, sha) for span in plan.spans]
        else:
            keys = [_document_key(encoder_id, extension, plan, sha)]
        return cls(doc_id, sha, tokens, plan, keys, [cache.get(key) for key in keys])

    @property
    def per_window(self) -> bool:
        return _per_window(self.plan)

    @property
    def complete(self) -> bool:
        return all(row is not None for row in self.rows)

    @property
    def todo(self) -> EmbedPlan:
        """What is still to embed: the missing windows, or the whole plan."""
        if not self.per_window:
            return self.plan
        missing = [span for span, row in zip(self.plan.spans, self.rows, strict=True) if row is None]
        return replace(self.plan, spans=missing)

    def fill(self, chunks: np.ndarray, document: np.ndarray | None) -> list[tuple[str, np.ndarray]]:
        """Take the embedded :attr:`todo`'s vectors; returns the new (key, rows) cache entries."""
        if not self.per_window:
            rows = chunks if document is None else np.vstack([document[None, :], chunks])
            self.rows = [rows]
            return [(self.keys[0], rows)]
        new = iter(chunks)
        fresh: list[tuple[str, np.ndarray]] = []
        for i, row in enumerate(self.rows):
            if row is None:
                row = next(new)[None, :]
                self.rows[i] = row
                fresh.append((self.keys[i], row))
        return fresh

    def vectors(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(chunk vectors, document vector): what :func:`~ragidx.embed.plan.combine` takes."""
        if self.per_window:
            windows = [row for row in self.rows if row is not None]
            assert len(windows) == len(self.rows)
            return np.vstack(windows), None
        rows = self.rows[0]
        assert rows is not None
        document = self.plan.document
        if isinstance(document, EmbedPlan) or (document == "pass" and self.plan.passes):
            return rows[1:], rows[0]  # the document row is first
        return rows, None


def _per_window(plan: EmbedPlan) -> bool:
    """True for a plan of plain windows (no late passes, no document vector of its own)."""
    return not plan.passes and plan.document is None


def _acting(extension: ExtensionConfig, span: tuple[int, int], window: int) -> ExtensionConfig:
    """The extension that acts on one plain window: none (τ aside) where the model's own window holds
    it, since an extension runs the unmodified model on such inputs (:mod:`ragidx.embed.extension`), so an
    ``extend`` strategy shares those vectors with the others; unless an explicit ``original_length``
    moves where the extension starts."""
    if extension.method == "none" or extension.original_length is not None or span[1] - span[0] > window:
        return extension
    return extension.model_copy(update={"method": "none"})


def _recipe_extension(extension: ExtensionConfig) -> dict[str, Any]:
    """The extension parameters that change a document's vectors (τ alone when nothing extends)."""
    if extension.method != "none":
        return {"extension": extension.model_dump(exclude={"query_tau"})}
    return {"tau": extension.tau} if extension.tau != 1.0 else {}


def _window_key(
    encoder_id: str, extension: ExtensionConfig, span: tuple[int, int], window: int, sha: str
) -> str:
    """What decides one plain window's raw vector: the encoder, the extension acting on it, the span,
    the text."""
    recipe = {"raw": 3, "window": list(span), **_recipe_extension(_acting(extension, span, window))}
    return make_key(encoder=encoder_id, recipe=recipe, document=sha)


def _document_key(encoder_id: str, extension: ExtensionConfig, doc_plan: EmbedPlan, sha: str) -> str:
    """What decides a late or hybrid document's raw vectors (see :mod:`ragidx.embed.cache`)."""
    document = doc_plan.document
    recipe: dict[str, Any] = {
        "raw": 2,
        "mode": doc_plan.mode,
        "spans": doc_plan.spans,
        "passes": doc_plan.passes,
        "document": document.windows if isinstance(document, EmbedPlan) else document,
        **_recipe_extension(extension),
    }
    return make_key(encoder=encoder_id, recipe=recipe, document=sha)


def _embed_batch(
    encoder: Encoder,
    strategy: Strategy,
    fingerprint: str,
    batch: list[_Raw],
    found: dict[str, tuple[np.ndarray, np.ndarray | None]],
    cache: EmbeddingCache,
    stats: EmbedStats,
    progress: EvalProgress,
) -> None:
    if not batch:
        return
    started = time.perf_counter()
    raw = embed_raw(encoder, [(item.tokens, item.todo) for item in batch], on_batch=progress.advance)
    stats.embed_seconds += time.perf_counter() - started
    stats.tokens += sum(_plan_tokens(encoder, item.tokens, item.todo) for item in batch)
    for item, (chunks, document) in zip(batch, raw, strict=True):
        kind = "window" if item.per_window else "document"
        for key, rows in item.fill(chunks, document):
            cache.put(key, rows, model=fingerprint, strategy=strategy.spec, kind=kind, sha256=item.sha)
        found[item.doc_id] = item.vectors()
        stats.docs_embedded += 1
    cache.flush()


def embed_queries(
    encoder: Encoder,
    encoder_id: str,
    extension: ExtensionConfig,
    group: TaskGroup,
    cache: EmbeddingCache,
    stats: EmbedStats,
    progress: EvalProgress,
) -> np.ndarray:
    """Every query's vector (cached per encoder, query-side τ and text), in ``group.queries`` order."""
    tau = extension.tau_for("query")
    keys = [make_key(encoder=encoder_id, tau=tau, query=content_hash(t)) for t in group.queries.values()]
    vectors: list[np.ndarray | None] = [cache.get(k) for k in keys]
    missing = [i for i, v in enumerate(vectors) if v is None]
    texts = list(group.queries.values())
    progress.stage(f"{group.name}: embed queries", len(missing))
    if missing:
        started = time.perf_counter()
        fresh, _ = encoder.embed([texts[i] for i in missing], role="query")
        stats.embed_seconds += time.perf_counter() - started
        fingerprint = encoder.folder.fingerprint()
        for i, vector in zip(missing, fresh, strict=True):
            vectors[i] = vector[None, :]
            cache.put(
                keys[i],
                vector[None, :],
                model=fingerprint,
                strategy="query",
                kind="query",
                sha256=content_hash(texts[i]),
            )
        cache.flush()
        progress.advance(len(missing))
    stats.queries_embedded += len(missing)
    stats.queries_cached += len(texts) - len(missing)
    return np.concatenate([v for v in vectors if v is not None])
