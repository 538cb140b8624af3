"""Choices on a development split (ragidx.evaluate.selection): the best mean, k-fold honesty."""

from __future__ import annotations

import numpy as np
import pytest

from ragidx.evaluate.selection import choose, cross_validate
from ragidx.search.fusion import WEIGHTS


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


def test_the_folds_are_fixed_by_the_seed() -> None:
    """hybrid:auto records name each fold's weight: the fold layout must not change between versions."""
    _, folds = cross_validate(lambda c: np.zeros(10), 10, ["x"], folds=5, seed=0)
    assert [held.tolist() for _, held in folds] == [[4, 6], [2, 7], [3, 5], [9, 0], [8, 1]]
    _, folds = cross_validate(lambda c: np.zeros(12), 12, ["x"], folds=5, seed=7)
    assert [len(held) for _, held in folds] == [3, 3, 2, 2, 2]
    _, folds = cross_validate(lambda c: np.zeros(3), 3, ["x"], folds=5, seed=0)
    assert len(folds) == 3  # never more folds than queries


def test_a_strategy_chosen_per_fold_by_hand() -> None:
    """Two candidates, ten queries, folds {4,6} {2,7} {3,5} {9,0} {8,1} (seed 0). A is right (1) on
    the first three folds' queries, B on the last two folds' and the first's: 6 each. Held out {4,6}:
    4 vs 4 on the rest, a tie, A (the earlier); {2,7}, {3,5}: A 4 vs B 6, B; {9,0}, {8,1}: A 6 vs B 4,
    A. Only {4,6} is then ranked by a candidate right on it: 2 of 10 against 6 for either."""
    a = np.array([0, 0, 1, 1, 1, 1, 1, 1, 0, 0], dtype=float)  # queries 2-7
    b = np.array([1, 1, 0, 0, 1, 0, 1, 0, 1, 1], dtype=float)  # queries 0, 1, 4, 6, 8, 9
    scores, folds = cross_validate({"A": a, "B": b}.__getitem__, 10, ["A", "B"], folds=5, seed=0)
    assert [(choice, held.tolist()) for choice, held in folds] == [
        ("A", [4, 6]),
        ("B", [2, 7]),
        ("B", [3, 5]),
        ("A", [9, 0]),
        ("A", [8, 1]),
    ]
    assert scores.tolist() == [0, 0, 0, 0, 1, 0, 1, 0, 0, 0]
    assert choose({"A": a, "B": b}.__getitem__, ["A", "B"]) == ("A", 0.6)
    assert choose({"A": a, "B": b}.__getitem__, ["B", "A"]) == ("B", 0.6)  # the earlier wins ties


def test_ties_go_to_the_choice_nearest_the_default() -> None:
    """A saturated metric (every weight from 0.35 up finds every passkey) keeps the default weight,
    not the smallest tied weight; the best mean still wins over the prior."""
    plateau = lambda w: np.array([1.0 if w >= 0.35 else 0.5])  # noqa: E731
    assert choose(plateau, WEIGHTS)[0] == 0.35  # no prior: the earliest of the tied
    assert choose(plateau, WEIGHTS, prior=lambda w: abs(w - 0.7))[0] == 0.7
    assert choose(plateau, WEIGHTS, prior=lambda w: abs(w - 0.2))[0] == 0.35  # 0.2 is not among the best
    chosen = cross_validate(lambda w: np.full(10, plateau(w)[0]), 10, WEIGHTS, prior=lambda w: abs(w - 0.7))
    assert {choice for choice, _ in chosen[1]} == {0.7}
