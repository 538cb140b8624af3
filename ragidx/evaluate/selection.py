"""Choosing a setting on a development split, and reporting that choice honestly.

A setting (a hybrid weight, a chunk size, a whole strategy) is chosen by its mean per-query score:
:func:`choose` picks the best choice on some queries, and :func:`cross_validate` scores every query
with the choice made *without* it, k-fold over the queries (each fold ranked by the choice made on
the other folds), so the reported number is not tuned on the queries it is measured on.
:func:`cross_validated_rankings` does this for a task group's rankings, scored by an IR metric.
``hybrid:auto`` chooses its weight this way, and ``ragidx eval --select A,B,C`` a strategy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

import numpy as np

from ragidx.evaluate.metrics import per_query
from ragidx.evaluate.tasks import TaskGroup

C = TypeVar("C", bound=Hashable)


def choose(
    score: Callable[[C], np.ndarray],
    choices: Sequence[C],
    queries: Sequence[int] | np.ndarray | None = None,
    prior: Callable[[C], float] | None = None,
) -> tuple[C, float]:
    """The choice with the best mean per-query score over ``queries`` (default all); ``score(c)``
    returns per-query scores. Ties go to the choice with the smallest ``prior`` (how far it is
    from the default setting: where the queries cannot tell choices apart, keep closest to the
    default), then to the earlier choice. Returns (choice, mean)."""
    if not choices:
        raise ValueError("nothing to choose from")
    means = []
    for choice in choices:
        values = score(choice)
        means.append(float(values.mean() if queries is None else values[np.asarray(queries)].mean()))
    top = max(means)
    tied = [i for i, mean in enumerate(means) if mean >= top - 1e-12]
    best = min(tied, key=lambda i: (0.0 if prior is None else prior(choices[i]), i))
    return choices[best], means[best]


def cross_validate(
    score: Callable[[C], np.ndarray],
    n_queries: int,
    choices: Sequence[C],
    folds: int = 5,
    seed: int = 0,
    prior: Callable[[C], float] | None = None,
) -> tuple[np.ndarray, list[tuple[C, np.ndarray]]]:
    """Per-query scores where each fold's queries are scored with the choice made on the other
    folds (queries shuffled with ``seed`` into ``folds`` folds; ties broken by ``prior``, see
    :func:`choose`), and each fold's (choice, query indices). ``score`` is called once per choice."""
    cache: dict[C, np.ndarray] = {}

    def cached(choice: C) -> np.ndarray:
        if choice not in cache:
            cache[choice] = score(choice)
        return cache[choice]

    order = np.random.default_rng(seed).permutation(n_queries)
    parts = np.array_split(order, min(folds, n_queries))
    out = np.zeros(n_queries)
    chosen: list[tuple[C, np.ndarray]] = []
    for held in parts:
        rest = np.setdiff1d(order, held)
        choice, _ = choose(cached, choices, rest if len(rest) else held, prior)
        out[held] = cached(choice)[held]
        chosen.append((choice, held))
    return out, chosen


def cross_validated_rankings(
    rankings: Callable[[C], list[list[tuple[str, float]]]],
    group: TaskGroup,
    metric: str,
    choices: Sequence[C],
    seed: int,
    prior: Callable[[C], float] | None = None,
) -> tuple[list[list[tuple[str, float]]], list[tuple[C, np.ndarray]], C, Callable[[C], np.ndarray]]:
    """Each query of ``group`` ranked by the choice (a hybrid weight, a candidate strategy) with the
    best mean ``metric`` on the other folds of a 5-fold split (:func:`cross_validate`);
    ``rankings(c)`` gives every query's ranking under choice c, in ``group.queries`` order. Returns
    the composed rankings, each fold's (choice, query indices), the choice on all queries and the
    per-query scores of a choice."""
    qids = list(group.queries)

    @functools.cache
    def per_query_scores(choice: C) -> np.ndarray:
        return np.array(
            [
                per_query([d for d, _ in hits], group.qrels.get(q, {}))[metric]
                for q, hits in zip(qids, rankings(choice), strict=True)
            ]
        )

    _, folds = cross_validate(per_query_scores, len(qids), choices, seed=seed, prior=prior)
    out: list[list[tuple[str, float]]] = [[] for _ in qids]
    for choice, held in folds:
        for i in held:
            out[i] = rankings(choice)[i]
    overall, _ = choose(per_query_scores, choices, prior=prior)
    return out, folds, overall, per_query_scores
