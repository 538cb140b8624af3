"""Late chunking (Günther et al., jina-ai's late chunking), in one place.

The encoder runs over the whole document (one pass up to the extended window, else overlapping
passes of that window); the token states of each chunk span are summed and mean-pooled into a chunk
vector, so every chunk carries the context around it. Where passes overlap, each token's state is
taken from the pass where it sits furthest from an edge (:func:`~ragidx.embed.plan.pass_owners`).
The first chunk also pools the leading special tokens (and the prompt when the pooling includes it)
and the last the trailing ones, so one chunk spanning the document is exactly whole-document mean
pooling. The plan (which chunks, which passes) comes from :func:`ragidx.embed.plan.plan`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ragidx.embed.plan import EmbedPlan, pass_owners

if TYPE_CHECKING:
    from ragidx.embed.encoder import Encoder, Tokens, Window


@dataclass(frozen=True)
class LatePasses:
    """A late plan's encoder inputs: the pass windows, the input ranges of each to sum, and the
    vector each range adds to (chunk j, or -1 for the document vector of the pass)."""

    windows: list[Window]
    segments: list[list[tuple[int, int]]]
    targets: list[list[int]]

    def pool(
        self, encoder: Encoder, sums: Sequence[np.ndarray], n_chunks: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Un-normalised chunk vectors (n_chunks, dim) and the pass's document vector (dim,) from the
        segment sums :meth:`Encoder.embed_segments` returned for :attr:`windows`."""
        totals = np.zeros((n_chunks + 1, encoder.hidden_size), dtype=np.float64)
        counts = np.zeros(n_chunks + 1, dtype=np.int64)
        for window_sums, ranges, targets in zip(sums, self.segments, self.targets, strict=True):
            for total, (lo, hi), target in zip(window_sums, ranges, targets, strict=True):
                totals[target] += total
                counts[target] += hi - lo
        means = (totals / np.maximum(counts, 1)[:, None]).astype(np.float32)
        projected = encoder.project(means)
        return projected[:n_chunks], projected[n_chunks]


def late_passes(encoder: Encoder, tokens: Tokens, doc_plan: EmbedPlan) -> LatePasses:
    """The inputs that late-chunk ``doc_plan`` (see the module docstring for who owns which token)."""
    out = LatePasses([], [], [])
    last_chunk = len(doc_plan.spans) - 1
    owners = pass_owners(doc_plan.passes)
    for number, ((start, end), (own_lo, own_hi)) in enumerate(zip(doc_plan.passes, owners, strict=True)):
        window = encoder.window(tokens, start, end)
        shift = window.content_start - start  # content token t sits at input position t + shift
        ranges: list[tuple[int, int]] = []
        targets: list[int] = []
        for chunk, (lo, hi) in enumerate(doc_plan.spans):
            lo, hi = max(lo, own_lo), min(hi, own_hi)
            if hi > lo:
                ranges.append((lo + shift, hi + shift))
                targets.append(chunk)
        edges = [(own_lo + shift, own_hi + shift)]
        if number == 0 and encoder.pooling.include_prompt and window.content_start:
            edges.append((0, window.content_start))  # leading specials (and prompt): chunk 0
            ranges.append(edges[-1])
            targets.append(0)
        if number == len(doc_plan.passes) - 1 and len(window.input_ids) > end + shift:
            edges.append((end + shift, len(window.input_ids)))  # trailing specials: the last chunk
            ranges.append(edges[-1])
            targets.append(last_chunk)
        ranges += edges
        targets += [-1] * len(edges)
        out.windows.append(window)
        out.segments.append(ranges)
        out.targets.append(targets)
    return out
