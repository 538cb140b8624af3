"""BM25 in an evaluation: the ``bm25`` strategy and the lexical side of ``+bm25:…`` hybrids.

:class:`LexicalScores` analyses a task group's documents once per run with ragidx's own analyzer
and BM25 (:class:`~ragidx.index.lexical.LexicalIndex` with the default
:class:`~ragidx.index.config.LexicalConfig`: k1 1.5, b 0.75, the English Snowball stemmer,
Lucene's 33 English stop words, passages of 256 terms; a strategy's ``passages:<P>`` changes the
last) and scores every query against every document:
:class:`LexicalGroup`. Documents are analysed whole, whatever the max length L_t cuts for the
dense side, as ``ragidx ingest`` analyses them. Nothing is cached on disk: analysing QMSum's 197
meetings takes seconds. :mod:`ragidx.evaluate.scoring` ranks with these scores (BM25 alone, or
fused with a dense strategy's document scores as a hybrid search fuses them).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

import numpy as np

from ragidx.evaluate.tasks import TaskGroup
from ragidx.index.config import LexicalConfig
from ragidx.index.lexical import LexicalIndex

__all__ = ["SCORING", "LexicalGroup", "LexicalScores"]

# the settings that decide a document's lexical score (the others say how it fuses)
SCORING = {"stemmer", "stopwords", "lowercase", "passage_terms", "k1", "b"}


@dataclass
class LexicalGroup:
    """BM25 of every (query, document) pair of one task group."""

    doc_ids: list[str]  # ``group.corpus`` order, the columns of :attr:`scores`
    scores: np.ndarray  # (n queries, n docs) float32, ``group.queries`` order
    searchable: np.ndarray  # (n queries,) bool: the query has a term left after analysis
    index_bytes: int  # the size of the group's lexical index file (``lexical-GGGGGG.npz``)
    seconds: float  # analysing the documents and scoring the queries

    @property
    def bytes_per_doc(self) -> float:
        return self.index_bytes / max(len(self.doc_ids), 1)


class LexicalScores:
    """Each task group's :class:`LexicalGroup`, computed once per run (per distinct group content)."""

    def __init__(self, config: LexicalConfig | None = None) -> None:
        self.config = config or LexicalConfig()
        self._groups: dict[str, LexicalGroup] = {}

    def group(self, group: TaskGroup, config: LexicalConfig | None = None) -> LexicalGroup:
        """``group``'s scores under ``config`` (default: this run's; only the analyzer, BM25 and
        passage settings count, not the fusion)."""
        config = config or self.config
        key = _fingerprint(group) + config.model_dump_json(include=SCORING)
        if key not in self._groups:
            self._groups[key] = score_group(group, config)
        return self._groups[key]


def score_group(group: TaskGroup, config: LexicalConfig | None = None) -> LexicalGroup:
    """A :class:`LexicalGroup`: ``group``'s documents indexed, each query scored against all of them."""
    started = time.perf_counter()
    index = LexicalIndex.empty(config or LexicalConfig())
    doc_ids = list(group.corpus)
    index.add_texts(doc_ids, group.corpus.values())
    assert index.doc_ids == doc_ids  # rows in corpus order
    texts = list(group.queries.values())
    scores = np.zeros((len(texts), len(doc_ids)), dtype=np.float32)
    for i, text in enumerate(texts):
        scores[i] = index.scores(text)
    searchable = np.array([bool(index.query_terms(t)) for t in texts], dtype=bool)
    size = len(index.to_bytes())
    return LexicalGroup(doc_ids, scores, searchable, size, time.perf_counter() - started)


def _fingerprint(group: TaskGroup) -> str:
    """What decides a group's BM25 scores besides the settings: its name, documents and queries."""
    digest = hashlib.sha256(group.name.encode())
    for part in (group.corpus, group.queries):
        for key, text in part.items():
            for piece in (key.encode("utf-8", "surrogatepass"), text.encode("utf-8", "surrogatepass")):
                digest.update(len(piece).to_bytes(8, "little") + piece)
        digest.update(b"\0")
    return digest.hexdigest()
