"""The retriever: queries in, ranked documents out.

Embeds queries with the index's encoder (query prompt applied), searches FAISS, and merges chunk
hits into documents: a document scores as its best chunk (max-sim), reported once, with the span
that matched. FAISS is asked for more vectors than ``k`` until ``k`` distinct documents are found
(or the index is exhausted); a ``where`` filter (a :class:`~ragidx.search.filters.Filter`, the same
conditions as a dict, or any callable on a stored document) is applied while merging, before the
top-``k`` cut-off, so filtered searches still return ``k`` documents when ``k`` match.
``per="chunk"`` ranks vectors (chunks) instead of documents. Each :class:`SearchResult` carries its
passage (``ragidx.search.passages``: the best chunk, or sentences around the match), the sentence of
it most similar to the query and a snippet around that sentence (``ragidx.search.snippets``;
``SearchOptions.sentences`` says how the sentence is chosen).

A hybrid index (document-level vectors beside the chunk-level ones, see ``ragidx.index.directory``) is
searched at both levels: the candidates are the union of the best ``max(k, 100)`` documents by
best chunk and by document vector; each candidate's exact document cosine and best-chunk cosine
(from its stored vectors) are fused by :func:`ragidx.search.fusion.fuse` with the manifest's
:class:`~ragidx.embed.config.HybridConfig` (or one given per search), and the ``k`` best documents are
returned once each, with both cosines and the best chunk's span. ``per="chunk"`` ranks the
chunk-level vectors only.

A document can also score as the mean cosine of its N best chunks (``[long_doc] best_chunks``,
strategy ``+best:N``, or ``best_chunks=N`` per search), exactly: the candidates are the documents
with the best max-sim, rescored from their stored vectors; a document outside them has a max-sim,
and so a best-N mean, of at most the last candidate's max-sim, so once the ``k``-th best mean
reaches that bound the ranking is final; otherwise the candidate set grows.

With a lexical index (``ragidx.index.lexical``) a search has three modes: ``dense`` (all of the
above), ``lexical`` (BM25 over whole documents; no model is loaded) and ``hybrid``, the default:
the candidates are the union of the best ``max(k, 100)`` documents by the dense ranking and by
BM25, each candidate's exact dense score (from its stored vectors, as the dense ranking scores it)
and exact BM25 are fused by :func:`ragidx.search.fusion.fuse_lexical`, and every result carries
both scores. A query with no searchable word (only stop words or punctuation) is ranked by the
vectors alone, with a :class:`SearchNote` warning saying so.

With ``rerank`` (:class:`~ragidx.search.options.Rerank`) the first stage above ranks at least
``top_n`` documents, and a cross-encoder (``ragidx.search.rerank``) re-scores them on their best
passages (a chunked document's chunks in the order :func:`~ragidx.search.passages.ranked_chunks`
gives: its chunk cosines with the query and its query words); the ``k`` best are returned, each with
the passage the cross-encoder preferred as its passage (and the region its snippet is taken from),
and ``rerank`` saying how it was scored.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ragidx.embed.config import HybridConfig
from ragidx.errors import ConfigError
from ragidx.search.filters import Predicate, as_predicate
from ragidx.search.fusion import best_mean, fuse, fuse_lexical
from ragidx.search.options import Mode, Per, Rerank, SearchOptions
from ragidx.search.passages import chunks, lexical_chunk, passage_span, ranked_chunks
from ragidx.search.rerank import Candidate, RerankInfo
from ragidx.search.snippets import (
    DENSE_BUDGET,
    MatchInfo,
    Region,
    Shared,
    Span,
    Terms,
    describe,
    match,
    render,
)

if TYPE_CHECKING:
    import torch

    from ragidx.index.directory import Index
    from ragidx.index.lexical import LexicalIndex
    from ragidx.index.store import DocumentRecord, VectorRecord
    from ragidx.search.snippets import By


HYBRID_CANDIDATES = 100  # a hybrid search fuses at least this many documents from each level
HYBRID_GROUP = 16  # queries whose candidates' stored vectors are reconstructed together
BEST_CANDIDATES = 100  # best-N scoring starts from this many max-sim candidates per query
CHUNK_KEYS = ("ordinal", "tok_start", "tok_end", "char_start", "char_end")  # SearchResult.chunk


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
    match: MatchInfo | None = None  # the sentence most similar to the query, and the snippet's marks
    passage_span: dict[str, int] | None = None  # the passage (char_start, char_end): see ``passage``
    document_score: float | None = None  # hybrid: the document-level cosine (score is the fused one)
    chunk_score: float | None = None  # hybrid: the best chunk's cosine
    dense_score: float | None = None  # mode hybrid: the dense score (score is the fused one)
    lexical_score: float | None = None  # modes lexical and hybrid: BM25
    rerank: RerankInfo | None = None  # reranked: the cross-encoder's score, passage, time (score: the final)

    def to_dict(self, with_text: bool = False) -> dict[str, Any]:
        data = {key.name: _copied(getattr(self, key.name)) for key in fields(self)}  # as asdict, faster
        if not with_text:
            data.pop("text")
        for key in ("document_score", "chunk_score", "dense_score", "lexical_score", "rerank"):  # when known
            if data[key] is None:
                data.pop(key)
        return data

    @property
    def passage(self) -> str:
        """The text that matched, to hand on (``ragidx.search.passages``): the chunk's characters for
        a chunk hit; for a document embedded whole, its text, or when long the sentences around
        the match."""
        if self.passage_span is not None:
            return self.text[self.passage_span["char_start"] : self.passage_span["char_end"]]
        if self.chunk is not None and self.chunk["char_start"] >= 0:
            return self.text[self.chunk["char_start"] : self.chunk["char_end"]]
        return self.text


@dataclass(frozen=True)
class Preferred:
    """A reranked hit's passage: the span the cross-encoder preferred, the chunk holding it (None: a
    document without chunks) and what the reranking recorded."""

    span: Span
    record: VectorRecord | None
    info: RerankInfo


class SearchNote(UserWarning):
    """Something a person should know about how a search ran (e.g. a fallback to dense)."""


@dataclass(frozen=True)
class Hit:
    """One ranked vector: its id and score (hybrid: the best chunk, the fused score and both
    cosines). A lexical hit has no vector: ``vid`` None and its ``doc_id`` instead."""

    vid: int | None
    score: float
    document_score: float | None = None
    chunk_score: float | None = None
    dense_score: float | None = None
    lexical_score: float | None = None
    doc_id: str | None = None


class Retriever:
    """Searches one :class:`~ragidx.index.directory.Index` through its public reading API
    (:meth:`~ragidx.index.directory.Index.nearest`, ``reconstruct``, ``vector_ids``, ``document``…)."""

    def __init__(self, index: Index):
        self.index = index
        self._doc_ids: dict[int, str] = {}  # vector id → its document's (a vector id is never reused)

    def search_many(
        self, queries: Sequence[str], k: int = 10, options: SearchOptions | None = None
    ) -> list[list[SearchResult]]:
        if not queries:
            return []
        options = options or SearchOptions()
        vectors = None
        dense = options.sentences == "dense"
        if dense or self.mode(options) != "lexical" or not all(self._searchable(q) for q in queries):
            vectors, _ = self.index.encoder.embed(list(queries), role="query")
        return self._rank(queries, vectors, k, options, embedded=True)

    def rank(
        self,
        queries: Sequence[str],
        vectors: np.ndarray | None,
        k: int = 10,
        options: SearchOptions | None = None,
    ) -> list[list[SearchResult]]:
        """Results for queries and their vectors (dense mode: ``queries`` only pick the snippets;
        ``vectors`` may be None in lexical mode). The matched sentences are chosen lexically unless
        ``options.sentences`` is ``"dense"``."""
        return self._rank(queries, vectors, k, options or SearchOptions(), embedded=False)

    def _rank(
        self,
        queries: Sequence[str],
        vectors: np.ndarray | None,
        k: int,
        options: SearchOptions,
        embedded: bool,
    ) -> list[list[SearchResult]]:
        """``embedded``: the index's encoder made ``vectors`` from ``queries`` (:meth:`search_many`)."""
        options = replace(options, where=as_predicate(options.where))  # a mapping parsed once
        mode = self.mode(options)
        rerank = None if options.rerank is None else Rerank.of(options.rerank)
        depth = k if rerank is None else max(k, rerank.top_n)  # the first stage's documents
        if mode == "dense":
            assert vectors is not None
            hits = self.hits(vectors, depth, options)
        else:
            batched = self._dense_candidates(mode, queries, vectors, depth, options)  # one FAISS search
            hits = [
                self._with_lexical(
                    mode, q, None if vectors is None else vectors[i], depth, options, batched.get(i)
                )
                for i, q in enumerate(queries)
            ]
        preferred: list[list[Preferred] | None] = [None] * len(queries)
        if rerank is not None:
            for i, query in enumerate(queries):
                vector = None if vectors is None else vectors[i]
                hits[i], preferred[i] = self._rerank(query, vector, hits[i], k, rerank, options.per)
        if options.sentences == "auto":  # see SearchOptions.sentences
            dense, budget = embedded and vectors is not None and len(queries) == 1, DENSE_BUDGET
        else:  # None: lexical, no model call
            dense, budget = options.sentences == "dense", None
        if dense and vectors is None:
            vectors, _ = self.index.encoder.embed(list(queries), role="query")
        batch = _Batch(self.index)  # the queries share each document read, each region's analysis
        return [
            self._results(
                query, h, None if vectors is None else vectors[i], dense, budget, preferred[i], batch
            )
            for i, (query, h) in enumerate(zip(queries, hits, strict=True))
        ]

    def _rerank(
        self, query: str, vector: np.ndarray | None, hits: list[Hit], k: int, rerank: Rerank, per: Per
    ) -> tuple[list[Hit], list[Preferred]]:
        """One query's first-stage hits re-scored by the cross-encoder (see the module docstring):
        the ``k`` best, and the passage each was preferred on."""
        from ragidx.search.rerank import Reranker

        reranker = Reranker.load(rerank.model, *self._placement())
        lexical = self.index.lexical
        terms = Terms(query, None if lexical is None else lexical.analyzer)
        candidates: list[Candidate] = []
        passages: list[list[VectorRecord]] = []
        for hit in hits:
            doc_id = hit.doc_id if hit.vid is None else self.index.vector_record(hit.vid).doc_id
            assert doc_id is not None
            doc = self.index.document(doc_id)
            chunked = doc.embed_mode.split("+")[0] in ("chunk", "late")
            if per == "chunk" and hit.vid is not None:
                record = self.index.vector_record(hit.vid)
                records = [record] if chunked and record.char_start >= 0 else []
            else:
                records = chunks(self.index, doc_id) if chunked else []
                if records:
                    cosines = None
                    if vector is not None:
                        vids = np.array([r.vid for r in records], dtype=np.int64)
                        cosines = self.index.reconstruct(vids) @ vector
                    records = [records[i] for i in ranked_chunks(records, doc.text, terms, cosines)]
            spans = [(r.char_start, r.char_end) for r in records] if records else None
            candidates.append(Candidate(doc_id, doc.text, hit.score, spans))
            passages.append(records)
        analyzer = None if lexical is None else lexical.analyzer
        run = reranker.rerank(query, candidates, rerank.passages, rerank.weight, rerank.batch_size, analyzer)
        out: list[Hit] = []
        preferred: list[Preferred] = []
        for found in run.results[:k]:
            records = passages[found.position]
            info = RerankInfo(
                model=rerank.model,
                score=found.rerank_score,
                first_stage_score=found.first_stage_score,
                first_stage_rank=found.position + 1,
                char_start=found.span[0],
                char_end=found.span[1],
                passages=found.pieces,
                split=found.split,
                ms=round(run.seconds * 1000, 3),
                pairs=run.pairs,
            )
            out.append(replace(hits[found.position], score=found.score))
            preferred.append(
                Preferred(found.span, records[found.passage] if found.passage >= 0 else None, info)
            )
        return out, preferred

    def _placement(self) -> tuple[str | torch.device, str | torch.dtype]:
        """Where a reranker runs: on the index's encoder's device, in its dtype (an index of vectors
        made outside ragidx: the defaults)."""
        if self.index.external:
            return "auto", "auto"
        encoder = self.index.encoder
        return encoder.device, encoder.dtype

    def mode(self, options: SearchOptions) -> Mode:
        """The search mode ``options`` ask for (None: hybrid where there is a lexical index)."""
        if options.mode is None:
            lexical = self.index.lexical is not None and options.per == "document"
            return "hybrid" if lexical else "dense"
        if options.mode != "dense":
            if self.index.lexical is None:
                raise ConfigError(
                    f"{self.index.name}: no lexical index (built before ragidx 0.2, or with "
                    f"lexical.enabled = false); add one with: ragidx ingest PATHS --index "
                    f"{self.index.name} --lexical"
                )
            if options.per == "chunk":
                raise ConfigError(f"mode {options.mode} ranks whole documents; per='chunk' needs mode dense")
        return options.mode

    def _searchable(self, query: str) -> bool:
        return self.index.lexical is None or bool(self.index.lexical.query_terms(query))

    def _dense_candidates(
        self, mode: Mode, queries: Sequence[str], vectors: np.ndarray | None, k: int, options: SearchOptions
    ) -> dict[int, list[Hit]]:
        """A hybrid batch's dense candidates (what :meth:`_with_lexical` fuses), one FAISS search for
        all of its queries that BM25 can search."""
        rows = [i for i, query in enumerate(queries) if self._searchable(query)]
        if mode != "hybrid" or vectors is None or len(rows) < 2:
            return {}
        return dict(zip(rows, self.hits(vectors[rows], max(k, HYBRID_CANDIDATES), options), strict=True))

    def _doc_id(self, vid: int) -> str:
        if vid not in self._doc_ids:
            self._doc_ids[vid] = self.index.vector_record(vid).doc_id
        return self._doc_ids[vid]

    def _with_lexical(
        self,
        mode: Mode,
        query: str,
        vector: np.ndarray | None,
        k: int,
        options: SearchOptions,
        dense_hits: list[Hit] | None = None,
    ) -> list[Hit]:
        """One query in mode ``lexical`` or ``hybrid`` (see the module docstring; ``dense_hits``: its
        dense candidates, when the batch's were searched together)."""
        lexical = self.index.lexical
        assert lexical is not None
        if not self._searchable(query):
            warnings.warn(
                f"query {query!r} has no searchable word for BM25 (only stop words or punctuation): "
                "ranked by the dense vectors",
                SearchNote,
                stacklevel=4,
            )
            assert vector is not None
            return self.hits(vector[None, :], k, options)[0]
        bm25 = lexical.scores(query)
        where = as_predicate(options.where)
        accepted: dict[str, bool] = {}
        matched = np.flatnonzero(bm25 > 0)
        fetch = max(k, HYBRID_CANDIDATES) if mode == "hybrid" else k
        by_lexical: dict[str, float] = {}  # the best BM25 documents, best first
        for row in matched[np.argsort(-bm25[matched], kind="stable")]:
            doc_id = lexical.doc_ids[row]
            if self._accepts(doc_id, where, accepted):
                by_lexical[doc_id] = float(bm25[row])
                if len(by_lexical) == fetch:
                    break
        if mode == "lexical":
            return [Hit(None, score, lexical_score=score, doc_id=d) for d, score in by_lexical.items()]
        assert vector is not None
        if dense_hits is None:
            dense_hits = self.hits(vector[None, :], fetch, options)[0]
        dense = {self._doc_id(h.vid): h for h in dense_hits if h.vid is not None}
        missing = [d for d in by_lexical if d not in dense]
        two_level_rrf = (config := self.hybrid_config(options.hybrid)) is not None and config.fusion == "rrf"
        if two_level_rrf:  # ranks depend on the candidate set: score the whole union together
            dense = self._dense_scores(vector, [*dense, *missing], options)
        elif missing:
            dense.update(self._dense_scores(vector, missing, options))
        candidates = list(dense)
        dense_scores = np.array([dense[d].score for d in candidates])
        lexical_scores = np.array([_bm25_of(lexical, bm25, d) for d in candidates])
        weight = self._lexical_weight(options)
        fused = fuse_lexical(dense_scores, lexical_scores, weight, lexical.config.rrf_k)
        order = np.lexsort((np.array(candidates), -fused))[:k]  # equal scores: by document id
        return [
            Hit(
                dense[candidates[i]].vid,
                float(fused[i]),
                dense[candidates[i]].document_score,
                dense[candidates[i]].chunk_score,
                dense_score=float(dense_scores[i]),
                lexical_score=float(lexical_scores[i]),
            )
            for i in order
        ]

    def _lexical_weight(self, options: SearchOptions) -> float | None:
        """The BM25 weight of a hybrid search (None: reciprocal-rank fusion)."""
        assert self.index.lexical is not None
        asked = options.lexical_weight
        if asked == "rrf":
            return None
        if asked is not None:
            if not 0 <= asked <= 1:
                raise ConfigError(f"lexical weight {asked}: give a number in [0, 1] or 'rrf'")
            return float(asked)
        config = self.index.lexical.config
        return config.weight if config.fusion == "weighted" else None

    def _dense_scores(self, vector: np.ndarray, doc_ids: list[str], options: SearchOptions) -> dict[str, Hit]:
        """The exact dense score of documents, as :meth:`hits` scores them (max-sim, best-N mean,
        or the fused document and chunk cosines; RRF ranks among ``doc_ids``)."""
        stored = _StoredVectors(self.index, set(doc_ids))
        document, chunk, top = stored.scores(vector, doc_ids, self.best_chunks(options.best_chunks))
        config = self.hybrid_config(options.hybrid)
        if config is None or document is None:
            return {d: Hit(int(top[i]), float(chunk[i])) for i, d in enumerate(doc_ids)}
        fused = fuse(document, chunk, config)
        return {
            d: Hit(int(top[i]), float(fused[i]), float(document[i]), float(chunk[i]))
            for i, d in enumerate(doc_ids)
        }

    def search_vectors(
        self, vectors: np.ndarray, k: int, options: SearchOptions | None = None
    ) -> list[list[tuple[int, float]]]:
        """Per query, up to ``k`` (vector id, score) pairs: one per document (its best vector; in
        a hybrid index its best chunk and fused score), or, ``per="chunk"``, the best vectors."""
        found = self.hits(vectors, k, options)  # dense: every hit is a vector
        return [[(h.vid, h.score) for h in hits if h.vid is not None] for hits in found]

    def hits(self, vectors: np.ndarray, k: int, options: SearchOptions | None = None) -> list[list[Hit]]:
        """Per query, up to ``k`` :class:`Hit`: one per document, or (``per="chunk"``) per vector."""
        options = options or SearchOptions()
        where = as_predicate(options.where)
        config = self.hybrid_config(options.hybrid)
        best = self.best_chunks(options.best_chunks)
        if config is not None and options.per == "document":
            return self._fused(vectors, k, where, config, best)
        if best > 1 and options.per == "document":
            return self._best_n(vectors, k, where, best)
        found = self._max_sim(vectors, k, where, options.per)
        return [[Hit(vid, score) for vid, score in hits] for hits in found]

    def best_chunks(self, best_chunks: int | None = None) -> int:
        """How many best chunks a document's score averages (``best_chunks``, else the manifest's;
        1: max-sim)."""
        long_doc = self.index.long_doc
        if best_chunks is None:
            return long_doc.best_chunks or 1
        if best_chunks < 1:
            raise ConfigError(f"best_chunks must be a positive number of chunks, got {best_chunks}")
        if best_chunks > 1 and long_doc.policy not in ("chunk", "late"):
            raise ConfigError(
                f"{self.index.name}: documents were embedded as one vector each ({long_doc.policy}); "
                "scoring by the best N chunks needs an index ingested with --long-doc chunk or late"
            )
        return best_chunks

    def hybrid_config(self, hybrid: HybridConfig | None = None) -> HybridConfig | None:
        """How this index's levels are fused (``hybrid``, else the manifest's); None: not hybrid."""
        if not self.index.hybrid:
            if hybrid is not None:
                raise ConfigError(
                    f"{self.index.name}: not a hybrid index (no document-level vectors); ingest with "
                    "--hybrid rrf|<w> (or a hybrid:… strategy) to fuse document and chunk scores"
                )
            return None
        return hybrid or self.index.long_doc.hybrid

    def _max_sim(
        self,
        vectors: np.ndarray,
        k: int,
        where: Predicate | None,
        per: Per,
        accepted: dict[str, bool] | None = None,
    ) -> list[list[tuple[int, float]]]:
        """Per query, up to ``k`` (vector id, score) from the (chunk-level) FAISS index: the best
        vector of each document, or (``per="chunk"``) the best vectors."""
        total = self.index.vector_count()
        if total == 0 or k <= 0:
            return [[] for _ in range(len(vectors))]
        per_doc = self.index.vectors_per_document() if per == "document" else 1.0
        fetch = min(total, int(k * min(per_doc, 8)) + k)
        accepted = {} if accepted is None else accepted  # where() per document, computed once per search
        while True:
            scores, ids = self.index.nearest(vectors, fetch)
            merged = [self._best(s, i, k, where, per, accepted) for s, i in zip(scores, ids, strict=True)]
            if fetch >= total or all(len(m) >= k for m in merged):
                return merged
            fetch = min(total, fetch * 4)

    def _accepts(self, doc_id: str, where: Predicate | None, accepted: dict[str, bool]) -> bool:
        """Whether ``where`` keeps the document (computed once per document and search)."""
        if where is None:
            return True
        if doc_id not in accepted:
            accepted[doc_id] = bool(where(self.index.document(doc_id)))
        return accepted[doc_id]

    def _best(
        self,
        scores: np.ndarray,
        ids: np.ndarray,
        k: int,
        where: Predicate | None,
        per: Per,
        accepted: dict[str, bool],
    ) -> list[tuple[int, float]]:
        seen: set[str] = set()
        hits: list[tuple[int, float]] = []
        for vid, score in zip(ids, scores, strict=True):
            if vid < 0:
                continue
            doc_id = self._doc_id(int(vid))
            if per == "document" and doc_id in seen:
                continue
            if not self._accepts(doc_id, where, accepted):
                continue
            seen.add(doc_id)
            hits.append((int(vid), float(score)))
            if len(hits) == k:
                break
        return hits

    def _best_n(self, vectors: np.ndarray, k: int, where: Predicate | None, best: int) -> list[list[Hit]]:
        """Per query, the ``k`` best documents by the mean of their ``best`` best chunks (exact, see
        the module docstring)."""
        out: list[list[Hit]] = [[] for _ in range(len(vectors))]
        todo = list(range(len(vectors)))
        fetch = max(k, BEST_CANDIDATES)
        accepted: dict[str, bool] = {}
        while todo:
            found = self._max_sim(vectors[todo], fetch, where, "document", accepted)
            unsettled: list[int] = []
            for start in range(0, len(todo), HYBRID_GROUP):  # one reconstruction per group of queries
                group = found[start : start + HYBRID_GROUP]
                docs = [[self.index.vector_record(vid).doc_id for vid, _ in hits] for hits in group]
                stored = _StoredVectors(self.index, {d for ids in docs for d in ids})
                for query, hits, ids in zip(todo[start : start + HYBRID_GROUP], group, docs, strict=True):
                    _, mean, best_vid = stored.scores(vectors[query], ids, best)
                    order = np.argsort(-mean, kind="stable")[:k]
                    every = len(hits) < fetch  # fewer than asked: every (accepted) document is here
                    if every or mean[order[-1]] >= hits[-1][1]:
                        out[query] = [Hit(int(best_vid[i]), float(mean[i])) for i in order]
                    else:
                        unsettled.append(query)
            todo, fetch = unsettled, fetch * 4
        return out

    def _fused(
        self, vectors: np.ndarray, k: int, where: Predicate | None, config: HybridConfig, best: int = 1
    ) -> list[list[Hit]]:
        """Hybrid search (see the module docstring): per query, the ``k`` best documents by fused score."""
        index = self.index
        fetch = max(k, HYBRID_CANDIDATES)
        accepted: dict[str, bool] = {}
        by_chunk = self._max_sim(vectors, fetch, where, "document", accepted)
        _, by_document = index.nearest(vectors, fetch, level="document")
        candidates: list[list[str]] = []
        for chunk_hits, doc_vids in zip(by_chunk, by_document, strict=True):
            found = dict.fromkeys(index.vector_record(vid).doc_id for vid, _ in chunk_hits)
            for vid in doc_vids[doc_vids >= 0]:
                doc_id = index.vector_record(int(vid)).doc_id
                if self._accepts(doc_id, where, accepted):
                    found.setdefault(doc_id)
            candidates.append(list(found))
        out: list[list[Hit]] = []
        stored: _StoredVectors | None = None
        for number, (query, docs) in enumerate(zip(vectors, candidates, strict=True)):
            if number % HYBRID_GROUP == 0:  # one reconstruction per group of queries: bounded memory
                group = candidates[number : number + HYBRID_GROUP]
                stored = _StoredVectors(index, {d for docs in group for d in docs})
            assert stored is not None
            document, chunk, top = stored.scores(query, docs, best)
            assert document is not None
            fused = fuse(document, chunk, config)
            order = np.argsort(-fused, kind="stable")[:k]
            out.append(
                [Hit(int(top[i]), float(fused[i]), float(document[i]), float(chunk[i])) for i in order]
            )
        return out

    def _results(
        self,
        query: str,
        hits: list[Hit],
        vector: np.ndarray | None,
        dense: bool,
        budget: int | None,
        preferred: list[Preferred] | None = None,
        batch: _Batch | None = None,
    ) -> list[SearchResult]:
        """The results of one query: each hit's document, span, passage, matched sentence, snippet
        (``preferred``: reranked hits, whose passage is the one the cross-encoder preferred;
        ``batch``: what the queries of one search share)."""
        lexical = self.index.lexical
        batch = batch or _Batch(self.index)
        terms = Terms(query, None if lexical is None else lexical.analyzer)
        found: list[tuple[Hit, DocumentRecord, VectorRecord | None]] = []
        for number, hit in enumerate(hits):
            if preferred is not None:  # reranked: the chunk holding the preferred passage
                doc_id = hit.doc_id if hit.vid is None else self.index.vector_record(hit.vid).doc_id
                assert doc_id is not None
                doc = batch.document(doc_id)
                span = preferred[number].record
            elif hit.vid is None:  # a lexical hit: the chunk holding the most query terms, if chunked
                assert hit.doc_id is not None
                doc = batch.document(hit.doc_id)
                span = lexical_chunk(self.index, doc.doc_id, doc.text, terms)
            else:
                span = self.index.vector_record(hit.vid)
                doc = batch.document(span.doc_id)
                span = span if doc.embed_mode.split("+")[0] in ("chunk", "late") else None
            found.append((hit, doc, span))
        spans: list[Span | None] = [  # the chunk's characters (None: not chunked, or no offsets)
            (span.char_start, span.char_end) if span is not None and span.char_start >= 0 else None
            for _, _, span in found
        ]
        if preferred is not None:  # the preferred passage is the region and the passage
            spans = [p.span for p in preferred]
        regions = [
            Region(doc.text, *(chars or (0, len(doc.text))))
            for (_, doc, _), chars in zip(found, spans, strict=True)
        ]
        by: list[By] = ["dense" if dense else "lexical"] * len(found)
        matched = match(regions, terms, by, vector, self._embed_sentences, budget, batch.shared)
        results = []
        for rank, ((hit, doc, span), chars, sentence) in enumerate(
            zip(found, spans, matched, strict=True), start=1
        ):
            chunk = None if span is None else {key: getattr(span, key) for key in CHUNK_KEYS}
            lo, hi = passage_span(doc.text, chars, sentence)
            shown = render(doc.text, sentence)
            results.append(
                SearchResult(
                    rank=rank,
                    score=hit.score,
                    doc_id=doc.doc_id,
                    source=doc.source,
                    title=doc.title,
                    snippet=shown.text,
                    text=doc.text,
                    embed_mode=doc.embed_mode,
                    n_tokens=doc.n_tokens,
                    chunk=chunk,
                    metadata=doc.metadata,
                    match=describe(doc.text, sentence, shown),
                    passage_span={"char_start": lo, "char_end": hi},
                    document_score=hit.document_score,
                    chunk_score=hit.chunk_score,
                    dense_score=hit.dense_score,
                    lexical_score=hit.lexical_score,
                    rerank=None if preferred is None else preferred[rank - 1].info,
                )
            )
        return results

    def _embed_sentences(self, texts: list[str]) -> np.ndarray:
        vectors, _ = self.index.encoder.embed(texts, role="document")
        return vectors


