"""RagidxVectorStore: LlamaIndex's contract (the base class, VectorStoreIndex end to end, delete by
ref_doc_id), MetadataFilters against LlamaIndex's own SimpleVectorStore as the reference, hybrid
and text modes as ragidx's fusion and BM25, persistence, and refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import Document, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

from ragidx.embed.encoder import Encoder
from ragidx.errors import ConfigError, InputError
from ragidx.index.directory import Index
from ragidx.integrations.llamaindex import RagidxEmbedding, RagidxVectorStore
from tests.conftest import long_text

F, Op = MetadataFilter, FilterOperator


def test_it_is_a_llamaindex_vector_store() -> None:
    """The check every LlamaIndex vector-store integration starts with."""
    names = [base.__name__ for base in RagidxVectorStore.__mro__]
    assert BasePydanticVectorStore.__name__ in names
    assert RagidxVectorStore().stores_text and RagidxVectorStore.class_name() == "RagidxVectorStore"


def _nodes() -> list[TextNode]:
    """Eight nodes of two documents, random 8-d embeddings, varied metadata (lists, numbers, text)."""
    rng = np.random.default_rng(0)
    metadata = [
        {"author": "ann", "year": 2019, "tags": ["bees", "ants"], "score": 0.5},
        {"author": "bob", "year": 2020, "tags": ["bees"], "score": 1.5},
        {"author": "cy", "year": 2021, "tags": ["wasps"], "score": 2.5},
        {"author": "ann", "year": 2022, "tags": ["ants", "wasps"]},
        {"author": "dee", "year": 2023, "tags": [], "score": 0.0},
        {"author": "bob", "year": 2018, "tags": ["bees", "wasps"], "score": 3.0},
        {"author": "eve", "year": 2024, "tags": ["moths"], "score": 1.0},
        {"author": "cy", "year": 2020, "tags": ["ants"], "score": 2.0},
    ]
    return [
        TextNode(
            id_=f"n{i}",
            text=f"node {i} about {' and '.join(meta['tags']) or 'nothing'}",
            metadata=meta,
            embedding=rng.normal(size=8).tolist(),
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id="docA" if i < 4 else "docB")},
        )
        for i, meta in enumerate(metadata)
    ]


NESTED = MetadataFilters(
    filters=[
        F(key="year", value=2019, operator=Op.GT),
        MetadataFilters(
            filters=[F(key="author", value="cy"), F(key="author", value="dee")],
            condition=FilterCondition.OR,
        ),
    ]
)  # SimpleVectorStore refuses nested filters

FILTERS = {
    "eq": MetadataFilters(filters=[F(key="author", value="ann")]),
    "ne": MetadataFilters(filters=[F(key="author", value="ann", operator=Op.NE)]),
    "gt": MetadataFilters(filters=[F(key="year", value=2020, operator=Op.GT)]),
    "lte float": MetadataFilters(filters=[F(key="score", value=1.5, operator=Op.LTE)]),
    "in": MetadataFilters(filters=[F(key="author", value=["bob", "eve"], operator=Op.IN)]),
    "nin": MetadataFilters(filters=[F(key="author", value=["bob", "eve"], operator=Op.NIN)]),
    "any": MetadataFilters(filters=[F(key="tags", value=["moths", "wasps"], operator=Op.ANY)]),
    "all": MetadataFilters(filters=[F(key="tags", value=["bees", "wasps"], operator=Op.ALL)]),
    "contains": MetadataFilters(filters=[F(key="tags", value="ants", operator=Op.CONTAINS)]),
    "and": MetadataFilters(
        filters=[
            F(key="year", value=2019, operator=Op.GTE),
            F(key="tags", value="bees", operator=Op.CONTAINS),
        ]
    ),
    "or": MetadataFilters(
        filters=[F(key="author", value="eve"), F(key="year", value=2019, operator=Op.LT)],
        condition=FilterCondition.OR,
    ),
    "not": MetadataFilters(filters=[F(key="author", value="bob")], condition=FilterCondition.NOT),
}


@pytest.mark.parametrize("name", list(FILTERS))
def test_metadata_filters_select_what_llamaindex_simple_store_selects(name: str) -> None:
    reference, store = SimpleVectorStore(), RagidxVectorStore(embed_name="random")
    reference.add(_nodes())
    store.add(_nodes())
    query = VectorStoreQuery(query_embedding=_nodes()[0].embedding, similarity_top_k=8, filters=FILTERS[name])
    expected, got = reference.query(query), store.query(query)
    assert expected.ids  # every case selects something, and not everything (but "not"/"ne")
    assert got.ids == expected.ids
    assert got.similarities == pytest.approx(expected.similarities, abs=1e-5)  # cosines, same order


def test_is_empty_and_doc_and_node_ids() -> None:
    store = RagidxVectorStore()
    store.add([*_nodes(), TextNode(id_="bare", text="no metadata at all", embedding=[1.0] * 8)])
    vector = [1.0] * 8
    empty = MetadataFilters(filters=[F(key="score", value=None, operator=Op.IS_EMPTY)])
    assert sorted(store.query(VectorStoreQuery(vector, 10, filters=empty)).ids or []) == ["bare", "n3"]
    assert sorted(store.query(VectorStoreQuery(vector, 10, doc_ids=["docB"])).ids or []) == [
        "n4", "n5", "n6", "n7"
    ]  # fmt: skip
    assert sorted(store.query(VectorStoreQuery(vector, 10, filters=NESTED)).ids or []) == ["n2", "n4", "n7"]
    query = VectorStoreQuery(vector, 10, doc_ids=["docA"], node_ids=["n1", "n2", "n5"], filters=FILTERS["ne"])
    assert sorted(store.query(query).ids or []) == ["n1", "n2"]


def test_delete_by_ref_doc_id_get_nodes_delete_nodes_and_clear() -> None:
    store = RagidxVectorStore()
    store.add(_nodes())
    store.delete("docA")
    assert sorted(n.node_id for n in store.get_nodes()) == ["n4", "n5", "n6", "n7"]
    (node,) = store.get_nodes(["n5", "n0"])
    assert node.ref_doc_id == "docB" and node.metadata["tags"] == ["bees", "wasps"]
    assert "ref_doc_id" not in node.metadata and node.get_content() == "node 5 about bees and wasps"
    store.delete_nodes(filters=FILTERS["nin"])  # drops the nodes of neither bob nor eve
    assert sorted(n.node_id for n in store.get_nodes()) == ["n5", "n6"]
    store.delete_nodes(["n6"])
    assert [n.node_id for n in store.get_nodes()] == ["n5"]
    store.clear()
    assert store.get_nodes() == [] and store.query(VectorStoreQuery([1.0] * 8, 3)).ids == []


def test_vector_store_index_end_to_end_with_ragidx_embedding(tiny_encoder: Encoder, tmp_path: Path) -> None:
    """LlamaIndex's own pipeline: documents split into nodes, embedded, stored, retrieved, deleted;
    the persisted index opens again (and in ragidx's CLI format)."""
    embedding = RagidxEmbedding(encoder=tiny_encoder)
    store = RagidxVectorStore(embedding)
    assert not store.is_embedding_query  # ragidx embeds the query text with the index's encoder
    documents = [Document(text=long_text(120, seed=i), id_=f"doc{i}", metadata={"n": i}) for i in range(3)]
    context = StorageContext.from_defaults(vector_store=store)
    index = VectorStoreIndex.from_documents(documents, storage_context=context, embed_model=embedding)
    query = long_text(120, seed=1)[:200]
    found = index.as_retriever(similarity_top_k=2).retrieve(query)
    assert found[0].node.ref_doc_id == "doc1" and found[0].node.metadata["n"] == 1
    direct = store.client.search(query, 2, mode="dense")  # type: ignore[union-attr]
    assert [f.node.node_id for f in found] == [r.doc_id for r in direct]
    assert [f.score for f in found] == pytest.approx([r.score for r in direct], abs=1e-6)

    index.delete_ref_doc("doc1")
    assert all(f.node.ref_doc_id != "doc1" for f in index.as_retriever(similarity_top_k=5).retrieve(query))
    store.persist(str(tmp_path / "idx"))
    reopened = RagidxVectorStore.from_index(tmp_path / "idx")
    assert (
        not reopened.is_embedding_query and Index.open(tmp_path / "idx").doc_ids() == store.client.doc_ids()
    )  # type: ignore[union-attr]
    again = VectorStoreIndex.from_vector_store(reopened, embed_model=embedding)
    assert [f.node.node_id for f in again.as_retriever(similarity_top_k=2).retrieve(query)] == [
        f.node.node_id for f in index.as_retriever(similarity_top_k=2).retrieve(query)
    ]


def test_hybrid_is_ragidx_fusion_and_text_search_is_bm25() -> None:
    store = RagidxVectorStore()
    store.add(_nodes())
    index = store.client
    assert index is not None
    vector = np.asarray(_nodes()[2].embedding, dtype=np.float32).reshape(1, -1)
    words = "wasps and ants"
    for alpha in (None, 0.0, 0.3, 1.0):
        query = VectorStoreQuery(
            vector[0].tolist(), 5, query_str=words, mode=VectorStoreQueryMode.HYBRID, alpha=alpha
        )
        weight = None if alpha is None else 1.0 - alpha
        (expected,) = index.search_by_vectors([words], vector, 5, mode="hybrid", lexical_weight=weight)
        got = store.query(query)
        assert got.ids == [r.doc_id for r in expected] and got.similarities == [r.score for r in expected]
        assert all("dense_score" in n.metadata and "lexical_score" in n.metadata for n in got.nodes or [])
    for mode in (VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.SPARSE):
        got = store.query(VectorStoreQuery(None, 3, query_str=words, mode=mode))
        assert got.ids == [r.doc_id for r in index.search_by_vectors([words], None, 3, mode="lexical")[0]]
        assert got.ids and got.ids[0] in {"n3", "n2", "n5", "n0"}  # a node about wasps or ants


def test_refusals_are_one_line() -> None:
    store = RagidxVectorStore()
    with pytest.raises(InputError, match="node 'x' has no embedding"):
        store.add([TextNode(id_="x", text="unembedded")])
    store.add(_nodes())
    with pytest.raises(InputError, match="node embeddings are 3-d, the store holds 8-d"):
        store.add([TextNode(id_="y", text="short", embedding=[1.0, 0.0, 0.0])])
    text = MetadataFilters(filters=[F(key="author", value="an", operator=Op.TEXT_MATCH)])
    cases = [
        (VectorStoreQuery([1.0] * 8, 2, mode=VectorStoreQueryMode.MMR), "query mode 'mmr' is not supported"),
        (VectorStoreQuery([1.0] * 8, 2, filters=text), "operator 'text_match' is not in ragidx's filter"),
        (
            VectorStoreQuery([1.0] * 8, 2, query_str="a", mode=VectorStoreQueryMode.HYBRID, alpha=2.0),
            "alpha 2.0",
        ),
    ]
    for query, message in cases:
        with pytest.raises(ConfigError, match=message) as info:
            store.query(query)
        assert "\n" not in str(info.value)
    both = MetadataFilters(filters=[F(key="a", value=1), F(key="b", value=2)], condition=FilterCondition.NOT)
    with pytest.raises(ConfigError, match="NOT applies to one condition"):
        store.query(VectorStoreQuery([1.0] * 8, 2, filters=both))
    with pytest.raises(InputError, match="no query_embedding"):
        store.query(VectorStoreQuery(None, 2, query_str="words"))


def test_vector_store_index_with_llamaindex_embedding_persists_and_reopens(
    tiny_encoder: Encoder, tmp_path: Path
) -> None:
    """Nodes and queries embedded by LlamaIndex (here with RagidxEmbedding as its embed_model): the
    manifest names the model, and the reopened store still wants query vectors."""
    embed_model = RagidxEmbedding(encoder=tiny_encoder)
    store = RagidxVectorStore(embed_name=embed_model.model_name)
    assert store.is_embedding_query
    documents = [Document(text=long_text(60, seed=i), id_=f"doc{i}") for i in range(4)]
    context = StorageContext.from_defaults(vector_store=store)
    index = VectorStoreIndex.from_documents(documents, storage_context=context, embed_model=embed_model)
    query = long_text(60, seed=2)[:150]
    found = index.as_retriever(similarity_top_k=3).retrieve(query)
    direct = store.query(VectorStoreQuery(embed_model.get_query_embedding(query), 3))
    assert [f.node.node_id for f in found] == direct.ids and [f.score for f in found] == direct.similarities
    store.persist(str(tmp_path / "idx"))
    manifest = Index.open(tmp_path / "idx").manifest.encoder
    assert (manifest.name, manifest.dim) == (f"llamaindex:{embed_model.model_name}", tiny_encoder.dim)
    reopened = RagidxVectorStore.from_index(tmp_path / "idx")
    assert reopened.is_embedding_query and reopened.embed_name == embed_model.model_name
    again = VectorStoreIndex.from_vector_store(reopened, embed_model=embed_model)
    assert [f.node.node_id for f in again.as_retriever(similarity_top_k=3).retrieve(query)] == direct.ids
