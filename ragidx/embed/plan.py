"""The long-document planner: how a document longer than the model window becomes vectors.

Owns :func:`plan`, which turns a document's token count and a long-document policy
(:class:`~ragidx.embed.config.LongDocConfig`, saved in the index manifest) into an
:class:`EmbedPlan`: the token spans to embed and how their vectors combine. Nothing is ever cut
silently: every plan says its mode and how many tokens it embedded.

* ``whole`` — the document fits one window: one vector (whatever the policy);
* ``chunk`` — token windows of ``chunk_size`` with ``overlap``, the last one right-aligned to end at
  the document end; one vector per chunk; documents are scored by their best chunk (max-sim);
* ``pcw`` — LongEmbed's parallel context windows: window-sized chunks, no overlap, the last one
  shifted left to end at the document end, mean of the un-normalised chunk vectors, then L2;
* ``truncate`` — the first window only; explicit, and counted;
* ``extend`` — the whole document in one pass through a context-extended encoder (see
  ``ragidx.embed.extension``), up to the extension's target length L_t; a longer document is cut to L_t,
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
  retriever fuses the document cosine with the best chunk cosine (``ragidx.search.fusion``).

``max_tokens`` (LongEmbed's target length L_t) cuts a document before chunking; the cut is recorded.

Planning is arithmetic on token counts (numpy only, no model): :mod:`ragidx.embed.documents` runs
the plans through an encoder, :mod:`ragidx.embed.late_chunking` builds a late plan's passes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from ragidx.embed.config import PASS_OVERLAP, EmbedMode, LongDocConfig
from ragidx.embed.pooling import l2_normalize


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
    size, step = chunk_geometry(window, config)
    if config.policy == "pcw":
        return EmbedPlan("pcw", _windows(limit, size, step), n_tokens)
    return EmbedPlan("chunk", _windows(limit, size, step), n_tokens, vectors_per_doc=config.vectors_per_doc)


def chunk_geometry(window: int, config: LongDocConfig) -> tuple[int, int]:
    """(size, step) in content tokens of the windows of a ``chunk`` or ``pcw`` plan: pcw, whole
    windows side by side; chunk, ``chunk_size`` (at most a window) every ``size - overlap``."""
    if config.policy == "pcw":
        return window, window
    size = min(config.chunk_size or window, window)
    return size, size - min(config.overlap, size - 1)


def settled_spans(n_read: int, window: int, config: LongDocConfig, first: int = 0) -> list[tuple[int, int]]:
    """The ``chunk`` or ``pcw`` windows certain to open the plan of a document whose first
    ``n_read`` tokens are known, however long it turns out to be: once it is longer than one
    window, every window that ends before the tokens read (and before ``max_tokens``). Only the
    last window of a plan depends on the document's length, so these are a prefix of its spans
    (the streaming path embeds them while it reads). ``first``: leave out the first ``first`` of
    them (those already taken: computed, not listed, so reading a document costs O(its windows))."""
    limit = min(n_read, config.max_tokens or n_read)
    if limit <= window:
        return []
    size, step = chunk_geometry(window, config)
    regular = -(-(limit - size) // step)  # _windows' spans before its last: start + size < limit
    return [(start, start + size) for start in range(first * step, regular * step, step)]


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


def _windows(length: int, size: int, step: int) -> list[tuple[int, int]]:
    """Spans of ``size`` every ``step`` tokens; the last one ends exactly at ``length``."""
    spans: list[tuple[int, int]] = []
    start = 0
    while start + size < length:
        spans.append((start, start + size))
        start += step
    spans.append((max(length - size, 0), length))
    return spans
