"""RagidxRetriever for LlamaIndex: the same top-k ids, passages, scores and metadata as the LangChain
retriever on the same index and query (the issue's parity target), search types, filters, async."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document as LangChainDocument
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeWithScore, TextNode
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from ragidx.embed.encoder import Encoder
from ragidx.errors import ConfigError
from ragidx.index.directory import Index
from ragidx.integrations import langchain as lc
from ragidx.integrations.llamaindex import RagidxRetriever
from tests.conftest import long_text, tiny_config


def _same(nodes: list[NodeWithScore], documents: list[LangChainDocument]) -> None:
    """The LlamaIndex nodes carry what the LangChain documents carry: ids, text, metadata, scores."""
    assert [n.node.metadata["doc_id"] for n in nodes] == [d.id for d in documents]
    for n in nodes:  # a chunk's node has the chunk's id (LlamaIndex keeps one node per id)
        chunk_id = n.node.metadata["chunk_id"]
        assert (
            n.node.node_id in (n.node.metadata["doc_id"], chunk_id)
            and n.node.ref_doc_id == n.node.metadata["doc_id"]
        )
    assert [n.node.get_content() for n in nodes] == [d.page_content for d in documents]
    assert [n.node.metadata for n in nodes] == [d.metadata for d in documents]
    assert [n.score for n in nodes] == [d.metadata["score"] for d in documents]
    for n in nodes:
        assert isinstance(n.node, TextNode)
        span = n.node.metadata["passage"]
        assert (n.node.start_char_idx, n.node.end_char_idx) == (span["char_start"], span["char_end"])


@pytest.fixture(scope="module")
def chunked(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Index:
    """Six documents, chunked by a tiny model (several chunks each), with metadata to filter on."""
    from ragidx.ingestion.pipeline import ingest

    root = tmp_path_factory.mktemp("llamaindex-chunked")
    (root / "docs").mkdir()
    for i in range(6):
        (root / "docs" / f"d{i}.txt").write_text(long_text(140, seed=10 + i))
    ingest(
        root / "docs",
        root / "ix",
        tiny_config(tiny_model, {"policy": "chunk", "chunk_size": 32, "overlap": 0}),
    )
    return Index.open(root / "ix")


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"search_type": "document"},
        {"search_type": "chunk"},
        {"context_chunks": 1},
        {"mode": "lexical"},
        {"mode": "dense", "sentences": "dense"},
        {"mode": "hybrid", "lexical_weight": 0.7},
    ],
    ids=["passage", "document", "chunk", "context", "lexical", "dense", "hybrid"],
)
def test_same_top_k_ids_and_passages_as_langchain(chunked: Index, options: dict[str, Any]) -> None:
    query = long_text(140, seed=12)[300:420]
    nodes = RagidxRetriever(chunked, 4, **options).retrieve(query)
    documents = lc.RagidxRetriever(index=chunked, k=4, **options).invoke(query)
    assert len(nodes) == 4
    _same(nodes, documents)


def test_same_as_langchain_on_a_hybrid_late_index(hybrid_index: Path, tiny_encoder: Encoder) -> None:
    index = Index.open(hybrid_index)
    query = "Sentence 3 says river stone"
    _same(RagidxRetriever(index, 5).retrieve(query), lc.RagidxRetriever(index=index, k=5).invoke(query))
    assert all("document_score" in n.node.metadata for n in RagidxRetriever(index, 3).retrieve(query))


def test_passages_by_default_whole_documents_on_request(chunked: Index) -> None:
    query = long_text(140, seed=13)[200:320]
    passages = RagidxRetriever(chunked, 3).retrieve(query)
    documents = RagidxRetriever(chunked, 3, search_type="document").retrieve(query)
    assert [n.node.node_id for n in passages] == [n.node.node_id for n in documents]
    for passage, whole in zip(passages, documents, strict=True):
        text = chunked.document(whole.node.node_id).text
        assert whole.node.get_content() == text and passage.node.get_content() in text
        assert len(passage.node.get_content()) < len(text)  # the passage, not the whole document
        meta = passage.node.metadata
        assert meta["chunk_id"] == f"{meta['doc_id']}#{meta['chunk']['ordinal']}"
        match = meta["match"]
        assert text[match["char_start"] : match["char_end"]] == match["text"]
        assert passage.node.ref_doc_id == meta["doc_id"]


def test_metadata_filters_and_dicts_apply_while_ranking(chunked: Index) -> None:
    query = long_text(140, seed=12)[300:420]
    wanted = MetadataFilters(
        filters=[MetadataFilter(key="doc_id", value=["d0.txt", "d5.txt"], operator=FilterOperator.IN)]
    )
    found = RagidxRetriever(chunked, 4, filters=wanted).retrieve(query)
    assert sorted(n.node.node_id for n in found) == ["d0.txt", "d5.txt"]
    same = RagidxRetriever(chunked, 4, filters={"doc_id": {"$in": ["d0.txt", "d5.txt"]}}).retrieve(query)
    assert [n.node.node_id for n in same] == [n.node.node_id for n in found]
    per_call = RagidxRetriever(chunked, 4).search(query, k=1, filters={"doc_id": "d4.txt"})
    assert [n.node.node_id for n in per_call] == ["d4.txt"]
    everything = RagidxRetriever(chunked, 6).retrieve(query)
    cut = everything[2].score
    assert cut is not None
    kept = RagidxRetriever(chunked, 6, score_threshold=cut).retrieve(query)
    assert [n.node.node_id for n in kept] == [n.node.node_id for n in everything[:3]]


async def test_aretrieve_and_a_query_engine(chunked: Index) -> None:
    query = long_text(140, seed=14)[100:200]
    retriever = RagidxRetriever(chunked, 2)
    found = await retriever.aretrieve(query)
    assert [n.node.node_id for n in found] == [n.node.node_id for n in retriever.retrieve(query)]
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())  # it echoes the prompt
    response = engine.query(query)
    assert [n.node.node_id for n in response.source_nodes] == [n.node.node_id for n in found]
    assert found[0].node.get_content() in str(response)  # the passage reached the prompt


def test_bad_options_are_refused_in_one_line(chunked: Index) -> None:
    with pytest.raises(ConfigError, match="search_type 'page': use passage, document, chunk"):
        RagidxRetriever(chunked, search_type="page")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="k: 0; give at least 1"):
        RagidxRetriever(chunked, 0)
    with pytest.raises(ConfigError, match=r"filters\.year\.\$gte: give a number or a string"):
        RagidxRetriever(chunked, filters={"year": {"$gte": None}})


@pytest.mark.slow
def test_same_top_k_as_langchain_on_the_examples_with_the_bundled_model(
    example_index: Path, default_encoder: Encoder
) -> None:
    index = Index.open(example_index, encoder=default_encoder)
    for query in ("Who designed the Eddystone tower?", "How do honeybees tell where the flowers are?"):
        for search_type in ("passage", "document", "chunk"):
            nodes = RagidxRetriever(index, 5, search_type=search_type).retrieve(query)  # type: ignore[arg-type]
            documents = lc.RagidxRetriever(index=index, k=5, search_type=search_type).invoke(query)  # type: ignore[arg-type]
            _same(nodes, documents)
            per_chunk = search_type == "chunk"
            assert [n.node.node_id for n in nodes] == [
                d.metadata["chunk_id"] if per_chunk else d.id for d in documents
            ]
    (top,) = RagidxRetriever(index, 1).retrieve("Who designed the Eddystone tower?")
    assert top.node.node_id == "lighthouses.txt" and "Eddystone" in top.node.get_content()


def test_rerank_gives_the_same_nodes_as_langchain(chunked: Index, tiny_cross_encoder: Path) -> None:
    query = long_text(140, seed=12)[300:420]
    spec = f"{tiny_cross_encoder}:6"
    nodes = RagidxRetriever(chunked, 3, rerank=spec).retrieve(query)
    documents = lc.RagidxRetriever(index=chunked, k=3, rerank=spec).invoke(query)
    for node, document in zip(nodes, documents, strict=True):
        node.node.metadata["rerank"].pop("ms"), document.metadata["rerank"].pop("ms")  # the time differs
    _same(nodes, documents)
    for node in nodes:
        info = node.node.metadata["rerank"]
        assert node.score == pytest.approx(info["score"])
        assert (node.node.start_char_idx, node.node.end_char_idx) == (info["char_start"], info["char_end"])
    with pytest.raises(ConfigError, match="give 1 or more"):
        RagidxRetriever(chunked, rerank=f"{tiny_cross_encoder}:0")
