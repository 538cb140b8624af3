"""RagidxRetriever: langchain-tests' standard suite, parity with ``ragidx query --json``, options."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
from langchain_core.documents import Document
from langchain_tests.integration_tests import RetrieversIntegrationTests
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.embed.config import HybridConfig
from ragidx.embed.encoder import Encoder
from ragidx.errors import ConfigError
from ragidx.index.directory import Index
from ragidx.integrations.langchain import RagidxRetriever

runner = CliRunner()


@pytest.fixture(scope="module")
def examples(example_index: Path, default_encoder: Encoder) -> Index:
    """``examples/docs`` with the real default model, opened once for this module."""
    return Index.open(example_index, encoder=default_encoder)


class TestRagidxRetrieverStandard(RetrieversIntegrationTests):
    params: ClassVar[dict[str, Any]] = {}

    @pytest.fixture(autouse=True)
    def _index(self, examples: Index) -> None:
        type(self).params = {"index": examples}

    @property
    def retriever_constructor(self) -> type[RagidxRetriever]:
        return RagidxRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return self.params

    @property
    def retriever_query_example(self) -> str:
        return "How do honeybees tell each other where the flowers are?"


def test_same_top_k_as_ragidx_query_json(example_index: Path) -> None:
    query = "Which lighthouse still guides ships today?"
    result = runner.invoke(app, ["query", query, "-i", str(example_index), "-k", "5", "--json"])
    assert result.exit_code == 0, result.output
    expected = [(hit["doc_id"], hit["score"]) for hit in json.loads(result.stdout)]

    docs = RagidxRetriever.from_index(example_index, k=5, device="cpu").invoke(query)
    assert [(d.id, d.metadata["doc_id"]) for d in docs] == [(i, i) for i, _ in expected]
    assert [d.metadata["score"] for d in docs] == pytest.approx([s for _, s in expected], abs=1e-6)


def test_passages_by_default_with_their_span_and_matched_sentence(examples: Index) -> None:
    query = "Who designed the Eddystone tower?"
    (lexical,) = RagidxRetriever(index=examples, k=1).invoke(query)  # default: by the query's words
    assert lexical.metadata["match"]["by"] == "lexical"
    (doc,) = RagidxRetriever(index=examples, k=1, sentences="dense").invoke(query)
    assert doc.page_content == lexical.page_content  # the same passage either way
    record = examples.store.document("lighthouses.txt")
    meta = doc.metadata
    assert doc.id == "lighthouses.txt" and meta["doc_id"] == "lighthouses.txt"
    assert meta["title"] == record.title and meta["source"] == record.source and meta["format"] == "text"
    assert meta["rank"] == 1 and meta["embed_mode"] == "chunk" and meta["n_tokens"] == record.n_tokens
    span, passage = meta["chunk"], meta["passage"]
    assert 0 <= span["char_start"] < span["char_end"] <= len(record.text)
    assert passage == {"char_start": span["char_start"], "char_end": span["char_end"]}
    assert doc.page_content == record.text[span["char_start"] : span["char_end"]]
    assert len(doc.page_content) < len(record.text)  # the passage, not the whole document
    assert meta["chunk_id"] == f"lighthouses.txt#{span['ordinal']}"
    match = meta["match"]
    assert match["by"] == "dense" and "Eddystone" in match["text"]
    assert record.text[match["char_start"] : match["char_end"]] == match["text"]
    assert span["char_start"] <= match["char_start"] < match["char_end"] <= span["char_end"]
    assert "Eddystone" in match["terms"] and meta["snippet"] and "Eddystone" in meta["snippet"]
    (words,) = RagidxRetriever(index=examples, k=1, sentences="lexical").invoke(query)
    assert words.metadata["match"]["by"] == "lexical" and words.page_content == doc.page_content


def test_search_type_document_returns_whole_documents(examples: Index) -> None:
    query = "Who designed the Eddystone tower?"
    passages = RagidxRetriever(index=examples, k=3).invoke(query)
    documents = RagidxRetriever(index=examples, k=3, search_type="document").invoke(query)
    assert [d.id for d in documents] == [d.id for d in passages]  # ranked the same way
    for whole, passage in zip(documents, passages, strict=True):
        text = examples.store.document(whole.id or "").text
        assert whole.page_content == text and whole.metadata["passage"] == {
            "char_start": 0,
            "char_end": len(text),
        }
        assert passage.page_content in text and whole.metadata["match"] == passage.metadata["match"]
    assert sum(len(d.page_content) for d in passages) < sum(len(d.page_content) for d in documents)
    per_call = RagidxRetriever(index=examples, k=1).invoke(query, search_type="document")
    assert per_call[0].page_content == documents[0].page_content


def test_context_chunks_add_the_neighbouring_chunks(examples: Index) -> None:
    query = "Who designed the Eddystone tower?"
    (alone,) = RagidxRetriever(index=examples, k=1).invoke(query)
    (wider,) = RagidxRetriever(index=examples, k=1, context_chunks=1).invoke(query)
    vids, _ = examples.vector_ids("lighthouses.txt")
    spans = sorted(
        (
            examples.vector_record(int(v)).ordinal,
            examples.vector_record(int(v)).char_start,
            examples.vector_record(int(v)).char_end,
        )
        for v in vids
    )
    ordinal = alone.metadata["chunk"]["ordinal"]
    lo, hi = max(ordinal - 1, 0), min(ordinal + 1, len(spans) - 1)
    text = examples.store.document("lighthouses.txt").text
    assert wider.metadata["passage"] == {"char_start": spans[lo][1], "char_end": spans[hi][2]}
    assert (
        wider.page_content == text[spans[lo][1] : spans[hi][2]] and alone.page_content in wider.page_content
    )
    assert len(spans) > 1 and len(wider.page_content) > len(alone.page_content)


def test_chunk_search_returns_passages(examples: Index) -> None:
    retriever = RagidxRetriever(index=examples, k=3, search_type="chunk")
    docs = retriever.invoke("the history of lighthouses and their lenses")
    assert len(docs) == 3
    lighthouse = [d for d in docs if d.id == "lighthouses.txt"]
    assert len(lighthouse) >= 2  # several chunks of one document: not merged
    text = examples.store.document("lighthouses.txt").text
    for doc in lighthouse:
        span = doc.metadata["chunk"]
        assert doc.page_content == text[span["char_start"] : span["char_end"]] != text
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)


def test_filters_still_return_k_documents(examples: Index) -> None:
    query = "How do bees communicate?"  # markdown documents are about bread and git: far down
    by_dict = RagidxRetriever(index=examples, k=2, filter={"format": "markdown"}).invoke(query)
    assert sorted(d.id for d in by_dict) == ["git-rebase.md", "sourdough.md"]
    faq: Any = lambda d: d.id.startswith("faq-")  # noqa: E731
    by_callable = RagidxRetriever(index=examples, k=3).invoke(query, filter=faq)
    assert len(by_callable) == 3 and all(d.id.startswith("faq-") for d in by_callable)
    none = RagidxRetriever(index=examples, k=3, filter={"format": "docx"}).invoke(query)
    assert none == []


def test_score_threshold_and_k_per_call(examples: Index) -> None:
    retriever = RagidxRetriever(index=examples, k=10)
    query = "Who discovered the meaning of the bee waggle dance?"
    everything = retriever.invoke(query)
    assert len(everything) == 10 and len(retriever.invoke(query, k=2)) == 2
    cut = everything[0].metadata["score"] - 0.05
    kept = retriever.invoke(query, score_threshold=cut)
    assert kept == [d for d in everything if d.metadata["score"] >= cut]
    assert [d.id for d in kept] == ["honeybees.html"]


async def test_ainvoke_takes_the_same_options(examples: Index) -> None:
    retriever = RagidxRetriever(index=examples, k=4)
    docs = await retriever.ainvoke("How hot should the oven be for sourdough?", k=1)
    assert [d.id for d in docs] == ["sourdough.md"]
    assert isinstance(docs[0], Document)


# ----------------------------------------------------------------------------- late, hybrid, budget indexes
def test_retriever_on_a_hybrid_late_index(hybrid_index: Path) -> None:
    retriever = RagidxRetriever.from_index(hybrid_index, k=3, device="cpu")
    query = "Sentence 3 says river stone"
    docs = retriever.invoke(query)
    hits = Index.open(hybrid_index).search(query, k=3)
    assert [d.id for d in docs] == [h.doc_id for h in hits] and len(docs) == 3
    for doc, hit in zip(docs, hits, strict=True):
        assert doc.metadata["score"] == pytest.approx(hit.score)
        assert doc.metadata["embed_mode"] in ("late", "whole")
        assert doc.metadata["document_score"] == pytest.approx(hit.document_score)
        assert doc.metadata["chunk_score"] == pytest.approx(hit.chunk_score)
        if doc.metadata["embed_mode"] == "late":
            assert doc.metadata["chunk"]["ordinal"] >= 0 and doc.metadata["chunk"]["char_end"] > 0
    by_document = RagidxRetriever.from_index(
        hybrid_index, k=8, hybrid=HybridConfig(fusion="weighted", weight=1.0), mode="dense"
    ).invoke(query)
    scores = [d.metadata["score"] for d in by_document]
    assert scores == pytest.approx([d.metadata["document_score"] for d in by_document])
    best_two = RagidxRetriever.from_index(hybrid_index, k=5, best_chunks=2).invoke(query)
    expected = Index.open(hybrid_index).search(query, k=5, best_chunks=2)
    assert [(d.id, d.metadata["chunk_score"]) for d in best_two] == [
        (h.doc_id, h.chunk_score) for h in expected
    ]
    chunks = retriever.invoke(query, search_type="chunk", k=4)
    for doc in chunks:
        span = doc.metadata["chunk"]
        if span is not None:
            full = Index.open(hybrid_index).store.document(doc.id).text
            assert doc.page_content == full[span["char_start"] : span["char_end"]]


def test_retriever_on_a_late_index_with_a_vector_budget(tmp_path: Path, tiny_model: Path) -> None:
    from ragidx.ingestion.pipeline import ingest
    from tests.conftest import long_text, tiny_config

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"d{i}.txt").write_text(long_text(100, seed=i))
    long_doc = {"policy": "late", "chunk_size": 16, "overlap": 0, "vectors_per_doc": 2}
    ingest(docs, tmp_path / "ix", tiny_config(tiny_model, long_doc))
    found = RagidxRetriever.from_index(tmp_path / "ix", k=3).invoke(long_text(100, seed=1)[:120])
    assert sorted(d.id for d in found) == ["d0.txt", "d1.txt", "d2.txt"]
    assert {d.metadata["embed_mode"] for d in found} == {"late"}
    assert {d.metadata["chunk"]["ordinal"] for d in found} <= {0, 1}  # two vectors per document


# ----------------------------------------------------------------------------- reranking
def test_rerank_returns_the_reranked_passages(hybrid_index: Path, tiny_cross_encoder: Path) -> None:
    query = "Sentence 3 says river stone"
    retriever = RagidxRetriever.from_index(hybrid_index, k=3, device="cpu", rerank=f"{tiny_cross_encoder}:8")
    docs = retriever.invoke(query)
    hits = Index.open(hybrid_index).search(query, k=3, rerank=f"{tiny_cross_encoder}:8")
    assert [d.id for d in docs] == [h.doc_id for h in hits] and len(docs) == 3
    for doc, hit in zip(docs, hits, strict=True):
        info = doc.metadata["rerank"]
        assert hit.rerank is not None and info["score"] == pytest.approx(hit.rerank["score"])
        assert doc.metadata["score"] == pytest.approx(info["score"])
        assert doc.page_content == hit.text[info["char_start"] : info["char_end"]]  # the preferred passage
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)
    with pytest.raises(ConfigError, match="give 1 or more"):
        RagidxRetriever.from_index(hybrid_index, rerank=f"{tiny_cross_encoder}:0")
