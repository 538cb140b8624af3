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
  as in LongEmbed, and the cut is recorded. Recorded as ``extend:<method>``.

``max_tokens`` (LongEmbed's target length L_t) cuts a document before chunking; the cut is recorded.

:func:`plan_tokens` plans a tokenized document for an encoder's window, and :func:`embed_plans`
embeds many planned documents in one length-sorted run and combines each one's vectors as its plan
says (ingestion and the LangChain embeddings both go through these two).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ragidx.extension.config import ExtensionConfig
from ragidx.pooling import l2_normalize

if TYPE_CHECKING:
    from ragidx.encoder import Encoder, Tokens

Policy = Literal["chunk", "pcw", "truncate", "extend"]
EmbedMode = Literal["whole", "chunk", "pcw", "truncate", "extend"]
POLICIES: tuple[str, ...] = ("chunk", "pcw", "truncate", "extend")


class LongDocConfig(BaseModel):
    """What to do with documents longer than the model window."""

    model_config = ConfigDict(extra="forbid")

    policy: Policy = Field("chunk", description="chunk | pcw | truncate | extend")
    chunk_size: int | None = Field(
        None, ge=16, description="content tokens per chunk (default: as many as fit a window)"
    )
    overlap: int = Field(32, ge=0, description="tokens shared by neighbouring chunks (chunk only)")
    max_tokens: int | None = Field(
        None, ge=16, description="cut documents to this many tokens first (LongEmbed's L_t)"
    )

    extension: ExtensionConfig = Field(
        default_factory=ExtensionConfig, description="context extension and TempScale (see ragidx.extension)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> LongDocConfig:
        if self.chunk_size is not None and self.overlap >= self.chunk_size:
            raise ValueError(f"overlap ({self.overlap}) must be smaller than chunk_size ({self.chunk_size})")
        if self.policy == "extend" and self.extension.method == "none":
            raise ValueError("policy 'extend' needs an extension method (extension.method = pi, ntk, …)")
        return self


@dataclass(frozen=True)
class EmbedPlan:
    """The token spans ``[start, end)`` to embed for one document, and how they combine."""

    mode: EmbedMode
    spans: list[tuple[int, int]]
    n_tokens: int

    @property
    def n_embedded(self) -> int:
        """Tokens the plan covers (the rest was cut by ``truncate`` or ``max_tokens``)."""
        return max(end for _, end in self.spans) if self.spans else 0

    @property
    def single_vector(self) -> bool:
        """True when the document ends up as one vector (chunks are averaged or there is one)."""
        return self.mode != "chunk"


def plan(n_tokens: int, window: int, config: LongDocConfig, extended_window: int | None = None) -> EmbedPlan:
    """Plan one document of ``n_tokens`` content tokens for windows of ``window`` content tokens
    (``extended_window``: content tokens of one extended pass, for the ``extend`` policy)."""
    if n_tokens <= 0:
        raise ValueError("cannot plan an empty document")
    if n_tokens <= window:
        return EmbedPlan("whole", [(0, n_tokens)], n_tokens)
    if config.policy == "truncate":
        return EmbedPlan("truncate", [(0, window)], n_tokens)
    limit = min(n_tokens, config.max_tokens or n_tokens)
    if config.policy == "extend":
        if extended_window is None:
            raise ValueError("the extend policy needs the extended window")
        return EmbedPlan("extend", [(0, min(limit, extended_window))], n_tokens)
    if limit <= window:
        mode: EmbedMode = "truncate"
        return EmbedPlan(mode, [(0, limit)], n_tokens)
    if config.policy == "pcw":
        return EmbedPlan("pcw", _windows(limit, window, step=window), n_tokens)
    size = min(config.chunk_size or window, window)
    overlap = min(config.overlap, size - 1)
    return EmbedPlan("chunk", _windows(limit, size, step=size - overlap), n_tokens)


def combine(doc_plan: EmbedPlan, vectors: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """A document's final, L2-normalised vectors from its windows' un-normalised ones (in plan
    order), and the span each covers: one vector (mean of the windows) unless the plan chunks."""
    spans = doc_plan.spans
    if doc_plan.single_vector:
        vectors = vectors.mean(axis=0, keepdims=True)  # pcw: mean of un-normalised chunks
        spans = [(0, doc_plan.n_embedded)]
    return l2_normalize(vectors), spans


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
    """Plan a tokenized document for ``encoder``'s window (and its extended window under ``extend``)."""
    extended = encoder.content_budget(tokens, extended=True) if config.policy == "extend" else None
    return plan(len(tokens), encoder.content_budget(tokens), config, extended)


def embed_plans(
    encoder: Encoder,
    planned: Sequence[tuple[Tokens, EmbedPlan]],
    on_batch: Callable[[int], None] | None = None,
) -> list[np.ndarray]:
    """Embed every window of the planned documents in one length-sorted run.

    Returns, per document, its L2-normalised vectors: one per chunk for ``chunk`` plans, else one
    (a ``pcw`` plan's chunk vectors are averaged un-normalised first, as in LongEmbed).
    """
    windows = [encoder.window(tokens, s, e) for tokens, doc_plan in planned for s, e in doc_plan.spans]
    raw = encoder.embed_windows(windows, normalize=False, on_batch=on_batch) if windows else None
    out: list[np.ndarray] = []
    at = 0
    for _, doc_plan in planned:
        assert raw is not None
        vectors, _ = combine(doc_plan, raw[at : at + len(doc_plan.spans)])
        at += len(doc_plan.spans)
        out.append(vectors)
    return out
