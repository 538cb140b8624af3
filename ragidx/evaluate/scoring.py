"""Scoring an evaluation's documents against its queries: exact inner product over every vector,
and BM25.

The products run in numpy, or with ``device`` (the runner passes the encoder's CUDA device) in
torch on that device, in blocks of queries (at most ``SCORE_BLOCK_BYTES`` of scores at a time),
each document's best vector taken there too: the same scores up to the last bit of the summation
order (full float32, TF32 off), so the same rankings but where two documents' scores are that close.

A chunked document scores by its best chunk (max-sim, as ``ragidx.search.retriever`` does;
``+best:N``: the mean of its N best), fused with its document vector's cosine for a hybrid
(``ragidx.search.fusion``); :func:`search` keeps each query's top documents.

``bm25`` ranks by BM25 alone (:func:`bm25_rankings`: the documents with a score above zero, as a
lexical search returns them). ``+bm25:…`` fuses the dense document scores with BM25 as a hybrid
search does (:func:`fused_rankings`, the retriever's ``_with_lexical``): per query the candidates
are the union of the best ``max(k, 100)`` documents by the dense score and the best ``max(k, 100)``
by BM25 among those with a score above zero; each candidate's dense score and BM25 are fused by
:func:`~ragidx.search.fusion.fuse_lexical` (z-scores over the candidates, or RRF); equal fused
scores are ordered by document id; a query with no searchable word (only stop words) is ranked by
the dense scores alone.

:func:`rank` puts it together: ``hybrid:auto`` and ``bm25:auto`` choose their weight among
:data:`~ragidx.search.fusion.WEIGHTS` by 5-fold cross-validation over the queries
(:mod:`ragidx.evaluate.selection`; both at once: every pair of weights); where weights tie on
the metric (passkey's Acc@1 saturates), the one nearest the default weight is kept.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ragidx.embed.config import HybridConfig
from ragidx.evaluate.lexical import LexicalGroup
from ragidx.evaluate.selection import cross_validated_rankings
from ragidx.evaluate.tasks import TaskGroup
from ragidx.search.fusion import WEIGHTS, best_mean, fuse, fuse_lexical
from ragidx.search.retriever import HYBRID_CANDIDATES

if TYPE_CHECKING:
    from ragidx.evaluate.embedding import Embedded

__all__ = ["TOP_K", "LexicalFusion", "bm25_rankings", "fused_rankings", "rank", "scores", "search"]

TOP_K = 100
SCORE_BLOCK_BYTES = 256 << 20  # torch scoring: the (queries × vectors) float32 scores of one block
Ranking = list[tuple[str, float]]


def scores(
    queries: np.ndarray,
    docs: Embedded,
    hybrid: HybridConfig | None = None,
    best: int | None = None,
    device: str | None = None,
) -> np.ndarray:
    """(n queries, n docs) document scores: best vector (max-sim; ``best``: the mean of the best N),
    fused with the document vector's cosine for a hybrid (``ragidx.search.fusion``); ``device``:
    the products in torch there (see the module docstring)."""
    chunk, document = _levels(queries, docs, best, device)
    if hybrid is None or document is None:
        return chunk
    return fuse(document, chunk, hybrid)


def _levels(
    queries: np.ndarray, docs: Embedded, best: int | None = None, device: str | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """(n queries, n docs) best-vector cosines (``best``: the mean of the N best), and the document
    vectors' cosines (hybrid only); ``device``: computed in torch there."""
    if device is not None:
        return _levels_torch(queries, docs, best, device)
    chunk = best_mean(queries @ docs.vectors.T, docs.starts, best)
    return chunk, None if docs.documents is None else queries @ docs.documents.T


