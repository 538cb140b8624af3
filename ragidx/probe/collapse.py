"""``ragidx probe collapse``: do long documents crowd together? (Length Collapse, spec §5)

Texts are grouped by token length into buckets (0–256, 256–512, 512–1k, 1–2k, …, up to what the
strategy reads). A text contributes to every bucket it is long enough for: its prefix cut to a
length drawn (seeded, per text and bucket) inside the bucket. Per bucket: the mean pairwise cosine
of the texts' vectors and their mean Euclidean distance to the centroid. Collapse shows as pairwise
cosine rising (and centroid distance falling) with length; TempScale (τ < 1) should narrow the gap
between the longest and the shortest bucket. The paper's repetition demo: cosine between one word
repeated n times and another word repeated n times, as n grows.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable

import numpy as np

from ragidx.errors import InputError
from ragidx.probe.embedding import ProbeEncoder
from ragidx.probe.report import Bucket, CollapseResult, TauRow
from ragidx.probe.texts import Text
from ragidx.strategy import Strategy

EDGES = (0, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
MIN_BUCKET_TOKENS = 16


def pairwise_cosine(vectors: np.ndarray) -> float:
    """Mean cosine over all pairs i < j of L2-normalised rows."""
    n = len(vectors)
    if n < 2:
        raise ValueError("pairwise cosine needs at least two vectors")
    gram = vectors @ vectors.T
    return float((gram.sum() - np.trace(gram)) / (n * (n - 1)))


def centroid_distance(vectors: np.ndarray) -> float:
    """Mean Euclidean distance of the rows to their mean."""
    return float(np.linalg.norm(vectors - vectors.mean(axis=0), axis=1).mean())


def buckets(reach: int, edges: tuple[int, ...] = EDGES) -> list[tuple[int, int]]:
    """Length buckets ``[lo, hi)`` below ``reach`` (the last one ends at ``reach``)."""
    return [(lo, min(hi, reach)) for lo, hi in itertools.pairwise(edges) if lo < reach]


def bucket_texts(
    encoder: ProbeEncoder,
    texts: list[Text],
    edges: tuple[int, ...] = EDGES,
    seed: int = 0,
    source: str = "texts",
) -> dict[tuple[int, int], list[str]]:
    """Per bucket, the texts' prefixes cut to a seeded length inside it (buckets with fewer than two
    texts left out); raises :class:`InputError` when no bucket has two."""
    lengths = {t.text_id: len(encoder.tokens(t.text)) for t in texts}
    grouped: dict[tuple[int, int], list[str]] = {}
    for lo, hi in buckets(encoder.reach, edges):
        for item in texts:
            top = min(hi, lengths[item.text_id])
            bottom = max(lo + 1, MIN_BUCKET_TOKENS)
            if top < bottom:
                continue
            length = random.Random(f"{seed}:{item.text_id}:{lo}").randint(bottom, top)
            grouped.setdefault((lo, hi), []).append(encoder.cut(item.text, length))
    kept = {b: group for b, group in grouped.items() if len(group) >= 2}
    if not kept:
        raise InputError(
            f"{source}: no length bucket holds two texts of at least {MIN_BUCKET_TOKENS} tokens; "
            "give more or longer texts"
        )
    return kept


def repetition_lengths(reach: int) -> list[int]:
    """n = 1, 2, 4, … while n repetitions fit the strategy's reach."""
    out = [1]
    while out[-1] * 2 <= reach:
        out.append(out[-1] * 2)
    return out


def probe_collapse(
    strategy: Strategy,
    encoders: Callable[[Strategy], ProbeEncoder],
    taus: list[float],
    texts: list[Text],
    words: tuple[str, str] = ("dog", "cat"),
    edges: tuple[int, ...] = EDGES,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
    source: str = "texts",
) -> CollapseResult:
    """Run the probe for ``strategy`` at every τ (``encoders`` loads the encoder of a strategy);
    ``progress`` is called with 1 after each τ."""
    if not taus:
        raise ValueError("give at least one τ")
    started = time.perf_counter()
    rows: list[TauRow] = []
    reach = 0
    lengths: list[int] = []
    for tau in taus:
        encoder = encoders(strategy.with_tau(tau))
        reach = encoder.reach
        grouped = bucket_texts(encoder, texts, edges, seed, source)
        lengths = repetition_lengths(reach)
        repeated = [(f"{words[0]} " * n).strip() for n in lengths] + [
            (f"{words[1]} " * n).strip() for n in lengths
        ]
        flat = [t for group in grouped.values() for t in group]
        vectors = encoder.embed([*flat, *repeated])
        found: list[Bucket] = []
        at = 0
        for (lo, hi), group in grouped.items():
            block = vectors[at : at + len(group)]
            at += len(group)
            found.append(
                Bucket(
                    lo=lo,
                    hi=hi,
                    n_texts=len(group),
                    mean_tokens=float(np.mean([len(encoder.tokens(t)) for t in group])),
                    pairwise_cosine=pairwise_cosine(block),
                    centroid_distance=centroid_distance(block),
                )
            )
        a, b = vectors[at : at + len(lengths)], vectors[at + len(lengths) :]
        rows.append(
            TauRow(
                tau=tau,
                buckets=found,
                gap=found[-1].pairwise_cosine - found[0].pairwise_cosine if len(found) > 1 else None,
                repetition=[float(x @ y) for x, y in zip(a, b, strict=True)],
            )
        )
        if progress is not None:
            progress(1)
    return CollapseResult(
        strategy=strategy.spec,
        reach=reach,
        repetition_n=lengths,
        taus=rows,
        seconds=time.perf_counter() - started,
    )
