"""Long-document policies: how a document longer than the model window becomes vectors.

Owns :class:`LongDocConfig` (saved in the index manifest) and :func:`plan`, which turns a
document's token count into an :class:`EmbedPlan`: the token spans to embed and how their vectors
combine. Nothing is ever cut silently: every plan says its mode and how many tokens it embedded.

* ``whole`` — the document fits one window: one vector (whatever the policy);
* ``chunk`` — token windows of ``chunk_size`` with ``overlap``, the last one right-aligned to end at
  the document end; one vector per chunk; documents are scored by their best chunk (max-sim);
* ``pcw`` — LongEmbed's parallel context windows: window-sized chunks, no overlap, the last one
  shifted left to end at the document end, mean of the un-normalised chunk vectors, then L2;
* ``truncate`` — the first window only; explicit, and counted;
* ``extend`` — the whole document in one pass through a context-extended encoder (see
  ``ragidx.extension``), up to the extension's target length L_t; a longer document is cut to L_t,
  as in LongEmbed, and the cut is recorded. Recorded as ``extend:<method>``;
* ``late`` — late chunking: the encoder runs over the whole document (one pass up to the extended
  window, else overlapping *passes* of that window, each token's state taken from the pass where it
  sits furthest from an edge), then the token states of each chunk span are mean-pooled into a chunk
  vector, so every chunk carries the context around it; scored by max-sim like ``chunk``. The first
  chunk also pools the leading special tokens (and the prompt when the pooling includes it) and the
  last the trailing ones, so one chunk spanning the document is exactly whole-document mean pooling.

Two options shape the vectors of ``chunk`` and ``late``:

* ``vectors_per_doc`` (K) — a budget: consecutive chunks are split into K groups, and each group's
  un-normalised chunk vectors are averaged into one segment vector (fewer chunks than K: one each);
* ``hybrid`` — a document-level vector is made too (from the same late pass, or by a ``pcw``,
  ``extend`` or ``truncate`` plan of its own); it comes first, before the chunk vectors, and the
  retriever fuses the document cosine with the best chunk cosine (``ragidx.fusion``).

``max_tokens`` (LongEmbed's target length L_t) cuts a document before chunking; the cut is recorded.

:func:`plan_tokens` plans a tokenized document for an encoder's window, and :func:`embed_plans`
embeds many planned documents in one length-sorted run and combines each one's vectors as its plan
says (ingestion and the LangChain embeddings both go through these two).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ragidx.extension.config import ExtensionConfig
from ragidx.pooling import l2_normalize

if TYPE_CHECKING:
    from ragidx.encoder import Encoder, Tokens, Window

Policy = Literal["chunk", "pcw", "truncate", "extend", "late"]
EmbedMode = Literal["whole", "chunk", "pcw", "truncate", "extend", "late"]
POLICIES: tuple[str, ...] = ("chunk", "pcw", "truncate", "extend", "late")
DocumentSource = Literal["pass", "pcw", "extend", "truncate"]
LATE_CHUNK = 256  # default late-chunk size in tokens
PASS_OVERLAP = 4  # late passes overlap by a quarter of their window


class HybridConfig(BaseModel):
    """Hybrid scoring: a document-level vector beside the chunk vectors, fused at query time."""

    model_config = ConfigDict(extra="forbid")

    document: DocumentSource = Field(
        "pass",
        description="where the document vector comes from: pass (late chunking's own pass), pcw, "
        "extend or truncate",
    )
    fusion: Literal["weighted", "rrf"] = Field("rrf", description="weighted sum of cosines, or RRF")
    weight: float = Field(0.5, ge=0, le=1, description="weight of the document cosine (weighted)")
    rrf_k: int = Field(60, ge=1, description="RRF constant k: score = Σ 1 / (k + rank)")
    tuned_on: str | None = Field(None, description="where the weight was chosen (a dev split)")


class LongDocConfig(BaseModel):
    """What to do with documents longer than the model window."""

    model_config = ConfigDict(extra="forbid")

    policy: Policy = Field("chunk", description="chunk | pcw | truncate | extend | late")
    chunk_size: int | None = Field(
        None,
        ge=4,
        description="content tokens per chunk (default: chunk, as many as fit a window; late, 256)",
    )
    overlap: int = Field(
        32, ge=0, description="tokens shared by neighbouring chunks (chunk: default 32; late: default 0)"
    )
    max_tokens: int | None = Field(
        None, ge=16, description="cut documents to this many tokens first (LongEmbed's L_t)"
    )

    vectors_per_doc: int | None = Field(
        None, ge=1, description="chunk, late: at most K vectors per document (None: one per chunk)"
    )
    hybrid: HybridConfig | None = Field(None, description="chunk, late: add a document-level vector")
    best_chunks: int | None = Field(
        None,
        ge=1,
        description="chunk, late: a document scores as the mean cosine of its N best vectors (a "
        "document with fewer vectors: the mean of all of them); None or 1: its best vector (max-sim). "
        "Scoring only: the vectors do not change, and a query may ask for another N",
    )
    extension: ExtensionConfig = Field(
        default_factory=ExtensionConfig, description="context extension and TempScale (see ragidx.extension)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> LongDocConfig:
        if self.policy == "late" and "overlap" not in self.model_fields_set:
            self.overlap = 0  # late chunks carry their context already: no overlap unless asked
        if self.chunk_size is not None and self.overlap >= self.chunk_size:
            raise ValueError(f"overlap ({self.overlap}) must be smaller than chunk_size ({self.chunk_size})")
        if self.policy == "extend" and self.extension.method == "none":
            raise ValueError("policy 'extend' needs an extension method (extension.method = pi, ntk, …)")
        chunked = self.policy in ("chunk", "late")
        if (self.vectors_per_doc, self.hybrid, self.best_chunks) != (None, None, None) and not chunked:
            raise ValueError("vectors_per_doc, hybrid and best_chunks apply to the chunk and late policies")
        if self.hybrid is not None:
            if self.hybrid.document == "pass" and self.policy != "late":
                raise ValueError("hybrid document 'pass' needs the late policy (use pcw, extend or truncate)")
            if self.hybrid.document == "extend" and self.extension.method == "none":
                raise ValueError("hybrid document 'extend' needs an extension method")
        return self

    @property
    def late_chunk_size(self) -> int:
        return self.chunk_size or LATE_CHUNK

    def document_config(self) -> LongDocConfig | None:
        """The config of a hybrid index's document-level plan (None: no separate plan)."""
        if self.hybrid is None or self.hybrid.document == "pass":
            return None
        return LongDocConfig(
            policy=self.hybrid.document, max_tokens=self.max_tokens, extension=self.extension
        )

    def label(self, mode: str) -> str:
        """How a document planned in ``mode`` is recorded, e.g. ``extend:pi``, ``late+extend:ntk``."""
        if mode == "extend":
            return self.extension.label()
        if mode == "late" and self.extension.method != "none":
            return f"late+{self.extension.label()}"
        return mode


