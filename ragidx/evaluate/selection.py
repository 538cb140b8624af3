"""Choosing a setting on a development split, and reporting that choice honestly.

A setting (a hybrid weight, a chunk size, a whole strategy) is chosen by its mean per-query score:
:func:`choose` picks the best choice on some queries, and :func:`cross_validate` scores every query
with the choice made *without* it, k-fold over the queries (each fold ranked by the choice made on
the other folds), so the reported number is not tuned on the queries it is measured on.
``hybrid:auto`` chooses its weight this way, and ``ragidx eval --select A,B,C`` a strategy.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

import numpy as np

C = TypeVar("C", bound=Hashable)


def choose(
    score: Callable[[C], np.ndarray], choices: Sequence[C], queries: Sequence[int] | np.ndarray | None = None
) -> tuple[C, float]:
    """The choice with the best mean per-query score over ``queries`` (default all); ``score(c)``
    returns per-query scores. Ties go to the earlier choice. Returns (choice, mean)."""
    if not choices:
        raise ValueError("nothing to choose from")
    best: tuple[C, float] = (choices[0], -np.inf)
    for choice in choices:
        values = score(choice)
        mean = float(values.mean() if queries is None else values[np.asarray(queries)].mean())
        if mean > best[1] + 1e-12:
            best = (choice, mean)
    return best


def cross_validate(
    score: Callable[[C], np.ndarray], n_queries: int, choices: Sequence[C], folds: int = 5, seed: int = 0
) -> tuple[np.ndarray, list[tuple[C, np.ndarray]]]:
    """Per-query scores where each fold's queries are scored with the choice made on the other
    folds (queries shuffled with ``seed`` into ``folds`` folds), and each fold's (choice, query
    indices). ``score`` is called once per choice."""
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
        choice, _ = choose(cached, choices, rest if len(rest) else held)
        out[held] = cached(choice)[held]
        chosen.append((choice, held))
    return out, chosen
