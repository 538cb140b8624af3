"""The retriever: queries in, ranked documents out.

Embeds queries with the index's encoder (query prompt applied), searches FAISS, and merges chunk
hits into documents: a document scores as its best chunk (max-sim), reported once, with the span
that matched. FAISS is asked for more vectors than ``k`` until ``k`` distinct documents are found
(or the index is exhausted); a ``where`` filter is applied while merging, so filtered searches
still return ``k`` documents when ``k`` match. ``per="chunk"`` ranks vectors (chunks) instead of
documents. Each :class:`SearchResult` carries a snippet: the passage of the matching span that
shares the most words with the query.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    from ragidx.index import Index
    from ragidx.store import DocumentRecord

Where = Callable[["DocumentRecord"], bool]
Per = Literal["document", "chunk"]

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


@dataclass
class SearchResult:
    """One ranked document."""

    rank: int
    score: float
    doc_id: str
    source: str
    title: str | None
    snippet: str
    text: str
    embed_mode: str
    n_tokens: int
    chunk: dict[str, int] | None = None  # the best-matching span when the document was chunked
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, with_text: bool = False) -> dict[str, Any]:
        data = asdict(self)
        if not with_text:
            data.pop("text")
        return data

    @property
    def passage(self) -> str:
        """The text that matched: the chunk's characters for a chunk hit, else the whole text."""
        if self.chunk is not None and self.chunk["char_start"] >= 0:
            return self.text[self.chunk["char_start"] : self.chunk["char_end"]]
        return self.text


class Retriever:
    """Searches one :class:`~ragidx.index.Index`."""

    def __init__(self, index: Index):
        self.index = index

    def search_many(
        self, queries: Sequence[str], k: int = 10, *, where: Where | None = None, per: Per = "document"
    ) -> list[list[SearchResult]]:
        if not queries:
            return []
        vectors, _ = self.index.encoder.embed(list(queries), role="query")
        return self.rank(queries, vectors, k, where=where, per=per)

    def rank(
        self,
        queries: Sequence[str],
        vectors: np.ndarray,
        k: int = 10,
        *,
        where: Where | None = None,
        per: Per = "document",
    ) -> list[list[SearchResult]]:
        """Results for query vectors (``queries`` only pick the snippets)."""
        hits = self.search_vectors(vectors, k, where=where, per=per)
        return [self._results(query, h) for query, h in zip(queries, hits, strict=True)]

    def search_vectors(
        self, vectors: np.ndarray, k: int, *, where: Where | None = None, per: Per = "document"
    ) -> list[list[tuple[int, float]]]:
        """Per query, up to ``k`` (vector id, score) pairs: one per document (its best vector),
        or, ``per="chunk"``, the best vectors themselves."""
        self.index.flush()
        store, faiss_index = self.index.store, self.index.vectors
        total = faiss_index.ntotal
        if total == 0 or k <= 0:
            return [[] for _ in range(len(vectors))]
        per_doc = max(1.0, store.n_vectors / max(store.n_documents, 1)) if per == "document" else 1.0
        fetch = min(total, int(k * min(per_doc, 8)) + k)
        accepted: dict[str, bool] = {}  # where() per document, computed once per search
        while True:
            scores, ids = faiss_index.search(vectors, fetch)
            merged = [self._best(s, i, k, where, per, accepted) for s, i in zip(scores, ids, strict=True)]
            if fetch >= total or all(len(m) >= k for m in merged):
                return merged
            fetch = min(total, fetch * 4)

    def _best(
        self,
        scores: np.ndarray,
        ids: np.ndarray,
        k: int,
        where: Where | None,
        per: Per,
        accepted: dict[str, bool],
    ) -> list[tuple[int, float]]:
        store = self.index.store
        seen: set[str] = set()
        hits: list[tuple[int, float]] = []
        for vid, score in zip(ids, scores, strict=True):
            if vid < 0:
                continue
            doc_id = store.vector(int(vid)).doc_id
            if per == "document" and doc_id in seen:
                continue
            if where is not None:
                if doc_id not in accepted:
                    accepted[doc_id] = bool(where(store.document(doc_id)))
                if not accepted[doc_id]:
                    continue
            seen.add(doc_id)
            hits.append((int(vid), float(score)))
            if len(hits) == k:
                break
        return hits

    def _results(self, query: str, hits: list[tuple[int, float]]) -> list[SearchResult]:
        results = []
        for rank, (vid, score) in enumerate(hits, start=1):
            span = self.index.store.vector(vid)
            doc = self.index.store.document(span.doc_id)
            chunked = doc.embed_mode == "chunk"
            has_span = chunked and span.char_start >= 0  # -1: tokenizer without offsets
            passage = doc.text[span.char_start : span.char_end] if has_span else doc.text
            results.append(
                SearchResult(
                    rank=rank,
                    score=score,
                    doc_id=doc.doc_id,
                    source=doc.source,
                    title=doc.title,
                    snippet=snippet(passage, query),
                    text=doc.text,
                    embed_mode=doc.embed_mode,
                    n_tokens=doc.n_tokens,
                    chunk={
                        "ordinal": span.ordinal,
                        "tok_start": span.tok_start,
                        "tok_end": span.tok_end,
                        "char_start": span.char_start,
                        "char_end": span.char_end,
                    }
                    if chunked
                    else None,
                    metadata=doc.metadata,
                )
            )
        return results


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