@dataclass(frozen=True)
class EmbedPlan:
    """The token spans ``[start, end)`` to embed for one document, and how they combine.

    ``spans`` are the windows embedded (``late``: the chunks pooled from ``passes``, the windows
    actually run). ``vectors_per_doc`` groups chunk vectors; ``document`` (hybrid) says how the
    document-level vector, the first row, is made: ``"pass"`` from the late pass itself, or a plan.
    """

    mode: EmbedMode
    spans: list[tuple[int, int]]
    n_tokens: int
    passes: tuple[tuple[int, int], ...] = ()
    vectors_per_doc: int | None = None
    document: EmbedPlan | Literal["pass"] | None = None

    @property
    def n_embedded(self) -> int:
        """Tokens the plan covers (the rest was cut by ``truncate`` or ``max_tokens``)."""
        ends = [end for _, end in self.spans]
        if isinstance(self.document, EmbedPlan):
            ends.append(self.document.n_embedded)
        return max(ends) if ends else 0

    @property
    def single_vector(self) -> bool:
        """True when the chunks end up as one vector (averaged, or there is one)."""
        return self.mode not in ("chunk", "late")

    @property
    def chunk_rows(self) -> list[tuple[int, int]]:
        """The span each chunk-level vector covers (after the vectors-per-doc budget)."""
        if self.single_vector:
            return [(0, max(end for _, end in self.spans))]
        bounds = _group_bounds(len(self.spans), self.vectors_per_doc)
        return [(self.spans[lo][0], self.spans[hi - 1][1]) for lo, hi in bounds]

    @property
    def rows(self) -> list[tuple[int, int]]:
        """The span of every vector the plan yields, in order (a hybrid's document vector first)."""
        chunk_rows = self.chunk_rows
        if self.document is None:
            return chunk_rows
        whole = self.document.n_embedded if isinstance(self.document, EmbedPlan) else chunk_rows[-1][1]
        return [(0, whole), *chunk_rows]

    @property
    def windows(self) -> list[tuple[int, int]]:
        """The content spans run through the encoder as plain windows (not late passes)."""
        own = [] if self.passes else list(self.spans)
        return own + (self.document.windows if isinstance(self.document, EmbedPlan) else [])


