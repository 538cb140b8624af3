"""``RagidxVectorStore``: a LlamaIndex vector store on the ragidx index format.

The store is a ragidx :class:`~ragidx.index.directory.Index` (FAISS + Parquet + manifest, no pickle,
BM25 beside the vectors), held in memory and written with :meth:`RagidxVectorStore.persist`;
:meth:`RagidxVectorStore.from_index` opens any index directory, including one from ``ragidx
ingest``. Each node is one ragidx document: its id, text and metadata, plus ``ref_doc_id`` (what
:meth:`delete` matches). Two kinds of embedding:

* **LlamaIndex's** (``RagidxVectorStore()``, the default): nodes arrive embedded by the index's
  ``embed_model``, one vector each; queries carry that model's query vector. The manifest records
  ``llamaindex:<name>`` and the dimension, and a node or query of another dimension is refused;
* **ragidx's own encoder** (``RagidxVectorStore(embedding=RagidxEmbedding(...))``, or an index
  from ``ragidx ingest``): nodes are embedded by ragidx's pipeline and long-document policy (chunk
  by default, as ``ragidx ingest``; pcw, truncate, extend) and queries by the index's encoder, so
  ``is_embedding_query`` is False and LlamaIndex sends the query text.

``query`` maps LlamaIndex's modes onto ragidx's: ``default`` → ``dense``, ``hybrid`` → ragidx's
dense/BM25 fusion (``alpha``, LlamaIndex's weight of the vectors, becomes ``lexical_weight = 1 -
alpha``; without it the index's own weight), ``sparse``/``text_search`` → BM25 alone. ``filters``
(``MetadataFilters``), ``doc_ids`` and ``node_ids`` (empty lists restrict nothing: ``VectorStoreIndex``
sends ``node_ids=[]`` to a store that holds the text) become one ragidx filter
(``ragidx.integrations.llamaindex.nodes.to_filter``), applied while ranking. Similarities are
cosines (dense), fused scores (hybrid) or BM25 scores (lexical). Every search goes through
:meth:`~ragidx.index.directory.Index.search_by_vectors` or :meth:`~ragidx.index.directory.Index.search`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from pydantic import PrivateAttr

from ragidx.embed.config import EncoderConfig, LongDocConfig
from ragidx.errors import ConfigError, InputError
from ragidx.index.config import FaissConfig, LexicalConfig
from ragidx.index.directory import Index
from ragidx.index.lock import WriterLock
from ragidx.index.manifest import ExternalEncoderInfo
from ragidx.index.store import DocumentRecord
from ragidx.ingestion.pipeline import add_documents, add_embedded
from ragidx.integrations.llamaindex.embedding import RagidxEmbedding
from ragidx.integrations.llamaindex.nodes import REF_DOC_ID, from_record, ref_doc_id, to_filter, to_ragidx
from ragidx.search.filters import Filter
from ragidx.search.options import LexicalWeight, Mode

MODES: dict[VectorStoreQueryMode, Mode] = {
    VectorStoreQueryMode.DEFAULT: "dense",
    VectorStoreQueryMode.HYBRID: "hybrid",
    VectorStoreQueryMode.SPARSE: "lexical",
    VectorStoreQueryMode.TEXT_SEARCH: "lexical",
}


class RagidxVectorStore(BasePydanticVectorStore):
    """A LlamaIndex vector store backed by a ragidx index; see the module docstring."""

    stores_text: bool = True
    flat_metadata: bool = False
    is_embedding_query: bool = True
    embed_name: str = "llamaindex"

    _index: Index | None = PrivateAttr(default=None)
    _faiss: FaissConfig = PrivateAttr(default_factory=FaissConfig)
    _lexical: LexicalConfig = PrivateAttr(default_factory=LexicalConfig)

    def __init__(
        self,
        embedding: RagidxEmbedding | None = None,
        *,
        embed_name: str = "llamaindex",
        long_doc: LongDocConfig | None = None,
        faiss_config: FaissConfig | None = None,
        lexical: LexicalConfig | None = None,
        index: Index | None = None,
    ) -> None:
        """A new, empty store. ``embedding``: ``None`` (nodes come embedded by LlamaIndex; the
        manifest names their model ``llamaindex:<embed_name>``) or a :class:`RagidxEmbedding` (ragidx
        embeds the nodes with ``long_doc``, default: chunk, as ``ragidx ingest``). ``faiss_config``:
        the FAISS factory; ``lexical``: the BM25 index (default on; ``LexicalConfig(enabled=False)``:
        none). ``index``: an opened index (use :meth:`from_index`)."""
        native = (index is not None and not index.external) or embedding is not None
        super().__init__(stores_text=True, is_embedding_query=not native)
        self.embed_name = embed_name
        self._faiss = faiss_config or FaissConfig()
        self._lexical = lexical or LexicalConfig()
        self._index = index
        if index is None and embedding is not None:
            policy = long_doc or LongDocConfig()
            self._index = Index.create(None, embedding.encoder, policy, self._faiss, self._lexical)

    @classmethod
    def from_index(cls, directory: str | Path, *, device: str | None = None) -> RagidxVectorStore:
        """Open an index directory (from ``ragidx ingest`` or :meth:`persist`)."""
        encoder_config = EncoderConfig(device=device) if device is not None else None
        index = Index.open(directory, encoder_config=encoder_config)
        if index.external:
            name = index.manifest.encoder.name
            embed_name = name.removeprefix("llamaindex:") if name.startswith("llamaindex:") else name
            return cls(index=index, embed_name=embed_name)
        return cls(index=index)

    @classmethod
    def class_name(cls) -> str:
        return "RagidxVectorStore"

    @property
    def client(self) -> Index | None:
        """The ragidx index behind the store (``None`` until the first node is added to a store
        embedded by LlamaIndex)."""
        return self._index

    def persist(self, persist_path: str, fs: Any = None) -> None:
        """Write the index to the directory ``persist_path`` (atomically: readers see the previous
        generation or this one). Local directories only: ``fs`` must be None."""
        if fs is not None:
            raise ConfigError("RagidxVectorStore.persist writes a local directory; fs is not supported")
        if self._index is None:
            raise InputError("nothing to persist: the store is empty; add nodes first")
        with WriterLock(persist_path):  # one writer at a time, as for ragidx ingest
            self._index.commit(persist_path)

    # ----------------------------------------------------------------------------- writes
    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Add or replace nodes (by node id; a repeated id: the last one wins). Nothing is added
        when one of them cannot be."""
        latest = {node.node_id: node for node in nodes}
        chosen = [to_ragidx(node) for node in latest.values()]
        empty = [doc.doc_id for doc in chosen if not doc.text.strip()]
        if empty:
            raise InputError(f"node {empty[0]!r}: empty text, nothing to embed")
        if not chosen:
            return []
        if not self.is_embedding_query:
            assert self._index is not None
            report = add_documents(self._index, chosen)
            if report.skipped:
                raise InputError(f"node {report.skipped[0].source!r}: {report.skipped[0].reason}")
            return [node.node_id for node in nodes]
        missing = [node.node_id for node in latest.values() if node.embedding is None]
        if missing:
            raise InputError(
                f"node {missing[0]!r} has no embedding: embed nodes first (VectorStoreIndex does), or "
                "create the store with RagidxVectorStore(embedding=RagidxEmbedding())"
            )
        vectors = np.asarray([node.embedding for node in latest.values()], dtype=np.float32)
        if self._index is None:
            info = ExternalEncoderInfo(name=f"llamaindex:{self.embed_name}", dim=vectors.shape[1])
            self._index = Index.create(None, info, faiss_config=self._faiss, lexical=self._lexical)
        dim = self._index.manifest.encoder.dim
        if vectors.ndim != 2 or vectors.shape[1] != dim:
            raise InputError(
                f"node embeddings are {vectors.shape[-1]}-d, the store holds {dim}-d vectors from "
                f"{self._index.manifest.encoder.name}; embed every node with the same model"
            )
        add_embedded(self._index, chosen, vectors)
        return [node.node_id for node in nodes]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node of the LlamaIndex document ``ref_doc_id`` (a ``ragidx ingest`` document:
        the document with that id)."""
        if self._index is not None:
            self._index.remove(self._matching(Filter.from_mapping({}), {ref_doc_id}))

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        """Delete the nodes with these ids that match ``filters`` (either may be None, not both)."""
        if node_ids is None and filters is None:
            raise InputError("delete_nodes: give node_ids or filters (clear() deletes every node)")
        if self._index is not None:
            where = to_filter(filters) if filters is not None else Filter.from_mapping({})
            candidates = self._index.get(node_ids) if node_ids is not None else None
            self._index.remove(self._matching(where, None, candidates))

    def clear(self) -> None:
        """Delete every node."""
        if self._index is not None:
            self._index.remove(self._index.doc_ids())

    # ----------------------------------------------------------------------------- reads
    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        """The stored nodes with these ids (unknown ids left out) that match ``filters``."""
        if self._index is None:
            return []
        where = to_filter(filters) if filters is not None else Filter.from_mapping({})
        records = self._index.get(node_ids if node_ids is not None else self._index.doc_ids())
        return [from_record(record) for record in records if where.matches(record)]

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The ``similarity_top_k`` best nodes; see the module docstring for modes and filters."""
        mode = MODES.get(query.mode)
        if mode is None:
            names = ", ".join(m.value for m in MODES)
            raise ConfigError(
                f"query mode {query.mode.value!r} is not supported by RagidxVectorStore; use {names}"
            )
        index = self._index
        if index is None or len(index) == 0:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        text = query.query_str or ""
        if mode != "dense" and not text:
            raise InputError(f"mode {query.mode.value!r} ranks by the query's words: give query_str")
        weight: LexicalWeight | None = None
        if mode == "hybrid" and query.alpha is not None:
            if not 0.0 <= query.alpha <= 1.0:
                raise ConfigError(f"alpha {query.alpha}: give a weight in [0, 1] (1: the vectors alone)")
            weight = 1.0 - query.alpha
        options: dict[str, Any] = {"where": self._where(query), "mode": mode, "lexical_weight": weight}
        if mode == "lexical":
            results = index.search_by_vectors([text], None, query.similarity_top_k, **options)[0]
        elif query.query_embedding is not None:
            vector = np.asarray(query.query_embedding, dtype=np.float32).reshape(1, -1)
            results = index.search_by_vectors([text], vector, query.similarity_top_k, **options)[0]
        elif not index.external and text:
            results = index.search(text, query.similarity_top_k, **options)
        else:
            raise InputError("the query has no query_embedding: embed it with the nodes' embed_model")
        records = {record.doc_id: record for record in index.get([r.doc_id for r in results])}
        nodes: list[BaseNode] = []
        for result in results:
            node = from_record(records[result.doc_id])
            for key in ("dense_score", "lexical_score"):
                if getattr(result, key) is not None:
                    node.metadata[key] = getattr(result, key)
            nodes.append(node)
        return VectorStoreQueryResult(
            nodes=nodes, similarities=[r.score for r in results], ids=[r.doc_id for r in results]
        )

    # ----------------------------------------------------------------------------- internals
    def _where(self, query: VectorStoreQuery) -> Filter | None:
        parts: list[dict[str, Any]] = []
        if query.node_ids:  # VectorStoreIndex sends [] for a store that holds the text: no restriction
            parts.append({"doc_id": {"$in": list(query.node_ids)}})
        if query.doc_ids:  # ref_doc_id, or the id of a document from ragidx ingest
            wanted = list(query.doc_ids)
            parts.append({"$or": [{REF_DOC_ID: {"$in": wanted}}, {"doc_id": {"$in": wanted}}]})
        where = to_filter(query.filters) if query.filters is not None else None
        if not parts:
            return where
        ids = Filter.from_mapping({"$and": parts}, name="doc_ids/node_ids")
        if where is None:
            return ids
        return Filter(ids.conditions + where.conditions, ids.any_of + where.any_of)

    def _matching(
        self, where: Filter, refs: set[str] | None, candidates: list[DocumentRecord] | None = None
    ) -> list[str]:
        assert self._index is not None
        records = candidates if candidates is not None else self._index.get(self._index.doc_ids())
        return [
            record.doc_id
            for record in records
            if (refs is None or ref_doc_id(record) in refs) and where.matches(record)
        ]