def _copied(value: Any) -> Any:
    """``value`` copied as :func:`dataclasses.asdict` copies a field (5× faster on a result's JSON
    values: immutable scalars are kept, dicts and lists rebuilt, anything else deep-copied)."""
    if value is None or isinstance(value, str | int | float):
        return value
    if type(value) is dict:
        return {_copied(k): _copied(v) for k, v in value.items()}
    if type(value) is list:
        return [_copied(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return copy.deepcopy(value)


class _Batch:
    """What the queries of one search share: each stored document, read once (each result gets its
    own copy of the metadata), and the snippets' analyses (:class:`~ragidx.search.snippets.Shared`)."""

    def __init__(self, index: Index):
        self.index = index
        self.shared = Shared(None if index.lexical is None else index.lexical.analyzer)
        self.documents: dict[str, DocumentRecord] = {}

    def document(self, doc_id: str) -> DocumentRecord:
        doc = self.documents.get(doc_id)
        if doc is None:  # its first result takes the record read; the others, copies
            doc = self.documents[doc_id] = self.index.document(doc_id)
            return doc
        return replace(doc, metadata=copy.deepcopy(doc.metadata))


def _bm25_of(lexical: LexicalIndex, scores: np.ndarray, doc_id: str) -> float:
    row = lexical.row(doc_id)
    return 0.0 if row is None else float(scores[row])


class _StoredVectors:
    """The stored vectors of some documents, reconstructed once for a search: their chunk vectors
    and, in a hybrid index, their document-level vectors."""

    def __init__(self, index: Index, doc_ids: set[str]):
        self.rows: dict[str, tuple[int, int, int]] = {}  # doc id → (document-level row, chunk rows lo, hi)
        document_vids: list[int] = []
        chunk_vids: list[np.ndarray] = []
        at = 0
        for doc_id in sorted(doc_ids):
            chunks, document_vid = index.vector_ids(doc_id)
            self.rows[doc_id] = (len(self.rows), at, at + len(chunks))
            if document_vid is not None:
                document_vids.append(document_vid)
            chunk_vids.append(chunks)
            at += len(chunks)
        self.chunk_vids = np.concatenate(chunk_vids) if chunk_vids else np.zeros(0, dtype=np.int64)
        self.chunks = index.reconstruct(self.chunk_vids)
        self.documents = (
            index.reconstruct(np.asarray(document_vids, dtype=np.int64), level="document")
            if index.hybrid
            else None
        )

    def scores(
        self, query: np.ndarray, doc_ids: list[str], best: int = 1
    ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
        """Per document: its document cosine (hybrid; else None), its chunk score (the best chunk
        cosine, or the mean of the ``best`` best) and its best chunk's vector id."""
        chunk = self.chunks @ query
        rows = [self.rows[d] for d in doc_ids]
        document = None if self.documents is None else (self.documents @ query)[[row for row, _, _ in rows]]
        if not rows:
            return document, np.zeros(0), np.zeros(0, dtype=np.int64)
        segments = [chunk[lo:hi] for _, lo, hi in rows]
        starts = np.concatenate([[0], np.cumsum([len(s) for s in segments])[:-1]]).astype(np.int64)
        score = best_mean(np.concatenate(segments), starts, best)
        firsts = [lo for _, lo, _ in rows]
        best_rows = [lo + int(np.argmax(seg)) for lo, seg in zip(firsts, segments, strict=True)]
        top = self.chunk_vids[np.asarray(best_rows, dtype=np.int64)]
        return document, score, top
