"""Length-collapse figures on synthetic clustered vectors, length buckets, repetition lengths."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragidx.probe.collapse import buckets, centroid_distance, pairwise_cosine, repetition_lengths


def test_pairwise_cosine_and_centroid_distance_by_hand():
    # two tight clusters: e1 twice and e2 twice
    vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    # 6 pairs: 2 with cosine 1, 4 with cosine 0
    assert pairwise_cosine(vectors) == pytest.approx(2 / 6)
    # centroid (0.5, 0.5): every vector at distance sqrt(0.5)
    assert centroid_distance(vectors) == pytest.approx(math.sqrt(0.5))


def test_a_collapsed_cluster_is_tighter_than_a_spread_one():
    rng = np.random.default_rng(1)
    centre = np.eye(16)[0]
    spread = rng.normal(size=(20, 16))
    tight = centre + 0.05 * rng.normal(size=(20, 16))
    spread /= np.linalg.norm(spread, axis=1, keepdims=True)
    tight /= np.linalg.norm(tight, axis=1, keepdims=True)
    assert pairwise_cosine(tight) > 0.9 > 0.2 > pairwise_cosine(spread)
    assert centroid_distance(tight) < 0.2 < 0.8 < centroid_distance(spread)
    # the mean pairwise cosine of unit vectors is (n |c|² − 1) / (n − 1), c the centroid
    c = tight.mean(axis=0)
    assert pairwise_cosine(tight) == pytest.approx((20 * (c @ c) - 1) / 19)


def test_pairwise_cosine_needs_two_vectors():
    with pytest.raises(ValueError, match="two"):
        pairwise_cosine(np.ones((1, 3)))


def test_buckets_stop_at_the_reach():
    assert buckets(510) == [(0, 256), (256, 510)]
    assert buckets(2048) == [(0, 256), (256, 512), (512, 1024), (1024, 2048)]
    assert buckets(3000)[-1] == (2048, 3000)


def test_repetition_lengths_double_up_to_the_reach():
    assert repetition_lengths(62) == [1, 2, 4, 8, 16, 32]
    assert repetition_lengths(64) == [1, 2, 4, 8, 16, 32, 64]
