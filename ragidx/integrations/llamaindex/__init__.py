"""ragidx for LlamaIndex: a retriever, an embedding model and a vector store.

* :class:`RagidxRetriever` — search an index built by ``ragidx ingest`` (or by the vector store);
  ``NodeWithScore`` passages with the same ids, passages and metadata as the LangChain retriever;
* :class:`RagidxEmbedding` — any ragidx encoder, long texts embedded whole (extend, PCW or
  truncate), as a LlamaIndex ``BaseEmbedding``;
* :class:`RagidxVectorStore` — a ``BasePydanticVectorStore`` on the ragidx index format (FAISS +
  Parquet + manifest), with LlamaIndex's embed model or ragidx's encoder, ``MetadataFilters`` in
  ragidx's filter language and hybrid queries as ragidx's dense/BM25 fusion.

Needs ``llama-index-core`` (``pip install ragidx[llamaindex]``).
"""

from __future__ import annotations

from ragidx.integrations._shared import framework_guard

with framework_guard(__name__, "llama-index-core", "llamaindex"):
    import llama_index.core  # noqa: F401

from ragidx.integrations.llamaindex.embedding import RagidxEmbedding
from ragidx.integrations.llamaindex.retriever import RagidxRetriever
from ragidx.integrations.llamaindex.vectorstore import RagidxVectorStore

__all__ = ["RagidxEmbedding", "RagidxRetriever", "RagidxVectorStore"]
