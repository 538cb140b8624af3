"""``ragidx probe position``: where does an encoder look inside a document? (PB paper, spec §6)

For each document (cut to what the strategy reads): embed it, every insertion and removal ablation
(:mod:`ragidx.probe.ablation`) and score each by cosine(original, altered); then split it into
sentences, embed each alone, and regress the document vector on them
(:mod:`ragidx.probe.importance`), once in the original order and once shuffled (the control: a bias
that survives shuffling belongs to the model, not to the texts). The headline is the begin-vs-end
drop ``(sim_end − sim_begin) / sim_end`` of the mean cosines.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ragidx.errors import InputError
from ragidx.probe.ablation import INSERT_SIZES, POSITIONS, REMOVE_SIZES, AblationKind, ablations
from ragidx.probe.embedding import ProbeEncoder
from ragidx.probe.importance import (
    MIN_SENTENCES,
    Fit,
    bucket_of,
    pearson,
    profile,
    regress,
    relative_starts,
)
from ragidx.probe.report import BucketFit, Condition, Drop, Importance, PositionResult
from ragidx.probe.texts import Text, filler, join_sentences, shuffle_sentences, split_sentences

MIN_TOKENS = 20  # the 5 % conditions change at least one token


@dataclass(frozen=True)
class PositionSettings:
    insert_sizes: tuple[float, ...] = INSERT_SIZES
    remove_sizes: tuple[float, ...] = REMOVE_SIZES
    positions: tuple[float, ...] = POSITIONS
    regression: bool = True
    seed: int = 0


def usable(
    texts: list[Text], encoder: ProbeEncoder, settings: PositionSettings, source: str = "texts"
) -> list[Text]:
    """The texts long enough for the ablations (``MIN_TOKENS`` after the insertion cut); raises
    :class:`InputError` naming the shortfall when there are none."""
    base = insert_base(encoder, settings)
    kept = [t for t in texts if len(encoder.tokens(encoder.cut(t.text, base))) >= MIN_TOKENS]
    if not kept:
        raise InputError(
            f"{source}: no text has {MIN_TOKENS} tokens (the shortest the ablations can cut into 5 % pieces "
            f"after the {insert_base(encoder, settings)}-token insertion cut); give longer texts"
        )
    return kept


def insert_base(encoder: ProbeEncoder, settings: PositionSettings) -> int:
    """Tokens a document keeps for insertion so that the largest insertion still fits the reach."""
    return math.floor(encoder.reach / (1 + max(settings.insert_sizes, default=0)))


def probe_position(
    encoder: ProbeEncoder,
    texts: list[Text],
    settings: PositionSettings,
    progress: Callable[[int], None] | None = None,
) -> PositionResult:
    """Run the probe for one strategy over ``texts`` (see the module docstring); ``progress`` is
    called with 1 after each document."""
    started = time.perf_counter()
    base = insert_base(encoder, settings)
    longest = max(len(encoder.tokens(t.text)) for t in texts)
    needle = filler(longest + 16, seed=settings.seed)
    needle_tokens = encoder.tokens(needle)
    scores: dict[tuple[AblationKind, float, float], list[tuple[float, int]]] = {}
    fits: list[Fit] = []
    shuffled: list[Fit] = []
    for index, item in enumerate(texts):
        cuts: tuple[tuple[str, AblationKind], ...] = (
            (encoder.cut(item.text, base), "insert"),
            (encoder.cut(item.text, encoder.reach), "remove"),
        )
        for text, which in cuts:
            tokens = encoder.tokens(text)
            altered = ablations(
                text,
                tokens,
                needle,
                needle_tokens,
                settings.insert_sizes if which == "insert" else (),
                settings.remove_sizes if which == "remove" else (),
                settings.positions,
            )
            vectors = encoder.embed([text, *(a.text for a in altered)])
            for ablation, vector in zip(altered, vectors[1:], strict=True):
                key = (ablation.kind, ablation.size, ablation.position)
                scores.setdefault(key, []).append((float(vector @ vectors[0]), ablation.changed_tokens))
        if settings.regression:
            sentences = split_sentences(encoder.cut(item.text, encoder.reach))
            if len(sentences) >= MIN_SENTENCES:
                order, mixed = shuffle_sentences(sentences, f"{settings.seed}:{index}")
                vectors = encoder.embed([join_sentences(sentences), join_sentences(mixed), *sentences])
                fits.append(regress(vectors[0], vectors[2:], relative_starts(sentences)))
                shuffled.append(regress(vectors[1], vectors[2:][order], relative_starts(mixed)))
        if progress is not None:
            progress(1)
    conditions = [
        Condition(
            kind=kind,
            size=size,
            position=position,
            n=len(values),
            mean=float(np.mean([v for v, _ in values])),
            median=float(np.median([v for v, _ in values])),
            mean_changed_tokens=float(np.mean([c for _, c in values])),
        )
        for (kind, size, position), values in scores.items()
    ]
    return PositionResult(
        strategy=encoder.strategy.spec,
        reach=encoder.reach,
        insert_base_tokens=base,
        insertion=[c for c in conditions if c.kind == "insert"],
        removal=[c for c in conditions if c.kind == "remove"],
        drops=drops(conditions),
        importance=importance(fits, shuffled) if fits else None,
        seconds=time.perf_counter() - started,
    )


def drops(conditions: list[Condition]) -> list[Drop]:
    """The begin-vs-end drop of every (kind, size) measured at both position 0 and position 1."""
    by_key = {(c.kind, c.size, c.position): c.mean for c in conditions}
    out: list[Drop] = []
    for kind, size in sorted({(c.kind, c.size) for c in conditions}):
        begin, end = by_key.get((kind, size, 0.0)), by_key.get((kind, size, 1.0))
        if begin is not None and end is not None:
            out.append(Drop(kind=kind, size=size, begin=begin, end=end, drop=(end - begin) / end))
    return out


def importance(fits: list[Fit], shuffled: list[Fit]) -> Importance:
    """Regression summary: R², and Pearson r/p of coefficient vs position per sentence-count bucket
    (and over all documents, the last row), for the original and the shuffled order."""
    r2 = [f.r2 for f in fits]
    return Importance(
        n_docs=len(fits),
        r2_mean=float(np.mean(r2)),
        r2_min=float(np.min(r2)),
        r2_max=float(np.max(r2)),
        squared_error_mean=float(np.mean([f.squared_error for f in fits])),
        original=bucket_fits(fits),
        shuffled=bucket_fits(shuffled),
        profile_original=profile(fits),
        profile_shuffled=profile(shuffled),
    )


def bucket_fits(fits: list[Fit]) -> list[BucketFit]:
    """Pearson r/p per sentence-count bucket, then one row over all fits."""
    groups: dict[tuple[int, int], list[Fit]] = {}
    for fit in fits:
        groups.setdefault(bucket_of(len(fit.coefficients)), []).append(fit)
    rows = [_bucket(f"{lo}–{hi}", groups[(lo, hi)]) for lo, hi in sorted(groups)]
    return [*rows, _bucket("all", fits)]


def _bucket(name: str, fits: list[Fit]) -> BucketFit:
    x = np.concatenate([f.positions for f in fits])
    y = np.concatenate([f.coefficients for f in fits])
    r, p = pearson(x, y)
    return BucketFit(bucket=name, n_docs=len(fits), n_sentences=len(x), r=r, p=p)
