"""Sentence importance: how much each sentence's vector contributes to its document's vector.

The PB paper's regression: the L2-normalised document vector ``y`` (d values) as a linear
combination of its L2-normalised sentence vectors ``X`` (k × d), ordinary least squares without
intercept (numpy ``lstsq``); the coefficients are reported normalised to unit L2 norm, with the
train R² (sklearn's convention: ``1 − SS_res / SS_tot`` around the mean of ``y``). The coefficient
is related to the sentence's relative position (its first character / the document's length) by
Pearson r and p, pooled per bucket of sentence count (5–15, 15–25, …). Under no positional bias
every sentence weighs the same (``1/√k`` after normalisation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_SENTENCES = 5
BUCKET_WIDTH = 10


@dataclass(frozen=True)
class Fit:
    """One document's regression."""

    coefficients: np.ndarray  # unit L2 norm, one per sentence, in text order
    positions: np.ndarray  # relative start of each sentence in [0, 1)
    r2: float
    squared_error: float  # summed over the d dimensions


def regress(document: np.ndarray, sentences: np.ndarray, positions: np.ndarray) -> Fit:
    """OLS of ``document`` (d,) on the rows of ``sentences`` (k, d), no intercept; inputs are
    L2-normalised first."""
    y = document / np.linalg.norm(document)
    x = sentences / np.linalg.norm(sentences, axis=1, keepdims=True)
    beta, *_ = np.linalg.lstsq(x.T.astype(np.float64), y.astype(np.float64), rcond=None)
    residual = y - x.T @ beta
    total = float(((y - y.mean()) ** 2).sum())
    sse = float((residual**2).sum())
    return Fit(beta / np.linalg.norm(beta), np.asarray(positions, dtype=np.float64), 1 - sse / total, sse)


def relative_starts(sentences: list[str], separator: str = " ") -> np.ndarray:
    """Each sentence's first character / the length of the sentences joined by ``separator``."""
    total = sum(len(s) for s in sentences) + len(separator) * (len(sentences) - 1)
    starts = np.cumsum([0] + [len(s) + len(separator) for s in sentences[:-1]])
    return starts / total


def bucket_of(k: int) -> tuple[int, int]:
    """The sentence-count bucket ``[lo, hi)`` of a document with ``k ≥ 5`` sentences: 5–15, 15–25, …"""
    lo = MIN_SENTENCES + BUCKET_WIDTH * ((k - MIN_SENTENCES) // BUCKET_WIDTH)
    return lo, lo + BUCKET_WIDTH


def pearson(x: np.ndarray, y: np.ndarray) -> tuple[float | None, float | None]:
    """Pearson r and its two-sided p-value (``None`` when undefined: fewer than 3 points or a
    constant input)."""
    from scipy import stats

    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None, None
    result = stats.pearsonr(x, y)
    r, p = float(result.statistic), float(result.pvalue)
    return (r if math.isfinite(r) else None), (p if math.isfinite(p) else None)


def profile(fits: list[Fit], bins: int = 10) -> list[float | None]:
    """Mean relative weight ``coefficient · k / Σ coefficients`` (1 = the document's average sentence)
    per relative-position bin; documents whose coefficients do not sum to a positive number are left out."""
    sums = np.zeros(bins)
    counts = np.zeros(bins)
    for fit in fits:
        total = float(fit.coefficients.sum())
        if total <= 0:
            continue
        at = np.minimum((fit.positions * bins).astype(int), bins - 1)
        np.add.at(sums, at, fit.coefficients * len(fit.coefficients) / total)
        np.add.at(counts, at, 1)
    return [float(s / c) if c else None for s, c in zip(sums, counts, strict=True)]