def plan(n_tokens: int, window: int, config: LongDocConfig, extended_window: int | None = None) -> EmbedPlan:
    """Plan one document of ``n_tokens`` content tokens for windows of ``window`` content tokens
    (``extended_window``: content tokens of one extended pass, for ``extend`` and ``late``)."""
    chunks = _plan_chunks(n_tokens, window, config, extended_window)
    if config.hybrid is None:
        return chunks
    if chunks.mode == "whole" or (config.hybrid.document == "pass" and chunks.passes):
        document: EmbedPlan | Literal["pass"] = "pass"  # the pass itself (whole: its one vector)
    else:
        sub = config.document_config()
        sub = sub or LongDocConfig(policy="pcw", max_tokens=config.max_tokens, extension=config.extension)
        document = _plan_chunks(n_tokens, window, sub, extended_window)
    return replace(chunks, document=document)


def _plan_chunks(n_tokens: int, window: int, config: LongDocConfig, extended_window: int | None) -> EmbedPlan:
    if n_tokens <= 0:
        raise ValueError("cannot plan an empty document")
    if config.policy == "late":
        return _plan_late(n_tokens, window, config, extended_window)
    # an explicit chunk size below the window: anything longer than one chunk is chunked
    fits = min(window, config.chunk_size) if config.policy == "chunk" and config.chunk_size else window
    if n_tokens <= fits:
        return EmbedPlan("whole", [(0, n_tokens)], n_tokens)
    if config.policy == "truncate":
        return EmbedPlan("truncate", [(0, window)], n_tokens)
    limit = min(n_tokens, config.max_tokens or n_tokens)
    if config.policy == "extend":
        if extended_window is None:
            raise ValueError("the extend policy needs the extended window")
        return EmbedPlan("extend", [(0, min(limit, extended_window))], n_tokens)
    if limit <= fits:
        mode: EmbedMode = "truncate"
        return EmbedPlan(mode, [(0, limit)], n_tokens)
    if config.policy == "pcw":
        return EmbedPlan("pcw", _windows(limit, window, step=window), n_tokens)
    size = min(config.chunk_size or window, window)
    overlap = min(config.overlap, size - 1)
    spans = _windows(limit, size, step=size - overlap)
    return EmbedPlan("chunk", spans, n_tokens, vectors_per_doc=config.vectors_per_doc)


