"""Hybrid fusion (ragidx.fusion): weighted sums, reciprocal-rank fusion, weight tuning, CV folds."""

from __future__ import annotations

import numpy as np
import pytest

from ragidx.fusion import WEIGHTS, best_mean, cross_validate, fuse, ranks, tune_weight
from ragidx.longdoc import HybridConfig

DOCUMENT = np.array([0.9, 0.2, 0.5, 0.7])
CHUNK = np.array([0.3, 0.8, 0.6, 0.1])


def test_weight_one_is_the_document_ordering_and_zero_the_chunk_ordering() -> None:
    one = fuse(DOCUMENT, CHUNK, HybridConfig(fusion="weighted", weight=1.0))
    zero = fuse(DOCUMENT, CHUNK, HybridConfig(fusion="weighted", weight=0.0))
    np.testing.assert_allclose(one, DOCUMENT)
    np.testing.assert_allclose(zero, CHUNK)
    assert np.argsort(-one).tolist() == [0, 3, 2, 1] and np.argsort(-zero).tolist() == [1, 2, 0, 3]
    half = fuse(DOCUMENT, CHUNK, HybridConfig(fusion="weighted", weight=0.25))
    np.testing.assert_allclose(half, [0.45, 0.65, 0.575, 0.25])


def test_rrf_matches_a_hand_computed_example() -> None:
    # document ranks: 1, 4, 3, 2; chunk ranks: 3, 1, 2, 4
    assert ranks(DOCUMENT).tolist() == [1, 4, 3, 2] and ranks(CHUNK).tolist() == [3, 1, 2, 4]
    fused = fuse(DOCUMENT, CHUNK, HybridConfig(fusion="rrf", rrf_k=60))
    expected = [1 / 61 + 1 / 63, 1 / 64 + 1 / 61, 1 / 63 + 1 / 62, 1 / 62 + 1 / 64]
    np.testing.assert_allclose(fused, expected)
    assert np.argsort(-fused, kind="stable").tolist() == [0, 1, 2, 3]  # 1/64 + 1/61 > 1/63 + 1/62
    small_k = fuse(DOCUMENT, CHUNK, HybridConfig(fusion="rrf", rrf_k=1))
    np.testing.assert_allclose(small_k, [1 / 2 + 1 / 4, 1 / 5 + 1 / 2, 1 / 4 + 1 / 3, 1 / 3 + 1 / 5])


def test_ranks_keep_candidate_order_on_ties_and_work_per_row() -> None:
    assert ranks(np.array([0.5, 0.7, 0.5, 0.7])).tolist() == [3, 1, 4, 2]
    batch = ranks(np.vstack([DOCUMENT, CHUNK]))
    assert batch.tolist() == [[1, 4, 3, 2], [3, 1, 2, 4]]


def test_tune_weight_picks_the_best_mean_and_prefers_the_smaller_weight_on_ties() -> None:
    assert tune_weight(lambda w: np.array([-((w - 0.3) ** 2), -((w - 0.3) ** 2)])) == (
        0.3,
        pytest.approx(0.0),
    )
    assert tune_weight(lambda w: np.ones(3))[0] == WEIGHTS[0] == 0.0
    # only the queries asked for count: query 0 wants w = 1, query 1 wants w = 0
    score = lambda w: np.array([w, 1 - w])  # noqa: E731
    assert tune_weight(score, [0])[0] == 1.0 and tune_weight(score, [1])[0] == 0.0


def test_cross_validate_folds_partition_the_queries_and_score_each_with_the_others_weight() -> None:
    n = 23
    prefers = np.where(np.arange(n) < 15, 0.2, 0.8)  # most queries like w = 0.2

    def score(weight: float) -> np.ndarray:
        return -np.abs(prefers - weight)

    scores, folds = cross_validate(score, n, folds=5, seed=3)
    held = np.concatenate([q for _, q in folds])
    assert len(folds) == 5 and sorted(held.tolist()) == list(range(n))  # a partition
    assert max(len(q) for _, q in folds) - min(len(q) for _, q in folds) <= 1
    for weight, queries in folds:
        rest = np.setdiff1d(np.arange(n), queries)
        assert weight == tune_weight(score, rest)[0]  # chosen without the held-out fold
        np.testing.assert_allclose(scores[queries], score(weight)[queries])
    again, _ = cross_validate(score, n, folds=5, seed=3)
    np.testing.assert_array_equal(scores, again)


def test_best_mean_is_the_mean_of_each_documents_top_n_scores() -> None:
    rng = np.random.default_rng(7)
    counts = [1, 2, 5, 3, 8]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    scores = rng.normal(size=(4, sum(counts)))
    for best in (None, 1, 2, 3, 10):
        got = best_mean(scores, starts, best)
        n = best or 1
        for q in range(4):
            for doc, (lo, count) in enumerate(zip(starts, counts, strict=True)):
                top = np.sort(scores[q, lo : lo + count])[::-1][:n]  # fewer than n: all of them
                assert got[q, doc] == pytest.approx(top.mean())
    assert best_mean(scores[0], starts, 2).shape == (5,)  # one query as a 1-d row
