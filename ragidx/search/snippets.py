"""Snippets: the passage of a hit shown to a person, chosen by word overlap with the query.

:func:`snippet` picks the sentence of the matched span (the best chunk, or the whole document)
that shares the most content words with the query, widened by its neighbours up to ``width``
characters.
"""

from __future__ import annotations

import re

SNIPPET_CHARS = 240
_WORD = re.compile(r"\w+", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_STOPWORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "are",
        "was",
        "were",
        "with",
        "that",
        "this",
        "from",
        "what",
        "which",
        "who",
        "whom",
        "how",
        "why",
        "when",
        "where",
        "does",
        "did",
        "can",
        "could",
        "should",
        "would",
        "will",
        "has",
        "have",
        "had",
        "not",
        "but",
        "you",
        "your",
        "its",
        "into",
        "about",
        "than",
        "then",
        "them",
        "they",
        "there",
        "their",
        "his",
        "her",
        "our",
        "out",
        "all",
        "any",
        "each",
    ]
)


def snippet(text: str, query: str, width: int = SNIPPET_CHARS) -> str:
    """The sentence (plus neighbours, up to ``width`` chars) sharing most words with ``query``."""
    sentences = [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]
    if not sentences:
        return ""
    terms = {w[:5] for w in _WORD.findall(query.lower()) if len(w) > 2 and w not in _STOPWORDS}

    def overlap(sentence: str) -> int:
        return len(terms & {w[:5] for w in _WORD.findall(sentence.lower())})

    best = max(range(len(sentences)), key=lambda i: (overlap(sentences[i]), -i))
    lo = hi = best
    out = sentences[best]
    while len(out) < width and (lo > 0 or hi < len(sentences) - 1):
        if hi < len(sentences) - 1:
            hi += 1
            out = f"{out} {sentences[hi]}"
        elif lo > 0:
            lo -= 1
            out = f"{sentences[lo]} {out}"
    out = " ".join(out.split())
    return out if len(out) <= width else out[: width - 1].rsplit(" ", 1)[0] + "…"