def _plan_late(n_tokens: int, window: int, config: LongDocConfig, extended_window: int | None) -> EmbedPlan:
    """Late chunking: chunk spans, and the passes (whole windows) their token states come from."""
    if n_tokens <= min(window, config.late_chunk_size):  # one chunk in one window: plain pooling
        return EmbedPlan("whole", [(0, n_tokens)], n_tokens)
    limit = min(n_tokens, config.max_tokens or n_tokens)
    size = min(config.late_chunk_size, limit)
    spans = _windows(limit, size, step=size - min(config.overlap, size - 1))
    reach = max(window, extended_window or 0)
    passes = [(0, limit)] if limit <= reach else _windows(limit, reach, step=reach - reach // PASS_OVERLAP)
    return EmbedPlan("late", spans, n_tokens, tuple(passes), config.vectors_per_doc)


def pass_owners(passes: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The tokens each pass contributes: where passes overlap, the boundary is the middle of the
    overlap, so every token's state comes from the pass where it is furthest from an edge."""
    owned: list[tuple[int, int]] = []
    for i, (start, end) in enumerate(passes):
        lo = start if i == 0 else owned[-1][1]
        hi = end if i == len(passes) - 1 else (passes[i + 1][0] + end + 1) // 2
        owned.append((lo, max(lo, hi)))
    return owned


def _group_bounds(n: int, k: int | None) -> list[tuple[int, int]]:
    """``n`` consecutive chunks split into at most ``k`` groups as even as possible (None: one each)."""
    if k is None or k >= n:
        return [(i, i + 1) for i in range(n)]
    bounds = np.linspace(0, n, k + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds)]


def combine(doc_plan: EmbedPlan, vectors: np.ndarray, document: np.ndarray | None = None) -> np.ndarray:
    """A document's final, L2-normalised vectors (one per :attr:`EmbedPlan.rows`) from its chunks'
    or windows' un-normalised ones in plan order: one vector (their mean) unless the plan chunks;
    chunk vectors averaged per vectors-per-doc group; a hybrid's ``document`` vector (un-normalised;
    None: the one vector of a whole document) first."""
    if doc_plan.single_vector:
        rows = vectors.mean(axis=0, keepdims=True)  # pcw: mean of un-normalised chunks
    else:
        bounds = _group_bounds(len(vectors), doc_plan.vectors_per_doc)
        rows = np.stack([vectors[lo:hi].mean(axis=0) for lo, hi in bounds])
    if doc_plan.document is not None:
        rows = np.vstack([rows[:1] if document is None else document.reshape(1, -1), rows])
    return l2_normalize(rows)


@dataclass(frozen=True)
class LatePasses:
    """A late plan's encoder inputs: the pass windows, the input ranges of each to sum, and the
    vector each range adds to (chunk j, or -1 for the document vector of the pass)."""

    windows: list[Window]
    segments: list[list[tuple[int, int]]]
    targets: list[list[int]]

    def pool(
        self, encoder: Encoder, sums: Sequence[np.ndarray], n_chunks: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Un-normalised chunk vectors (n_chunks, dim) and the pass's document vector (dim,) from the
        segment sums :meth:`Encoder.embed_segments` returned for :attr:`windows`."""
        totals = np.zeros((n_chunks + 1, encoder.hidden_size), dtype=np.float64)
        counts = np.zeros(n_chunks + 1, dtype=np.int64)
        for window_sums, ranges, targets in zip(sums, self.segments, self.targets, strict=True):
            for total, (lo, hi), target in zip(window_sums, ranges, targets, strict=True):
                totals[target] += total
                counts[target] += hi - lo
        means = (totals / np.maximum(counts, 1)[:, None]).astype(np.float32)
        projected = encoder.project(means)
        return projected[:n_chunks], projected[n_chunks]


def late_passes(encoder: Encoder, tokens: Tokens, doc_plan: EmbedPlan) -> LatePasses:
    """The inputs that late-chunk ``doc_plan`` (see the module docstring for who owns which token)."""
    out = LatePasses([], [], [])
    last_chunk = len(doc_plan.spans) - 1
    owners = pass_owners(doc_plan.passes)
    for number, ((start, end), (own_lo, own_hi)) in enumerate(zip(doc_plan.passes, owners, strict=True)):
        window = encoder.window(tokens, start, end)
        shift = window.content_start - start  # content token t sits at input position t + shift
        ranges: list[tuple[int, int]] = []
        targets: list[int] = []
        for chunk, (lo, hi) in enumerate(doc_plan.spans):
            lo, hi = max(lo, own_lo), min(hi, own_hi)
            if hi > lo:
                ranges.append((lo + shift, hi + shift))
                targets.append(chunk)
        edges = [(own_lo + shift, own_hi + shift)]
        if number == 0 and encoder.pooling.include_prompt and window.content_start:
            edges.append((0, window.content_start))  # leading specials (and prompt): chunk 0
            ranges.append(edges[-1])
            targets.append(0)
        if number == len(doc_plan.passes) - 1 and len(window.input_ids) > end + shift:
            edges.append((end + shift, len(window.input_ids)))  # trailing specials: the last chunk
            ranges.append(edges[-1])
            targets.append(last_chunk)
        ranges += edges
        targets += [-1] * len(edges)
        out.windows.append(window)
        out.segments.append(ranges)
        out.targets.append(targets)
    return out


def _windows(length: int, size: int, step: int) -> list[tuple[int, int]]:
    """Spans of ``size`` every ``step`` tokens; the last one ends exactly at ``length``."""
    spans: list[tuple[int, int]] = []
    start = 0
    while start + size < length:
        spans.append((start, start + size))
        start += step
    spans.append((max(length - size, 0), length))
    return spans


def plan_tokens(encoder: Encoder, tokens: Tokens, config: LongDocConfig) -> EmbedPlan:
    """Plan a tokenized document for ``encoder``'s window and extended window."""
    return plan(
        len(tokens), encoder.content_budget(tokens), config, encoder.content_budget(tokens, extended=True)
    )


def embed_plans(
    encoder: Encoder,
    planned: Sequence[tuple[Tokens, EmbedPlan]],
    on_batch: Callable[[int], None] | None = None,
) -> list[np.ndarray]:
    """Embed the planned documents; per document, its L2-normalised vectors, one per
    :attr:`EmbedPlan.rows` (:func:`embed_raw`, then :func:`combine`)."""
    raw = embed_raw(encoder, planned, on_batch)
    return [combine(doc_plan, *vectors) for (_, doc_plan), vectors in zip(planned, raw, strict=True)]


def embed_raw(
    encoder: Encoder,
    planned: Sequence[tuple[Tokens, EmbedPlan]],
    on_batch: Callable[[int], None] | None = None,
) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """Embed the planned documents: their plain windows in one length-sorted run, their late passes
    in another. Returns, per document, the un-normalised vectors :func:`combine` takes: one per
    span (window or late chunk), and the hybrid document vector when the plan has its own
    (a late pass's, or a sub-plan's window mean; None otherwise)."""
    windows = [encoder.window(tokens, s, e) for tokens, doc_plan in planned for s, e in doc_plan.windows]
    raw = encoder.embed_windows(windows, normalize=False, on_batch=on_batch) if windows else None
    late = [late_passes(encoder, tokens, p) if p.passes else None for tokens, p in planned]
    pass_windows = [w for item in late if item is not None for w in item.windows]
    pass_segments = [r for item in late if item is not None for r in item.segments]
    sums = encoder.embed_segments(pass_windows, pass_segments, on_batch) if pass_windows else []
    out: list[tuple[np.ndarray, np.ndarray | None]] = []
    at = at_pass = 0
    for (_, doc_plan), item in zip(planned, late, strict=True):
        document: np.ndarray | None = None
        if item is not None:
            mine = sums[at_pass : at_pass + len(item.windows)]
            chunks, document = item.pool(encoder, mine, len(doc_plan.spans))
            at_pass += len(item.windows)
        else:
            assert raw is not None
            chunks = raw[at : at + len(doc_plan.spans)]
            at += len(doc_plan.spans)
        if isinstance(doc_plan.document, EmbedPlan):
            assert raw is not None
            n = len(doc_plan.document.windows)
            document = raw[at : at + n].mean(axis=0)
            at += n
        out.append((chunks, document if doc_plan.document is not None else None))
    return out
