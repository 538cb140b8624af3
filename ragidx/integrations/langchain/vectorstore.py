"""``RagidxVectorStore``: a LangChain vector store on the ragidx index format.

The store is a ragidx :class:`~ragidx.index.directory.Index` (FAISS + Parquet + manifest, no pickle), held in
memory and written with :meth:`RagidxVectorStore.save`; :meth:`RagidxVectorStore.load` opens any
index directory, including one written by ``ragidx ingest`` (and ``ragidx query``/``info`` read
what the store saved). Two kinds of embedding:

* **ragidx's own encoder** (``embedding=None`` or a :class:`RagidxEmbeddings`): documents go through
  the ragidx pipeline — the long-document policy (chunk by default, as ``ragidx ingest``; pcw,
  truncate, extend) — and the manifest records the model, so ``load`` needs no embedding;
* **any LangChain ``Embeddings``**: one vector per document from ``embed_documents``; the
  manifest records ``langchain:<ClassName>[/<model>]`` and the dimension, and reopening the index
  with another embedding (or without one) is refused with a message naming the right one.

Vectors are L2-normalised and searched by inner product: scores are cosine similarities, and
relevance scores map them to [0, 1] as ``(1 + score) / 2``. Search methods take ``filter`` (a
dict in ragidx's filter language, ``ragidx.search.filters``: ``{"tags": "bees", "year": {"$gte":
2020}}``, or a callable on a ``Document``), applied while ranking. Every search goes through the
index's entry point, :meth:`~ragidx.index.directory.Index.search_by_vectors`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from ragidx.embed.config import EncoderConfig, LongDocConfig
from ragidx.embed.encoder import Encoder
from ragidx.embed.pooling import l2_normalize
from ragidx.errors import InputError, ModelError
from ragidx.index.config import FaissConfig, LexicalConfig
from ragidx.index.directory import Index
from ragidx.index.lock import WriterLock
from ragidx.index.manifest import ExternalEncoderInfo
from ragidx.ingestion.pipeline import add_documents, add_embedded
from ragidx.integrations.langchain.documents import MetadataFilter, from_record, record_filter, to_ragidx
from ragidx.integrations.langchain.embeddings import RagidxEmbeddings
from ragidx.search.options import MODES, Mode


class RagidxVectorStore(VectorStore):
    """A LangChain ``VectorStore`` backed by a ragidx index; see the module docstring."""

    def __init__(
        self,
        embedding: Embeddings | None = None,
        *,
        long_doc: LongDocConfig | None = None,
        faiss_config: FaissConfig | None = None,
        index: Index | None = None,
        lexical: LexicalConfig | None = None,
    ) -> None:
        """A new, empty store. ``embedding``: ``None`` (ragidx's default model), a
        :class:`RagidxEmbeddings`, or any LangChain ``Embeddings``. ``long_doc``: the long-document
        policy for ragidx encoders (default: the embedding's, or chunk). ``faiss_config``: the FAISS
        factory. ``index``: an opened index (use :meth:`load`). ``lexical``: the BM25 index kept
        beside the vectors (default on; ``LexicalConfig(enabled=False)``: none), searched with
        ``similarity_search(query, mode="hybrid" | "lexical")``."""
        self._embedding = embedding
        self._faiss = faiss_config or FaissConfig()
        self._lexical = lexical or LexicalConfig()
        self._index = index
        if index is not None:
            self._check_embedding(index)
            return
        if embedding is None or isinstance(embedding, RagidxEmbeddings):
            if embedding is None:
                policy = long_doc or LongDocConfig()
                encoder = Encoder.from_settings(EncoderConfig(), policy)
            else:
                policy, encoder = long_doc or embedding.long_doc, embedding.encoder
            self._index = Index.create(None, encoder, policy, self._faiss, self._lexical)

    # ----------------------------------------------------------------------------- lifecycle
    @classmethod
    def load(
        cls, directory: str | Path, embedding: Embeddings | None = None, *, device: str | None = None
    ) -> RagidxVectorStore:
        """Open an index directory (from ``ragidx ingest`` or :meth:`save`). An index built with a
        ragidx model needs no ``embedding`` (its model loads from the manifest); one built with
        another LangChain ``Embeddings`` needs the same one again."""
        encoder = embedding.encoder if isinstance(embedding, RagidxEmbeddings) else None
        encoder_config = EncoderConfig(device=device) if device is not None else None
        index = Index.open(directory, encoder=encoder, encoder_config=encoder_config)
        return cls(embedding, index=index)

    def save(self, directory: str | Path | None = None) -> Path:
        """Write the index (to ``directory``, or where it was loaded from / last saved); returns
        the directory. Writes are atomic: readers see the previous generation or this one."""
        if self._index is None:
            raise InputError("nothing to save: the store is empty; add documents first")
        target = directory if directory is not None else self._index.directory
        if target is None:
            raise InputError("an in-memory store: give save() the directory to write it to")
        with WriterLock(target):  # one writer at a time, as for ragidx ingest
            self._index.commit(target)
        return Path(target)

    @property
    def index(self) -> Index | None:
        """The ragidx index behind the store (``None`` until the first document is added to a
        store with an outside embedding)."""
        return self._index

    @property
    def embeddings(self) -> Embeddings | None:
        return self._embedding

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings | None = None,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        directory: str | Path | None = None,
        long_doc: LongDocConfig | None = None,
        faiss_config: FaissConfig | None = None,
        **kwargs: Any,
    ) -> RagidxVectorStore:
        """A store holding ``texts``; saved to ``directory`` when one is given."""
        store = cls(embedding, long_doc=long_doc, faiss_config=faiss_config)
        store.add_texts(texts, metadatas, ids=ids, **kwargs)
        if directory is not None:
            store.save(directory)
        return store

    # ----------------------------------------------------------------------------- writes
    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Add or replace documents (by id: ``ids=`` first, then each ``Document.id``, else a new
        uuid). Nothing is added when one of them cannot be."""
        given = kwargs.get("ids")
        if given is not None and len(given) != len(documents):
            raise InputError(f"{len(given)} ids for {len(documents)} documents; give one id per document")
        ids = [
            (given[i] if given is not None and given[i] else None) or doc.id or uuid.uuid4().hex
            for i, doc in enumerate(documents)
        ]
        latest = {doc_id: i for i, doc_id in enumerate(ids)}  # a repeated id: the last one wins
        chosen = [to_ragidx(documents[i], doc_id) for doc_id, i in latest.items()]
        empty = [doc.doc_id for doc in chosen if not doc.text.strip()]
        if empty:
            raise InputError(f"document {empty[0]!r}: empty text, nothing to embed")
        if not chosen:
            return ids
        if self._native:
            assert self._index is not None
            report = add_documents(self._index, chosen)
            if report.skipped:
                raise InputError(f"document {report.skipped[0].source!r}: {report.skipped[0].reason}")
        else:
            assert self._embedding is not None
            vectors = np.asarray(self._embedding.embed_documents([d.text for d in chosen]), dtype=np.float32)
            if self._index is None:
                info = ExternalEncoderInfo(name=external_name(self._embedding), dim=vectors.shape[1])
                self._index = Index.create(None, info, faiss_config=self._faiss, lexical=self._lexical)
            add_embedded(self._index, chosen, vectors)
        return ids

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete documents by id (unknown ids are ignored); ``None`` deletes every document."""
        if self._index is None:
            return True
        self._index.remove(self._index.doc_ids() if ids is None else ids)
        return True

    # ----------------------------------------------------------------------------- reads
    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The documents with these ids (unknown ids are left out)."""
        if self._index is None:
            return []
        return [from_record(record) for record in self._index.get(ids)]

    def similarity_search(
        self, query: str, k: int = 4, *, filter: MetadataFilter | None = None, **kwargs: Any
    ) -> list[Document]:
        return [doc for doc, _ in self.similarity_search_with_score(query, k, filter=filter, **kwargs)]

    def similarity_search_with_score(
        self, query: str, k: int = 4, *, filter: MetadataFilter | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` best documents with their cosine similarity (higher is closer). ``mode``:
        ``"dense"`` (the default, LangChain's contract: scores are cosines), ``"hybrid"`` (BM25
        fused with the cosine; the score is the fused one, the metadata has ``dense_score`` and
        ``lexical_score``) or ``"lexical"`` (BM25)."""
        if self._is_empty():
            return []
        mode = kwargs.get("mode", "dense")
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: use {', '.join(MODES)}")
        vector = None if mode == "lexical" else self._embed_query(query)
        return self._search(vector, k, filter, query=query, mode=mode)

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, *, filter: MetadataFilter | None = None, **kwargs: Any
    ) -> list[Document]:
        if self._is_empty():
            return []
        return [doc for doc, _ in self._search(np.asarray(embedding, dtype=np.float32), k, filter)]

    def max_marginal_relevance_search(
        self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        if self._is_empty():
            return []
        vector = self._embed_query(query).tolist()
        return self.max_marginal_relevance_search_by_vector(vector, k, fetch_k, lambda_mult, **kwargs)

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        *,
        filter: MetadataFilter | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Maximal marginal relevance over the ``fetch_k`` best documents (each by its best vector)."""
        index = self._index
        if index is None or len(index) == 0:
            return []
        vector = np.asarray(embedding, dtype=np.float32)
        where = None if filter is None else record_filter(filter)
        found = index.search_by_vectors([""], vector, max(fetch_k, k), where=where, mode="dense")[0]
        if not found:
            return []
        query = l2_normalize(vector.reshape(1, -1))[0]
        best = []  # each document's vector closest to the query: the one it was ranked by
        for result in found:
            chunks, _ = index.vector_ids(result.doc_id)
            best.append(int(chunks[int(np.argmax(index.vectors_of(chunks.tolist()) @ query))]))
        chosen = maximal_marginal_relevance(
            vector, list(index.vectors_of(best)), k=min(k, len(found)), lambda_mult=lambda_mult
        )
        records = index.get([found[i].doc_id for i in chosen])
        return [from_record(record) for record in records]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return lambda score: (1.0 + score) / 2.0

    # ----------------------------------------------------------------------------- internals
    @property
    def _native(self) -> bool:
        """True when ragidx's own encoder embeds the documents."""
        if self._index is not None:
            return not self._index.external
        return self._embedding is None or isinstance(self._embedding, RagidxEmbeddings)

    def _check_embedding(self, index: Index) -> None:
        built = index.manifest.encoder
        if isinstance(built, ExternalEncoderInfo):
            given = None if self._embedding is None else external_name(self._embedding)
            if given != built.name:
                raise ModelError(
                    f"{index.name}: index was built with {built.name} ({built.dim}-d vectors), "
                    f"not {given or 'ragidx'}; load it with embedding=<that Embeddings>"
                )
        elif self._embedding is not None and not isinstance(self._embedding, RagidxEmbeddings):
            raise ModelError(
                f"{index.name}: index was built with the ragidx model {built.name}, not "
                f"{external_name(self._embedding)}; load it without embedding= (or with RagidxEmbeddings)"
            )

    def _is_empty(self) -> bool:
        return self._index is None or len(self._index) == 0

    def _embed_query(self, query: str) -> np.ndarray:
        assert self._index is not None
        if self._native:
            vectors, _ = self._index.encoder.embed([query], role="query")
            vector: np.ndarray = vectors[0]
            return vector
        assert self._embedding is not None
        return np.asarray(self._embedding.embed_query(query), dtype=np.float32)

    def _search(
        self,
        vector: np.ndarray | None,
        k: int,
        filter: MetadataFilter | None,
        query: str = "",
        mode: Mode = "dense",
    ) -> list[tuple[Document, float]]:
        assert self._index is not None
        where = None if filter is None else record_filter(filter)
        results = self._index.search_by_vectors([query], vector, k, where=where, mode=mode)[0]
        records = self._index.get([r.doc_id for r in results])
        out = []
        for record, result in zip(records, results, strict=True):
            document = from_record(record)
            for key in ("dense_score", "lexical_score"):
                if getattr(result, key) is not None:
                    document.metadata[key] = getattr(result, key)
            out.append((document, result.score))
        return out


def external_name(embedding: Embeddings) -> str:
    """How the manifest names a LangChain embedding: ``langchain:<ClassName>[/<model>]``."""
    name = f"langchain:{type(embedding).__name__}"
    for attribute in ("model", "model_name"):
        value = getattr(embedding, attribute, None)
        if isinstance(value, str) and value:
            return f"{name}/{value}"
    return name
