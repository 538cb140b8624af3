"""Passages: the part of a hit's document handed on to a reader or an LLM, instead of all of it.

A hit's passage is its best chunk: the span its vector embedded (for a BM25 hit in a chunked
document, which has no vector, the chunk holding the most query terms: :func:`lexical_chunk`).
A document embedded as one vector has no chunk: its passage is its whole text when that is at most
``1.5 × PASSAGE_CHARS`` characters, else the whole sentences around the sentence that matched, about
``PASSAGE_CHARS`` (:func:`passage_span`). :func:`with_context` widens a passage by its neighbouring
chunks (or, without chunks, by as many more windows of sentences) on each side.
:func:`ranked_chunks` orders a document's chunks by the first stage (the passages a reranker reads:
``ragidx.search.rerank``).

Spans are character offsets into the document's stored text: ``text[start:end]`` is the passage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ragidx.search.snippets import PASSAGE_CHARS, Match, Span, Terms, sentences, window

if TYPE_CHECKING:
    from ragidx.index.directory import Index
    from ragidx.index.store import VectorRecord


def chunks(index: Index, doc_id: str) -> list[VectorRecord]:
    """The document's chunks with character offsets, in order (empty: embedded as one vector, or a
    tokenizer without offsets)."""
    vids, _ = index.vector_ids(doc_id)
    records = [index.vector_record(int(vid)) for vid in vids]
    if len(records) < 2 or any(r.char_start < 0 for r in records):
        return []
    return sorted(records, key=lambda r: r.ordinal)


def lexical_chunk(index: Index, doc_id: str, text: str, terms: Terms) -> VectorRecord | None:
    """The chunk of a chunked document holding the most distinct query terms (then the most
    occurrences, then the earliest); None for a document without chunks."""
    records = chunks(index, doc_id)
    if not records:
        return None
    marks = terms.spans(text)

    def score(record: VectorRecord) -> tuple[int, int, int]:
        inside = [found for (lo, hi), found in marks if record.char_start <= lo and hi <= record.char_end]
        return len(frozenset().union(*inside)), len(inside), -record.ordinal

    return max(records, key=score)


def ranked_chunks(
    records: Sequence[VectorRecord], text: str, terms: Terms, cosines: np.ndarray | None = None
) -> list[int]:
    """The positions of a document's chunks, best first by the first stage: the dense order (highest
    ``cosines`` with the query, when given) and the lexical one (most distinct query terms, then
    occurrences; chunks without a query term left out) interleaved, dense first, each chunk once,
    then the remaining chunks in document order."""
    marks = terms.spans(text)
    found = []
    for record in records:
        inside = [f for (lo, hi), f in marks if record.char_start <= lo and hi <= record.char_end]
        found.append((len(frozenset().union(*inside)), len(inside)))
    lexical = sorted(
        (i for i in range(len(records)) if found[i][0]), key=lambda i: (-found[i][0], -found[i][1], i)
    )
    dense = [] if cosines is None else [int(i) for i in np.argsort(-np.asarray(cosines), kind="stable")]
    order: dict[int, None] = {}
    for at in range(max(len(dense), len(lexical))):
        for side in (dense, lexical):
            if at < len(side):
                order.setdefault(side[at])
    for i in sorted(range(len(records)), key=lambda i: records[i].ordinal):
        order.setdefault(i)
    return list(order)


def passage_span(text: str, chunk: Span | None, found: Match | None) -> Span:
    """The passage of a hit: its chunk, its whole document when short, else sentences around the match."""
    if chunk is not None:
        return chunk
    if found is None or len(text) <= PASSAGE_CHARS * 3 // 2:
        return 0, len(text)
    return window(found.sentences, found.index, PASSAGE_CHARS)


def with_context(index: Index, doc_id: str, text: str, passage: Span, neighbours: int) -> Span:
    """``passage`` widened by ``neighbours`` chunks on each side (a document without chunks: by
    ``neighbours`` more windows of about ``PASSAGE_CHARS`` characters of whole sentences)."""
    if neighbours <= 0 or passage == (0, len(text)):
        return passage
    records = chunks(index, doc_id)
    at = [i for i, r in enumerate(records) if (r.char_start, r.char_end) == passage]
    if at:
        lo, hi = max(at[0] - neighbours, 0), min(at[0] + neighbours, len(records) - 1)
        return records[lo].char_start, max(r.char_end for r in records[lo : hi + 1])
    spans = sentences(text)
    first = next((i for i, (lo, hi) in enumerate(spans) if hi > passage[0]), 0)
    last = max((i for i, (lo, _) in enumerate(spans) if lo < passage[1]), default=first)
    wide = window(spans, first, passage[1] - passage[0] + 2 * neighbours * PASSAGE_CHARS, last)
    return min(wide[0], passage[0]), max(wide[1], passage[1])
