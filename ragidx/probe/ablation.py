"""Ablated texts for the positional-bias probe: filler inserted, or a span removed, at a position.

Sizes are fractions of the document's token count ``n``; positions are relative (0 = beginning,
1 = end). Cuts fall on word starts (a token at offset 0 or after whitespace), the nearest one to the
exact token index, so neither half is re-tokenized differently and the altered text has exactly
``n + m`` (insertion) or ``n − m`` (removal) tokens, ``m`` being the recorded count.

* insertion: the first ``round(size · n)`` tokens of the filler, as a paragraph of its own, at token
  ``round(position · n)`` (the PB paper's reference code uses sizes 5–100 % and 5 positions);
* removal: a contiguous span from token ``position · (1 − size) · n`` to that plus ``size · n``
  (each end at the nearest word start; position 0 removes the beginning, position 1 the end).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Literal

from ragidx.embed.encoder import Tokens

INSERT_SIZES = (0.05, 0.1, 0.2, 0.5, 1.0)
REMOVE_SIZES = (0.05, 0.1, 0.2, 0.5)
POSITIONS = (0.0, 0.25, 0.5, 0.75, 1.0)

AblationKind = Literal["insert", "remove"]


@dataclass(frozen=True)
class Ablation:
    """One altered text: what was done, where, and how many tokens it changed."""

    kind: AblationKind
    size: float
    position: float
    text: str
    changed_tokens: int


def word_starts(text: str, tokens: Tokens) -> list[int]:
    """Token indices at which a word starts, and ``len(tokens)`` (the end)."""
    if tokens.offsets is None:
        raise ValueError("ablations need a tokenizer that reports character offsets (a fast tokenizer)")
    starts = [i for i, (s, _) in enumerate(tokens.offsets) if s == 0 or text[s - 1].isspace()]
    return [*starts, len(tokens)]


def _nearest(target: float, starts: list[int]) -> int:
    at = bisect.bisect_left(starts, target)
    candidates = starts[max(at - 1, 0) : at + 1]
    return min(candidates, key=lambda s: (abs(s - target), s))


def _char(text: str, tokens: Tokens, index: int) -> int:
    assert tokens.offsets is not None
    return tokens.offsets[index][0] if index < len(tokens) else len(text)


def insertion(
    text: str,
    tokens: Tokens,
    starts: list[int],
    needle: str,
    needle_tokens: Tokens,
    size: float,
    position: float,
) -> Ablation:
    """``text`` with the first ``round(size · n)`` tokens of ``needle`` inserted near ``position``."""
    n = len(tokens)
    m = max(1, round(size * n))
    if m > len(needle_tokens):
        raise ValueError(f"the filler has {len(needle_tokens)} tokens, {m} are needed")
    assert needle_tokens.offsets is not None
    piece = needle[: needle_tokens.offsets[m - 1][1]]
    at = _char(text, tokens, _nearest(position * n, starts))
    parts = [p for p in (text[:at].rstrip(), piece, text[at:].lstrip()) if p]
    return Ablation("insert", size, position, "\n\n".join(parts), m)


def removal(text: str, tokens: Tokens, starts: list[int], size: float, position: float) -> Ablation:
    """``text`` without the span of about ``size · n`` tokens starting near ``position · (1 − size) · n``."""
    n = len(tokens)
    first = position * (1 - size) * n
    begin = _nearest(first, starts[:-1])
    end = _nearest(first + max(1.0, size * n), [s for s in starts if s > begin])
    left, right = text[: _char(text, tokens, begin)].rstrip(), text[_char(text, tokens, end) :].lstrip()
    return Ablation("remove", size, position, " ".join(p for p in (left, right) if p), end - begin)


def ablations(
    text: str,
    tokens: Tokens,
    needle: str,
    needle_tokens: Tokens,
    insert_sizes: tuple[float, ...] = INSERT_SIZES,
    remove_sizes: tuple[float, ...] = REMOVE_SIZES,
    positions: tuple[float, ...] = POSITIONS,
) -> list[Ablation]:
    """Every insertion and removal condition for one document."""
    starts = word_starts(text, tokens)
    out = [
        insertion(text, tokens, starts, needle, needle_tokens, size, pos)
        for size in insert_sizes
        for pos in positions
    ]
    out += [removal(text, tokens, starts, size, pos) for size in remove_sizes for pos in positions]
    return out