def _levels_torch(
    queries: np.ndarray, docs: Embedded, best: int | None, device: str
) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`_levels` with the products in torch on ``device``, a block of queries at a time (at
    most ``SCORE_BLOCK_BYTES`` of scores); max-sim per document reduced on the device, the mean of
    the best N (``best`` above 1) by :func:`best_mean` on the host from the block's scores."""
    import torch

    from ragidx.index.torch_search import ieee_float32

    where = torch.device(device)
    n_vectors, n_docs = len(docs.vectors), len(docs.starts)
    starts = np.asarray(docs.starts, dtype=np.int64)
    owner = np.repeat(np.arange(n_docs), np.diff(np.append(starts, n_vectors)))  # each vector's document
    max_sim = best is None or best == 1
    chunk = np.empty((len(queries), n_docs), dtype=np.float32 if max_sim else np.float64)
    batch = max(1, SCORE_BLOCK_BYTES // (4 * max(n_vectors, 1)))
    with ieee_float32(where), torch.inference_mode():
        vectors = torch.as_tensor(np.ascontiguousarray(docs.vectors, dtype=np.float32)).to(where)
        q = torch.as_tensor(np.ascontiguousarray(queries, dtype=np.float32)).to(where)
        index = torch.as_tensor(owner, device=where)
        for start in range(0, len(queries), batch):
            block = q[start : start + batch] @ vectors.T
            if max_sim:
                top = torch.full((len(block), n_docs), -torch.inf, device=where)
                top.scatter_reduce_(1, index.expand(len(block), -1), block, reduce="amax")
                chunk[start : start + batch] = top.cpu().numpy()
            else:
                chunk[start : start + batch] = best_mean(block.cpu().numpy(), starts, best)
        document = None
        if docs.documents is not None:
            documents = torch.as_tensor(np.ascontiguousarray(docs.documents, dtype=np.float32)).to(where)
            document = (q @ documents.T).cpu().numpy()
    return chunk, document


def search(
    queries: np.ndarray,
    docs: Embedded,
    k: int = TOP_K,
    hybrid: HybridConfig | None = None,
    best: int | None = None,
    device: str | None = None,
) -> list[list[tuple[str, float]]]:
    """Top-k documents per query by :func:`scores`. Ties keep corpus order."""
    return _top(scores(queries, docs, hybrid, best, device), docs, k)


def _top(per_doc: np.ndarray, docs: Embedded, k: int = TOP_K) -> list[list[tuple[str, float]]]:
    order = np.argsort(-per_doc, axis=1, kind="stable")[:, : min(k, len(docs.doc_ids))]
    return [[(docs.doc_ids[j], float(per_doc[i, j])) for j in row] for i, row in enumerate(order)]


def bm25_rankings(lexical: LexicalGroup, k: int = TOP_K) -> list[Ranking]:
    """Per query, the ``k`` best documents by BM25 with a score above zero (ties: corpus order), as
    :meth:`~ragidx.index.lexical.LexicalIndex.top` and a lexical search return them."""
    out: list[Ranking] = []
    for bm25 in lexical.scores:
        matched = np.flatnonzero(bm25 > 0)
        order = matched[np.argsort(-bm25[matched], kind="stable")][:k]
        out.append([(lexical.doc_ids[j], float(bm25[j])) for j in order])
    return out


def fused_rankings(
    dense: np.ndarray,
    lexical: LexicalGroup,
    weight: float | None,
    rrf_k: int = 60,
    k: int = TOP_K,
    fetch: int = HYBRID_CANDIDATES,
) -> list[Ranking]:
    """Per query, the ``k`` best documents of a hybrid search (see the module docstring): ``dense``
    (n queries, n docs) fused with BM25 over the union of each side's best ``max(k, fetch)``, with
    BM25's ``weight`` (None: reciprocal-rank fusion with constant ``rrf_k``)."""
    doc_ids = lexical.doc_ids
    ids = np.asarray(doc_ids)
    fetch = max(k, fetch)
    by_dense = np.argsort(-dense, axis=1, kind="stable")[:, :fetch]
    out: list[Ranking] = []
    for q, bm25 in enumerate(lexical.scores):
        if not lexical.searchable[q]:  # no word for BM25: the dense ranking alone
            out.append([(doc_ids[j], float(dense[q, j])) for j in by_dense[q, :k]])
            continue
        matched = np.flatnonzero(bm25 > 0)
        by_bm25 = matched[np.argsort(-bm25[matched], kind="stable")][:fetch]
        candidates = np.union1d(by_dense[q], by_bm25)
        fused = fuse_lexical(dense[q, candidates], bm25[candidates], weight, rrf_k)
        order = np.lexsort((ids[candidates], -fused))[:k]  # equal scores: by document id
        out.append([(doc_ids[candidates[i]], float(fused[i])) for i in order])
    return out


@dataclass(frozen=True)
class LexicalFusion:
    """How a ``+bm25:…`` strategy fuses BM25 into its dense scores."""

    scores: LexicalGroup
    weight: float | None  # BM25's weight; None: reciprocal-rank fusion
    tune: bool = False  # bm25:auto: the weight chosen by cross-validation among WEIGHTS
    rrf_k: int = 60


def rank(
    queries: np.ndarray,
    docs: Embedded,
    group: TaskGroup,
    metric: str,
    seed: int,
    hybrid: HybridConfig | None = None,
    best: int | None = None,
    tune_hybrid: bool = False,
    lexical: LexicalFusion | None = None,
    device: str | None = None,
) -> tuple[list[Ranking], dict[str, dict[str, Any]]]:
    """Every query's top documents for a dense strategy (``hybrid``: fused with the document vector,
    ``best``: best-N chunk means), fused with BM25 when ``lexical`` says so; and what
    cross-validation chose where a weight is tuned (``tune_hybrid``: ``hybrid:auto``'s document
    weight; ``lexical.tune``: ``bm25:auto``'s BM25 weight), as ``{"hybrid_tuning": {...},
    "lexical_tuning": {...}}``: each fold's weight and the weight on all queries. Both tuned: every
    pair of weights is a choice. ``device``: the products in torch there (the module docstring)."""
    if lexical is not None and lexical.scores.doc_ids != docs.doc_ids:
        raise ValueError("BM25 and dense scores of different documents")
    chunk, document = _levels(queries, docs, best, device)
    if tune_hybrid and document is None:
        raise ValueError("hybrid:auto needs document vectors")
    fusions: Sequence[HybridConfig | None] = (
        [HybridConfig(fusion="weighted", weight=w) for w in WEIGHTS] if tune_hybrid else [hybrid]
    )
    weights: Sequence[float | None] = (
        WEIGHTS if lexical is not None and lexical.tune else [None if lexical is None else lexical.weight]
    )

    @functools.lru_cache(maxsize=4)  # cross-validation asks for a few choices again and again
    def run_for(choice: tuple[int, int]) -> list[Ranking]:
        config = fusions[choice[0]]
        dense = chunk if config is None or document is None else fuse(document, chunk, config)
        if lexical is None:
            return _top(dense, docs)
        return fused_rankings(dense, lexical.scores, weights[choice[1]], lexical.rrf_k)

    choices = [(i, j) for i in range(len(fusions)) for j in range(len(weights))]
    if len(choices) == 1:
        return run_for(choices[0]), {}
    # ties (common where the metric saturates, as passkey's Acc@1) go to the weights nearest the
    # defaults: the document weight's, and the index's lexical weight (0.7)
    tune_lexical = len(weights) > 1
    lexical_default = lexical.weight if lexical is not None and lexical.weight is not None else 0.0
    near = (HybridConfig().weight, lexical_default)

    def prior(choice: tuple[int, int]) -> float:
        hybrid_part = abs(WEIGHTS[choice[0]] - near[0]) if tune_hybrid else 0.0
        return hybrid_part + (abs(WEIGHTS[choice[1]] - near[1]) if tune_lexical else 0.0)

    out, folds, overall, _ = cross_validated_rankings(run_for, group, metric, choices, seed, prior)
    tuning: dict[str, dict[str, Any]] = {}
    for name, axis, tuned in (("hybrid_tuning", 0, tune_hybrid), ("lexical_tuning", 1, tune_lexical)):
        if tuned:
            tuning[name] = {
                "fold_weights": [WEIGHTS[choice[axis]] for choice, _ in folds],
                "weight_on_all_queries": WEIGHTS[overall[axis]],
            }
    return out, tuning
