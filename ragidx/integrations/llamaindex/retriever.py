"""``RagidxRetriever``: a LlamaIndex retriever over a ragidx index directory.

It returns ``NodeWithScore``s, ranked by ``Index.search`` exactly as ``ragidx query`` and the
LangChain retriever rank them (same ids, passages and scores). What each node's text holds
depends on ``search_type``:

* ``"passage"`` (the default, for retrieval-augmented generation): the passage of each of the
  ``k`` best documents (``ragidx.search.passages``): its best chunk, or for a document embedded as
  one vector about 2,000 characters of whole sentences around the sentence that matched;
  ``context_chunks=N`` adds N neighbouring chunks on each side;
* ``"document"``: each document's whole text (ranked the same way);
* ``"chunk"``: the chunks themselves are ranked (several of one document may come back).

Each node's id is the document's id (``"chunk"``: the chunk's, ``<doc_id>#<ordinal>``, since
LlamaIndex keeps one node per id) and its ``SOURCE`` relationship the document's;
``start_char_idx``/``end_char_idx`` give the passage's span in the document, and its metadata
carries the document's metadata plus ``doc_id``, ``source``, ``title``, ``score``, ``rank``,
``snippet``, ``embed_mode``, ``n_tokens``, ``chunk``, ``chunk_id``, ``passage`` and ``match`` (the
sentence most similar to the query), as on the LangChain side
(``ragidx.integrations.langchain.retriever``). ``filters`` (LlamaIndex ``MetadataFilters`` or a
dict in ragidx's filter language) apply while ranking, so a filtered search still returns ``k``.
``rerank`` (``MODEL[:N]`` or a :class:`~ragidx.search.options.Rerank`) re-scores the first stage's
N best documents with a cross-encoder (``ragidx.search.rerank``): each node's text is then the passage
it preferred and its metadata's ``rerank`` says how it was scored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle

from ragidx.embed.config import EncoderConfig, HybridConfig
from ragidx.errors import ConfigError
from ragidx.index.directory import Index
from ragidx.integrations._shared import SearchType, passage_bounds
from ragidx.integrations.llamaindex.nodes import Filters, result_node, to_filter
from ragidx.search.filters import Filter
from ragidx.search.options import LexicalWeight, Mode, Rerank, Sentences
from ragidx.search.retriever import SearchResult

SEARCH_TYPES: tuple[SearchType, ...] = ("passage", "document", "chunk")


class RagidxRetriever(BaseRetriever):
    """Search a ragidx index; see the module docstring. ``RagidxRetriever.from_index(path)`` opens
    one (its model loads on the first query)."""

    def __init__(
        self,
        index: Index,
        k: int = 4,
        *,
        search_type: SearchType = "passage",
        filters: Filters | None = None,
        score_threshold: float | None = None,
        context_chunks: int = 0,
        mode: Mode | None = None,
        lexical_weight: LexicalWeight | None = None,
        sentences: Sentences | None = "lexical",
        best_chunks: int | None = None,
        hybrid: HybridConfig | None = None,
        rerank: Rerank | str | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        """``k``: how many documents (or chunks); ``mode``: dense, lexical (BM25) or hybrid (the
        default where the index has a lexical index); ``sentences``: how ``metadata["match"]`` is
        chosen (lexical: no model call; dense: the index's encoder); ``rerank``: a cross-encoder
        re-scores the first stage's best documents (``MODEL[:N]``); the other options as on
        ``ragidx.integrations.langchain.RagidxRetriever``."""
        if k < 1:
            raise ConfigError(f"k: {k}; give at least 1")
        if search_type not in SEARCH_TYPES:
            raise ConfigError(f"search_type {search_type!r}: use {', '.join(SEARCH_TYPES)}")
        if context_chunks < 0:
            raise ConfigError(f"context_chunks: {context_chunks}; give 0 or more")
        self.index = index
        self.k = k
        self.search_type: SearchType = search_type
        self.where: Filter | None = None if filters is None else to_filter(filters)
        self.score_threshold = score_threshold
        self.context_chunks = context_chunks
        self.mode = mode
        self.lexical_weight = lexical_weight
        self.sentences = sentences
        self.best_chunks = best_chunks
        self.hybrid = hybrid
        self.rerank = None if rerank is None else Rerank.of(rerank)  # a bad spec fails here
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_index(
        cls, path: str | Path, k: int = 4, *, device: str | None = None, **kwargs: Any
    ) -> RagidxRetriever:
        """Open the index at ``path``; ``kwargs`` are the constructor's options."""
        encoder_config = EncoderConfig(device=device) if device is not None else None
        return cls(Index.open(path, encoder_config=encoder_config), k, **kwargs)

    def search(
        self, query: str, *, k: int | None = None, filters: Filters | None = None
    ) -> list[NodeWithScore]:
        """:meth:`retrieve` with ``k`` and ``filters`` overridden for this call."""
        where = self.where if filters is None else to_filter(filters)
        results = self.index.search(
            query,
            k or self.k,
            where=where,
            per="chunk" if self.search_type == "chunk" else "document",
            hybrid=self.hybrid,
            best_chunks=self.best_chunks,
            mode=self.mode,
            lexical_weight=self.lexical_weight,
            sentences=self.sentences,
            rerank=self.rerank,
        )
        threshold = self.score_threshold
        return [self._node(r) for r in results if threshold is None or r.score >= threshold]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self.search(query_bundle.query_str)

    def _node(self, result: SearchResult) -> NodeWithScore:
        start, end = passage_bounds(self.index, result, self.search_type, self.context_chunks)
        node = result_node(result, start, end, per_chunk=self.search_type == "chunk")
        return NodeWithScore(node=node, score=result.score)
