"""Document scores from vector scores: a chunked document's best chunk(s), fused with its
whole-document cosine in a hybrid index.

:func:`best_mean` scores a document by its best chunk (max-sim) or by the mean of its N best
chunks (``[long_doc] best_chunks``, strategy ``+best:N``): one strong passage, or evidence spread
over a few.

A hybrid index (``[long_doc] hybrid``, see ``ragidx.embed.plan``) holds one document-level vector per
document beside its chunk vectors. For one query and a set of candidate documents,
:func:`fuse` combines the two score columns as :class:`~ragidx.embed.config.HybridConfig` says:

* ``weighted`` — ``w · doc + (1 − w) · chunk`` (w = 1: the document ranking, w = 0: max-sim);
* ``rrf`` — reciprocal-rank fusion, ``1 / (k + rank_doc) + 1 / (k + rank_chunk)`` with ranks
  1, 2, … over the candidates (ties keep candidate order), no parameter to tune.

The weight w is chosen on a development split among :data:`WEIGHTS` (``ragidx eval``'s
``hybrid:auto``, with :mod:`ragidx.evaluate.selection`). The retriever and ``ragidx eval`` both
score with these functions.

Search mode ``hybrid`` fuses the dense score of each candidate document (whatever the dense side
ranks by: max-sim, best-N mean, or the fused document/chunk score above) with its BM25 score
(``ragidx.index.lexical``), by :func:`fuse_lexical`:

* ``weighted`` — ``w · z(bm25) + (1 − w) · z(dense)``, each score z-normalised over the
  candidates (mean 0, standard deviation 1; a constant column is all 0): BM25 is unbounded and
  cosines are not, so raw scores cannot be mixed;
* ``rrf`` — ``1 / (k + rank_dense) + 1 / (k + rank_bm25)`` with competition ranks (equal scores
  share a rank), a document without a single query term taking no BM25 part (what LangChain's
  ``EnsembleRetriever`` computes).
"""

from __future__ import annotations

import numpy as np

from ragidx.embed.config import HybridConfig

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


def zscore(scores: np.ndarray) -> np.ndarray:
    """Scores standardised over the candidates (last axis); a constant column is all zero, and no
    candidates give no scores (without numpy's empty-slice warnings)."""
    if scores.shape[-1] == 0:
        return np.zeros(scores.shape, dtype=np.float64)
    std = scores.std(axis=-1, keepdims=True)
    centred = scores - scores.mean(axis=-1, keepdims=True)
    z: np.ndarray = np.divide(centred, std, out=np.zeros_like(centred, dtype=np.float64), where=std > 0)
    return z


def fuse_lexical(dense: np.ndarray, lexical: np.ndarray, weight: float | None, rrf_k: int = 60) -> np.ndarray:
    """Fused scores of candidates (last axis) from their dense and BM25 scores: the weighted sum of
    z-scores with the lexical ``weight``, or (``weight`` None) reciprocal-rank fusion."""
    dense, lexical = np.asarray(dense, dtype=np.float64), np.asarray(lexical, dtype=np.float64)
    if weight is not None:
        return weight * zscore(lexical) + (1.0 - weight) * zscore(dense)
    matched = lexical > 0
    return 1.0 / (rrf_k + tied_ranks(dense)) + np.where(matched, 1.0 / (rrf_k + tied_ranks(lexical)), 0.0)


def tied_ranks(scores: np.ndarray) -> np.ndarray:
    """1-based competition ranks of a 1-d score column: equal scores share the best rank, so the
    ranks do not depend on the candidates' order."""
    descending = -np.sort(scores)[::-1]
    return 1 + np.searchsorted(descending, -scores, side="left")


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
