"""ragidx for LangChain: a retriever, an embeddings class and a vector store.

* :class:`RagidxRetriever` — search an index built by ``ragidx ingest`` (or by the vector store);
* :class:`RagidxEmbeddings` — any ragidx encoder, long documents embedded whole (extend, PCW or
  truncate), as LangChain ``Embeddings`` for any vector store;
* :class:`RagidxVectorStore` — a LangChain ``VectorStore`` on the ragidx index format (FAISS +
  Parquet + manifest), with ragidx's encoder or any LangChain ``Embeddings``.

Needs ``langchain-core`` (``pip install ragidx[langchain]``).
"""

from __future__ import annotations

from ragidx.integrations._shared import framework_guard

with framework_guard(__name__, "langchain-core", "langchain"):
    import langchain_core  # noqa: F401

from ragidx.integrations.langchain.embeddings import RagidxEmbeddings
from ragidx.integrations.langchain.retriever import RagidxRetriever
from ragidx.integrations.langchain.vectorstore import RagidxVectorStore

__all__ = ["RagidxEmbeddings", "RagidxRetriever", "RagidxVectorStore"]
