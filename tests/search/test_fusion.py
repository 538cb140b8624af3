"""Document scores (ragidx.search.fusion): weighted sums, reciprocal-rank fusion, best-N chunk means."""

from __future__ import annotations

import numpy as np
import pytest

from ragidx.embed.config import HybridConfig
from ragidx.search.fusion import best_mean, fuse, ranks

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


def test_zscores_of_no_candidates_are_empty_without_warnings() -> None:
    """A filter that leaves no candidates fuses nothing, silently (numpy warned of empty slices)."""
    import warnings

    import numpy as np

    from ragidx.search.fusion import fuse_lexical, zscore

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert zscore(np.zeros((2, 0))).shape == (2, 0)
        assert fuse_lexical(np.zeros(0), np.zeros(0), 0.7).shape == (0,)
