"""The sentence-importance regression recovers known coefficients; its statistics are right."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragidx.probe.importance import Fit, bucket_of, pearson, profile, regress, relative_starts


def test_regression_recovers_known_coefficients():
    rng = np.random.default_rng(0)
    sentences = rng.normal(size=(8, 64))
    sentences /= np.linalg.norm(sentences, axis=1, keepdims=True)
    beta = np.array([0.8, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05])
    document = 3.0 * (beta @ sentences)  # any scale: the document is normalised first
    fit = regress(document, sentences * 2.0, np.linspace(0, 0.9, 8))
    np.testing.assert_allclose(fit.coefficients, beta / np.linalg.norm(beta), atol=1e-9)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.squared_error == pytest.approx(0.0, abs=1e-20)


def test_r2_is_explained_variance_around_the_mean():
    x = np.array([[1.0, 0.0, 0.0, 0.0]])  # one sentence: only the first dimension can be explained
    y = np.array([0.6, 0.8, 0.0, 0.0])
    fit = regress(y, x, np.array([0.0]))
    # beta = 0.6, residual (0, 0.8, 0, 0); y mean 0.35
    total = sum((v - 0.35) ** 2 for v in y)
    assert fit.r2 == pytest.approx(1 - 0.64 / total)
    assert fit.squared_error == pytest.approx(0.64)
    assert fit.coefficients.tolist() == [1.0]


def test_relative_starts_are_character_offsets_over_the_joined_length():
    starts = relative_starts(["ab.", "c.", "defg."])  # "ab. c. defg." is 12 characters
    np.testing.assert_allclose(starts, [0 / 12, 4 / 12, 7 / 12])


@pytest.mark.parametrize(("k", "bucket"), [(5, (5, 15)), (14, (5, 15)), (15, (15, 25)), (64, (55, 65))])
def test_sentence_count_buckets(k, bucket):
    assert bucket_of(k) == bucket


def test_pearson_matches_hand_computation_and_is_none_when_undefined():
    x = np.array([0.0, 0.25, 0.5, 0.75])
    y = np.array([0.9, 0.5, 0.6, 0.1])
    xc, yc = x - x.mean(), y - y.mean()
    r, p = pearson(x, y)
    assert r == pytest.approx(float((xc @ yc) / math.sqrt((xc @ xc) * (yc @ yc))))
    assert 0 < p < 1
    assert pearson(x, np.ones(4)) == (None, None)
    assert pearson(x[:2], y[:2]) == (None, None)


def test_profile_of_even_weights_is_one_everywhere():
    fits = [Fit(np.full(k, 1 / math.sqrt(k)), relative_starts(["s."] * k), 1.0, 0.0) for k in (5, 10, 20)]
    assert profile(fits, bins=5) == pytest.approx([1.0] * 5)
    first_heavy = Fit(np.array([0.8, 0.6]), np.array([0.0, 0.5]), 1.0, 0.0)
    assert profile([first_heavy], bins=2) == pytest.approx([0.8 * 2 / 1.4, 0.6 * 2 / 1.4])
    negative = Fit(np.array([-0.8, 0.6]), np.array([0.0, 0.5]), 1.0, 0.0)
    assert profile([negative], bins=2) == [None, None]
