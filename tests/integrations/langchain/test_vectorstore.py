"""RagidxVectorStore: langchain-tests' standard suite (with its fake embeddings and with a ragidx
encoder), the shared index format with the CLI, refusing the wrong embedding, MMR and filters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_tests.integration_tests import VectorStoreIntegrationTests
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.embed.config import LongDocConfig
from ragidx.embed.encoder import Encoder
from ragidx.errors import InputError, ModelError
from ragidx.index.directory import Index
from ragidx.index.manifest import ExternalEncoderInfo
from ragidx.integrations.langchain import RagidxEmbeddings, RagidxVectorStore
from ragidx.integrations.langchain.vectorstore import external_name

runner = CliRunner()


class TestRagidxVectorStoreStandard(VectorStoreIntegrationTests):
    """The standard suite with its deterministic fake embeddings (vectors made outside ragidx)."""

    @pytest.fixture()
    def vectorstore(self) -> RagidxVectorStore:
        return RagidxVectorStore(self.get_embeddings())


class TestRagidxVectorStoreStandardRagidxEncoder(VectorStoreIntegrationTests):
    """The standard suite again, documents embedded by a ragidx encoder (a tiny random model)."""

    @pytest.fixture()
    def vectorstore(self, tiny_encoder: Encoder) -> RagidxVectorStore:
        return RagidxVectorStore(RagidxEmbeddings(encoder=tiny_encoder))


class Table(Embeddings):
    """Fixed 3-d vectors per text: similarities known by construction."""

    vectors: ClassVar[dict[str, list[float]]] = {
        "fruit": [1.0, 0.0, 0.2],
        "apple": [1.0, 0.0, 0.0],
        "apple pie": [0.99, 0.14, 0.0],
        "pear": [0.7, 0.0, 0.71],
        "car": [0.0, 1.0, 0.0],
    }

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.vectors[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.vectors[text]


def test_mmr_trades_a_near_duplicate_for_diversity() -> None:
    store = RagidxVectorStore.from_texts(["apple", "apple pie", "pear", "car"], Table(), ids=list("abcd"))
    assert [d.id for d in store.similarity_search("fruit", k=2)] == ["a", "b"]
    # "apple pie" is nearly "apple": after "apple", MMR (lambda 0.5) prefers "pear"
    assert [d.id for d in store.max_marginal_relevance_search("fruit", k=2, fetch_k=4)] == ["a", "c"]
    mmr = store.max_marginal_relevance_search_by_vector([1.0, 0.0, 0.2], k=2, lambda_mult=1.0)
    assert [d.id for d in mmr] == ["a", "b"]  # lambda 1: plain relevance
    as_mmr = store.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 4})
    assert [d.id for d in as_mmr.invoke("fruit")] == ["a", "c"]
    threshold = {"score_threshold": 0.95}  # relevance (1 + cosine) / 2
    close = store.as_retriever(search_type="similarity_score_threshold", search_kwargs=threshold)
    assert [d.id for d in close.invoke("apple")] == ["a", "b"]
    scored = store.similarity_search_with_relevance_scores("apple", k=4)
    assert [round(s, 3) for _, s in scored] == [1.0, 0.995, 0.851, 0.5]  # (1 + cosine) / 2


def test_filters_apply_while_ranking() -> None:
    texts = [f"text {i}" for i in range(30)]
    metadatas = [{"parity": i % 2, "i": i} for i in range(30)]
    store = RagidxVectorStore.from_texts(texts, DeterministicFakeEmbedding(size=16), metadatas)
    odd = store.similarity_search("text 4", k=5, filter={"parity": 1})
    assert len(odd) == 5 and all(d.metadata["parity"] == 1 for d in odd)
    few = store.similarity_search("text 4", k=5, filter=lambda d: d.metadata["i"] in (3, 17))
    assert sorted(d.metadata["i"] for d in few) == [3, 17]
    even = store.max_marginal_relevance_search("text 4", k=3, filter={"parity": 0})
    assert len(even) == 3 and all(d.metadata["parity"] == 0 for d in even)


def test_save_load_and_the_wrong_embedding_is_refused(tmp_path: Path) -> None:
    fake = DeterministicFakeEmbedding(size=8)
    store = RagidxVectorStore.from_texts(["foo", "bar", "baz"], fake, [{"n": 1}, {"n": 2}, {"n": 3}])
    assert store.save(tmp_path / "ix") == tmp_path / "ix"
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    name = "langchain:DeterministicFakeEmbedding"
    assert manifest["encoder"] == {"kind": "external", "name": name, "dim": 8}
    assert not list((tmp_path / "ix").glob("*.pkl"))

    again = RagidxVectorStore.load(tmp_path / "ix", DeterministicFakeEmbedding(size=8))
    assert again.similarity_search_with_score("bar", k=1) == store.similarity_search_with_score("bar", k=1)
    with pytest.raises(ModelError, match=rf"built with {name} \(8-d vectors\), not ragidx; load it with"):
        RagidxVectorStore.load(tmp_path / "ix")
    with pytest.raises(ModelError, match="not langchain:Table"):
        RagidxVectorStore.load(tmp_path / "ix", Table())
    with pytest.raises(ModelError, match="query vectors are 6-d, the index holds 8-d"):
        RagidxVectorStore.load(tmp_path / "ix", DeterministicFakeEmbedding(size=6)).similarity_search("bar")

    # the CLI reads it, and says how to query it
    info = runner.invoke(app, ["info", str(tmp_path / "ix")])
    assert info.exit_code == 0 and name in info.stdout and "(vectors made outside" in info.stdout
    query = runner.invoke(app, ["query", "bar", "-i", str(tmp_path / "ix")])
    assert query.exit_code == 1 and f"made outside ragidx by {name}; search it with" in query.stderr


def test_an_index_from_ragidx_ingest_opens_without_an_embedding(example_index: Path) -> None:
    store = RagidxVectorStore.load(example_index, device="cpu")
    query = "Who invented Bircher muesli?"
    expected = Index.open(example_index).search(query, k=3, mode="dense")  # the store: cosines
    scored = store.similarity_search_with_score(query, k=3)
    assert [(d.id, round(s, 5)) for d, s in scored] == [(r.doc_id, round(r.score, 5)) for r in expected]
    doc = scored[0][0]
    assert doc.metadata["source"].endswith("cafe-zurich.txt") and doc.metadata["encoding"] == "cp1252"
    with pytest.raises(ModelError, match="ragidx model .*all-MiniLM-L6-v2, not langchain:Table"):
        RagidxVectorStore.load(example_index, Table())


def test_a_store_with_a_ragidx_encoder_is_a_ragidx_index(tmp_path: Path, tiny_encoder: Encoder) -> None:
    chunks = LongDocConfig(chunk_size=24, overlap=4)  # the store keeps every chunk (RagidxEmbeddings: one)
    store = RagidxVectorStore(RagidxEmbeddings(encoder=tiny_encoder), long_doc=chunks)
    long = " ".join(f"Sentence {i} tells of the river stone and the winter light." for i in range(40))
    store.add_texts([long, "beta garden music"], [{"kind": "long"}, {"kind": "short"}], ids=["long", "short"])
    store.save(tmp_path / "ix")
    index = Index.open(tmp_path / "ix")
    assert index.store.document("long").embed_mode == "chunk" and index.store.document("long").n_vectors > 5
    result = runner.invoke(
        app, ["query", "beta garden music", "-i", str(tmp_path / "ix"), "-k", "1", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["doc_id"] == "short"
    # and the CLI can keep ingesting into it
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "more.txt").write_text("gamma orange harbor")
    assert runner.invoke(app, ["ingest", str(docs), "-i", str(tmp_path / "ix"), "-q"]).exit_code == 0
    reopened = RagidxVectorStore.load(tmp_path / "ix", RagidxEmbeddings(encoder=tiny_encoder))
    found = reopened.get_by_ids(["long", "short", "more.txt", "nope"])
    assert [d.id for d in found] == ["long", "short", "more.txt"]


def test_bad_input_is_refused_before_anything_is_added() -> None:
    store = RagidxVectorStore(DeterministicFakeEmbedding(size=4))
    with pytest.raises(InputError, match="document 'b': empty text"):
        store.add_texts(["fine", "  "], ids=["a", "b"])
    with pytest.raises(InputError, match="metadata is not JSON-serialisable"):
        store.add_texts(["fine"], [{"when": object()}], ids=["a"])
    with pytest.raises(InputError, match="nothing to save"):
        store.save("unused")
    assert store.get_by_ids(["a"]) == []
    with pytest.raises(InputError, match="2 ids for 1 documents"):
        store.add_documents([Document(page_content="x")], ids=["a", "b"])


def test_delete_everything_and_repeated_ids() -> None:
    store = RagidxVectorStore(DeterministicFakeEmbedding(size=4))
    assert store.add_texts(["one", "two", "three"], ids=["x", "y", "x"]) == ["x", "y", "x"]
    assert [d.page_content for d in store.get_by_ids(["x"])] == ["three"]  # the last one wins
    assert store.delete() is True
    assert store.similarity_search("one") == [] and store.index is not None and len(store.index) == 0


def test_external_names_include_the_model() -> None:
    class Remote(Table):
        model = "text-embedding-3-small"

    assert external_name(Remote()) == "langchain:Remote/text-embedding-3-small"
    assert ExternalEncoderInfo(name=external_name(Table()), dim=3).name == "langchain:Table"
    vectors = np.asarray(Table().embed_documents(["apple"]))
    assert vectors.shape == (1, 3)


def test_save_takes_the_writer_lock_and_never_drops_another_writers_commit(tmp_path: Path) -> None:
    from ragidx.errors import IndexFormatError
    from ragidx.index.lock import IndexLockedError, WriterLock

    fake = DeterministicFakeEmbedding(size=8)
    store = RagidxVectorStore.from_texts(["foo", "bar"], fake, ids=["a", "b"])
    store.save(tmp_path / "ix")
    with WriterLock(tmp_path / "ix"), pytest.raises(IndexLockedError, match="wait for it to finish"):
        store.save()
    other = RagidxVectorStore.load(tmp_path / "ix", fake)  # a second writer commits first
    other.add_texts(["baz"], ids=["c"])
    other.save()
    store.add_texts(["qux"], ids=["d"])
    with pytest.raises(
        IndexFormatError, match=r"changed on disk since it was opened \(generation 2, opened at 1\)"
    ):
        store.save()
    reopened = RagidxVectorStore.load(tmp_path / "ix", fake)
    assert sorted(d.id for d in reopened.get_by_ids(["a", "b", "c", "d"])) == ["a", "b", "c"]
