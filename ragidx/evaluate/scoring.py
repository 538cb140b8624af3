"""Scoring an evaluation's documents against its queries: exact inner product over every vector.

A chunked document scores by its best chunk (max-sim, as ``ragidx.search.retriever`` does;
``+best:N``: the mean of its N best), fused with its document vector's cosine for a hybrid
(``ragidx.search.fusion``); :func:`search` keeps each query's top documents. ``hybrid:auto``
(:func:`tuned_search`) chooses the fusion weight by cross-validation over the queries
(:mod:`ragidx.evaluate.selection`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from ragidx.embed.config import HybridConfig
from ragidx.evaluate.selection import cross_validated_rankings
from ragidx.evaluate.tasks import TaskGroup
from ragidx.search.fusion import WEIGHTS, best_mean, fuse

if TYPE_CHECKING:
    from ragidx.evaluate.embedding import Embedded

__all__ = ["TOP_K", "scores", "search", "tuned_search"]

TOP_K = 100


def scores(
    queries: np.ndarray, docs: Embedded, hybrid: HybridConfig | None = None, best: int | None = None
) -> np.ndarray:
    """(n queries, n docs) document scores: best vector (max-sim; ``best``: the mean of the best N),
    fused with the document vector's cosine for a hybrid (``ragidx.search.fusion``)."""
    chunk, document = _levels(queries, docs, best)
    if hybrid is None or document is None:
        return chunk
    return fuse(document, chunk, hybrid)


def _levels(
    queries: np.ndarray, docs: Embedded, best: int | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """(n queries, n docs) best-vector cosines (``best``: the mean of the N best), and the document
    vectors' cosines (hybrid only)."""
    chunk = best_mean(queries @ docs.vectors.T, docs.starts, best)
    return chunk, None if docs.documents is None else queries @ docs.documents.T


def search(
    queries: np.ndarray,
    docs: Embedded,
    k: int = TOP_K,
    hybrid: HybridConfig | None = None,
    best: int | None = None,
) -> list[list[tuple[str, float]]]:
    """Top-k documents per query by :func:`scores`. Ties keep corpus order."""
    return _top(scores(queries, docs, hybrid, best), docs, k)


def _top(per_doc: np.ndarray, docs: Embedded, k: int = TOP_K) -> list[list[tuple[str, float]]]:
    order = np.argsort(-per_doc, axis=1, kind="stable")[:, : min(k, len(docs.doc_ids))]
    return [[(docs.doc_ids[j], float(per_doc[i, j])) for j in row] for i, row in enumerate(order)]


def tuned_search(
    queries: np.ndarray, docs: Embedded, group: TaskGroup, metric: str, seed: int, best: int | None = None
) -> tuple[list[list[tuple[str, float]]], dict[str, Any]]:
    """``hybrid:auto``: the weighted fusion with w chosen by 5-fold cross-validation over the group's
    queries (each query ranked with the weight chosen on the other folds), and the weights chosen."""
    chunk, document = _levels(queries, docs, best)
    assert document is not None

    @functools.cache
    def run_for(weight: float) -> list[list[tuple[str, float]]]:
        return _top(fuse(document, chunk, HybridConfig(fusion="weighted", weight=weight)), docs)

    out, folds, overall, _ = cross_validated_rankings(run_for, group, metric, WEIGHTS, seed)
    return out, {"fold_weights": [w for w, _ in folds], "weight_on_all_queries": overall}
