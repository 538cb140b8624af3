"""Embed documents: plan each tokenized document for an encoder, run every plan's windows (and late
passes) in length-sorted batches, and combine each document's vectors as its plan says.

:func:`plan_tokens` plans one tokenized document for an encoder's window and extended window;
:func:`embed_plans` embeds many planned documents and returns their final vectors (ingestion, the
LangChain embeddings and the streaming path all go through these); :func:`embed_raw` returns the
un-normalised vectors (the evaluation's embedding cache stores those).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ragidx.embed.config import LongDocConfig
from ragidx.embed.late_chunking import late_passes
from ragidx.embed.plan import EmbedPlan, combine, plan

if TYPE_CHECKING:
    from ragidx.embed.encoder import Encoder, Tokens


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
