"""Choices on a development split (ragidx.evaluate.selection): the best mean, k-fold honesty."""

from __future__ import annotations

import numpy as np
import pytest

from ragidx.evaluate.selection import choose, cross_validate
from ragidx.fusion import WEIGHTS


def test_choose_picks_the_best_mean_and_prefers_the_earlier_choice_on_ties() -> None:
    assert choose(lambda w: np.array([-((w - 0.3) ** 2), -((w - 0.3) ** 2)]), WEIGHTS) == (
        0.3,
        pytest.approx(0.0),
    )
    assert choose(lambda w: np.ones(3), WEIGHTS)[0] == WEIGHTS[0] == 0.0
    # only the queries asked for count: query 0 wants w = 1, query 1 wants w = 0
    score = lambda w: np.array([w, 1 - w])  # noqa: E731
    assert choose(score, WEIGHTS, [0])[0] == 1.0 and choose(score, WEIGHTS, [1])[0] == 0.0
    assert choose(lambda s: np.array([len(s)]), ["chunk:128", "pcw"]) == ("chunk:128", 9.0)
    with pytest.raises(ValueError, match="nothing to choose"):
        choose(lambda c: np.zeros(1), [])


def test_cross_validate_folds_partition_the_queries_and_score_each_with_the_others_choice() -> None:
    n = 23
    prefers = np.where(np.arange(n) < 15, 0.2, 0.8)  # most queries like w = 0.2
    calls: list[float] = []

    def score(weight: float) -> np.ndarray:
        calls.append(weight)
        return -np.abs(prefers - weight)

    scores, folds = cross_validate(score, n, WEIGHTS, folds=5, seed=3)
    assert sorted(calls) == sorted(WEIGHTS)  # each choice scored once
    held = np.concatenate([q for _, q in folds])
    assert len(folds) == 5 and sorted(held.tolist()) == list(range(n))  # a partition
    assert max(len(q) for _, q in folds) - min(len(q) for _, q in folds) <= 1
    for weight, queries in folds:
        rest = np.setdiff1d(np.arange(n), queries)
        assert weight == choose(score, WEIGHTS, rest)[0]  # chosen without the held-out fold
        np.testing.assert_allclose(scores[queries], score(weight)[queries])
    again, _ = cross_validate(score, n, WEIGHTS, folds=5, seed=3)
    np.testing.assert_array_equal(scores, again)


def test_a_strategy_chosen_per_fold_by_hand() -> None:
    """Two candidates, ten queries: A wins queries 0-5 by 1, B wins 6-9 by 3. With folds {0..4} and
    {5..9}, fold 1 is held out while B leads the rest (6-9: +12 vs 5: +1), and fold 2 while A leads
    (0-4: +5 vs nothing)."""
    per_query = {
        "A": np.array([1.0] * 6 + [0.0] * 4),
        "B": np.array([0.0] * 6 + [3.0] * 4),
    }
    order = np.random.default_rng(0).permutation(10)
    first = set(np.array_split(order, 2)[0].tolist())
    scores, folds = cross_validate(per_query.__getitem__, 10, ["A", "B"], folds=2, seed=0)
    for choice, held in folds:
        rest = [q for q in range(10) if q not in set(held.tolist())]
        means = {c: per_query[c][rest].mean() for c in ("A", "B")}
        assert choice == max(means, key=lambda c: (means[c], c == "A"))
        np.testing.assert_array_equal(scores[held], per_query[choice][held])
    assert {tuple(sorted(h.tolist())) for _, h in folds} == {
        tuple(sorted(first)),
        tuple(sorted(set(range(10)) - first)),
    }
