"""``RagidxRetriever``: a LangChain retriever over a ragidx index directory.

What ``page_content`` holds depends on ``search_type``:

* ``"passage"`` (the default, for retrieval-augmented generation): the passage of each of the ``k``
  best documents that matched (``ragidx.search.passages``): its best chunk, or for a document
  embedded as one vector its text when short, else about 2,000 characters of whole sentences around
  the sentence that matched; ``context_chunks=N`` adds N neighbouring chunks on each side;
* ``"document"``: each document's whole text (ranked the same way);
* ``"chunk"``: the chunks themselves are ranked (several of one document may come back).

The metadata carries the document's own metadata plus ``doc_id``, ``source``, ``title``, ``score``,
``rank``, ``snippet``, ``embed_mode`` (how the document was embedded: ``whole``, ``chunk``, ``pcw``,
``truncate``, ``extend:<method>``, ``late``, ``late+extend:<method>``), ``n_tokens``, ``chunk`` (the
matching token/character span of a chunked or late-chunked document, else ``None``), ``chunk_id``
(``<doc_id>#<ordinal>``, else ``None``), ``passage`` (``char_start``/``char_end`` of
``page_content`` in the document) and ``match`` (the sentence most similar to the query: its text,
its span in the document, how it was chosen, and the query's terms in the snippet); from a hybrid
index also ``document_score`` and ``chunk_score``, the two cosines ``score`` fuses.

``rerank`` (a cross-encoder as ``MODEL[:N]``, or :class:`~ragidx.search.options.Rerank`) re-scores
the first stage's N best documents on their best passages (``ragidx.search.rerank``; loaded once per
process): ``page_content`` is then the passage the cross-encoder preferred, ``score`` its score, and
the metadata's ``rerank`` holds it with the first stage's score and rank and the time it took.

``filter`` (a dict in ragidx's filter language, ``ragidx.search.filters``, as ``ragidx query --where``
and the server take it: ``{"tags": "bees", "year": {"$gte": 2020}, "source": "docs/*.md"}``; or a
callable on a ``Document``) is applied while ranking, so a filtered search still returns ``k``
documents when ``k`` match; ``score_threshold`` drops results scoring below it (cosine similarity).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import run_in_executor
from pydantic import ConfigDict, Field, field_validator

from ragidx.embed.config import EncoderConfig, HybridConfig
from ragidx.index.directory import Index
from ragidx.integrations._shared import SearchType, passage_bounds, result_metadata
from ragidx.integrations.langchain.documents import MetadataFilter, record_filter, to_langchain
from ragidx.search.options import LexicalWeight, Mode, Rerank, Sentences
from ragidx.search.retriever import SearchResult


class RagidxRetriever(BaseRetriever):
    """Search a ragidx index; see the module docstring. Build it with :meth:`from_index`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: Index
    k: int = Field(4, ge=1, description="how many documents (or chunks) to return")
    score_threshold: float | None = Field(None, description="drop results scoring below this")
    filter: dict[str, Any] | Callable[[Document], bool] | None = Field(
        None,
        description="conditions to match (ragidx.search.filters: {'format': 'pdf', 'year': {'$gte': 2020}}), "
        "or a callable on each candidate Document",
    )
    search_type: SearchType = Field(
        "passage",
        description="passage: each matching document's passage (its best chunk); document: its whole "
        "text; chunk: rank the chunks themselves",
    )
    context_chunks: int = Field(
        0, ge=0, description="passage, chunk: add this many neighbouring chunks on each side of a passage"
    )
    hybrid: HybridConfig | None = Field(
        None, description="a hybrid index: fuse its document and chunk cosines this way, not the manifest's"
    )
    mode: Mode | None = Field(
        None,
        description="rank by the vectors, by BM25, or both fused (default: hybrid where the index has a "
        "lexical index, else dense); each Document's metadata has dense_score and lexical_score",
    )
    lexical_weight: LexicalWeight | None = Field(
        None, description="hybrid: BM25's weight in [0, 1], or 'rrf' (default: the index's)"
    )
    sentences: Sentences | None = Field(
        "lexical",
        description="how metadata['match'] is chosen: lexical (default: the query's words, no model "
        "call: the passage sent is the same either way), dense (the index's encoder settles what the "
        "words cannot, about +0.3-0.6 s per query on a 2-core CPU), auto (dense within 32 sentences)",
    )
    best_chunks: int | None = Field(
        None,
        ge=1,
        description="a chunked index: score a document by the mean of its N best chunks (default: as "
        "the index was ingested; 1: its best chunk)",
    )
    rerank: Rerank | str | None = Field(
        None,
        description="re-score the first stage's N best documents with a cross-encoder, on their best "
        "passages: 'MODEL[:N]' (a folder or hub id; N default 50) or a Rerank",
    )

    @field_validator("rerank")
    @classmethod
    def _rerank(cls, value: Rerank | str | None) -> Rerank | None:
        """A spec string read once, when the retriever is made (a bad one fails here)."""
        return None if value is None else Rerank.of(value)

    @classmethod
    def from_index(
        cls,
        path: str | Path,
        k: int = 4,
        *,
        device: str | None = None,
        **kwargs: Any,
    ) -> RagidxRetriever:
        """Open the index at ``path`` (its model loads on the first query); ``kwargs`` set
        ``score_threshold``, ``filter``, ``search_type``, ``context_chunks``, ``hybrid``,
        ``best_chunks`` and the usual retriever fields."""
        encoder_config = EncoderConfig(device=device) if device is not None else None
        return cls(index=Index.open(path, encoder_config=encoder_config), k=k, **kwargs)

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        score_threshold: float | None = None,
        filter: MetadataFilter | None = None,
        search_type: SearchType | None = None,
    ) -> list[Document]:
        """``k``, ``score_threshold``, ``filter`` and ``search_type`` override the retriever's own
        for this call (``retriever.invoke(query, k=2)``)."""
        chosen = self.filter if filter is None else filter
        threshold = self.score_threshold if score_threshold is None else score_threshold
        kind = search_type or self.search_type
        results = self.index.search(
            query,
            k or self.k,
            where=None if chosen is None else record_filter(chosen),
            per="chunk" if kind == "chunk" else "document",
            hybrid=self.hybrid,
            best_chunks=self.best_chunks,
            mode=self.mode,
            lexical_weight=self.lexical_weight,
            sentences=self.sentences,
            rerank=self.rerank,
        )
        return [self._document(r, kind) for r in results if threshold is None or r.score >= threshold]

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        score_threshold: float | None = None,
        filter: MetadataFilter | None = None,
        search_type: SearchType | None = None,
    ) -> list[Document]:
        """The same search in a worker thread (the encoder and FAISS are synchronous)."""
        return await run_in_executor(
            None,
            self._get_relevant_documents,
            query,
            run_manager=run_manager.get_sync(),
            k=k,
            score_threshold=score_threshold,
            filter=filter,
            search_type=search_type,
        )

    def _document(self, result: SearchResult, kind: SearchType) -> Document:
        """One result as a LangChain ``Document``: its passage (widened by ``context_chunks``) or
        its whole text, and the metadata of the module docstring."""
        start, end = passage_bounds(self.index, result, kind, self.context_chunks)
        return to_langchain(result.doc_id, result.text[start:end], result_metadata(result, start, end))
