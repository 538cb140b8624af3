"""Document scores from vector scores: a chunked document's best chunk(s), fused with its
whole-document cosine in a hybrid index.

:func:`best_mean` scores a document by its best chunk (max-sim) or by the mean of its N best
chunks (``[long_doc] best_chunks``, strategy ``+best:N``): one strong passage, or evidence spread
over a few.

A hybrid index (``[long_doc] hybrid``, see ``ragidx.longdoc``) holds one document-level vector per
document beside its chunk vectors. For one query and a set of candidate documents,
:func:`fuse` combines the two score columns as :class:`~ragidx.longdoc.HybridConfig` says:

* ``weighted`` — ``w · doc + (1 − w) · chunk`` (w = 1: the document ranking, w = 0: max-sim);
* ``rrf`` — reciprocal-rank fusion, ``1 / (k + rank_doc) + 1 / (k + rank_chunk)`` with ranks
  1, 2, … over the candidates (ties keep candidate order), no parameter to tune.

:func:`tune_weight` picks w on a development split: the weight with the best mean of a per-query
score, and :func:`cross_validate` reports that choice honestly, k-fold over queries (each fold
scored with the weight chosen on the others). The retriever and ``ragidx eval`` both score with
these functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ragidx.longdoc import HybridConfig

WEIGHTS: tuple[float, ...] = tuple(round(w, 2) for w in np.linspace(0, 1, 21))


def ranks(scores: np.ndarray) -> np.ndarray:
    """1-based ranks along the last axis, best first; ties keep their order."""
    order = np.argsort(-scores, axis=-1, kind="stable")
    out = np.empty_like(order)
    np.put_along_axis(out, order, np.arange(1, scores.shape[-1] + 1), axis=-1)
    return out


def fuse(document: np.ndarray, chunk: np.ndarray, config: HybridConfig) -> np.ndarray:
    """Fused scores of candidates (last axis) from their document and best-chunk cosines."""
    if config.fusion == "weighted":
        return config.weight * document + (1.0 - config.weight) * chunk
    return 1.0 / (config.rrf_k + ranks(document)) + 1.0 / (config.rrf_k + ranks(chunk))


def tune_weight(
    score: Callable[[float], np.ndarray], queries: Sequence[int] | None = None
) -> tuple[float, float]:
    """The weight of :data:`WEIGHTS` with the best mean per-query score (over ``queries``, default
    all); ``score(w)`` returns per-query scores. Ties go to the smaller weight. Returns (w, mean)."""
    best = (WEIGHTS[0], -np.inf)
    for weight in WEIGHTS:
        values = score(weight)
        mean = float(values.mean() if queries is None else values[np.asarray(queries)].mean())
        if mean > best[1] + 1e-12:
            best = (weight, mean)
    return best


def cross_validate(
    score: Callable[[float], np.ndarray], n_queries: int, folds: int = 5, seed: int = 0
) -> tuple[np.ndarray, list[tuple[float, np.ndarray]]]:
    """Per-query scores where each fold's queries are scored with the weight tuned on the other
    folds (queries shuffled with ``seed`` into ``folds`` folds), and each fold's (weight, query
    indices)."""
    cache: dict[float, np.ndarray] = {}

    def cached(weight: float) -> np.ndarray:
        if weight not in cache:
            cache[weight] = score(weight)
        return cache[weight]

    order = np.random.default_rng(seed).permutation(n_queries)
    parts = np.array_split(order, min(folds, n_queries))
    out = np.zeros(n_queries)
    chosen: list[tuple[float, np.ndarray]] = []
    for held in parts:
        rest = np.setdiff1d(order, held)
        weight, _ = tune_weight(cached, rest if len(rest) else held)
        out[held] = cached(weight)[held]
        chosen.append((weight, held))
    return out, chosen


def best_mean(scores: np.ndarray, starts: np.ndarray, best: int | None = None) -> np.ndarray:
    """Per document, the mean of its ``best`` highest scores (None or 1: the highest, max-sim; a
    document with fewer vectors: the mean of all of them). ``scores`` is (…, n vectors) with each
    document's vectors contiguous from ``starts`` (ascending, first 0); the result is (…, n docs)."""
    starts = np.asarray(starts, dtype=np.int64)
    if best is None or best == 1:
        return np.maximum.reduceat(scores, starts, axis=-1)
    ends = np.append(starts[1:], scores.shape[-1])
    out = np.empty((*scores.shape[:-1], len(starts)), dtype=np.float64)
    for doc, (lo, hi) in enumerate(zip(starts, ends, strict=True)):
        segment = scores[..., lo:hi]
        if hi - lo > best:
            segment = np.partition(segment, hi - lo - best, axis=-1)[..., hi - lo - best :]
        out[..., doc] = segment.mean(axis=-1)
    return out
