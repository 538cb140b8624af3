"""Index directory: commit/open, generations, integrity checks, model checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragidx.config import RagidxConfig
from ragidx.embed.config import EncoderConfig
from ragidx.embed.encoder import Encoder
from ragidx.errors import IndexFormatError, ModelError
from ragidx.index.directory import Index
from ragidx.index.manifest import BACKUP_NAME, MANIFEST_NAME
from ragidx.ingestion.pipeline import ingest
from ragidx.read.document import Document
from tests.index.manifest_edits import edit_manifest


@pytest.fixture()
def built(tmp_path: Path, tiny_model: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, text in enumerate(["alpha river stone", "beta garden music", "gamma winter engine"]):
        (docs / f"d{i}.txt").write_text(text)
    config = RagidxConfig().override(model={"model": str(tiny_model), "device": "cpu"})
    ingest(docs, tmp_path / "ix", config)
    return tmp_path / "ix"


def _data_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in (MANIFEST_NAME, BACKUP_NAME))


def test_commit_writes_one_generation_and_cleans_the_old(built: Path, tiny_model: Path) -> None:
    first = [
        "chunks-000001.parquet",
        "documents-000001.parquet",
        "lexical-000001.npz",
        "vectors-000001.faiss",
    ]
    assert _data_files(built) == first
    (built.parent / "docs" / "d3.txt").write_text("delta orange harbor")
    ingest(built.parent / "docs", built, RagidxConfig().override(model={"device": "cpu"}))
    assert _data_files(built) == [name.replace("000001", "000002") for name in first]
    manifest = json.loads((built / MANIFEST_NAME).read_text())
    assert manifest["generation"] == 2 and manifest["counts"]["documents"] == 4
    assert {f["name"] for f in manifest["files"].values()} == set(_data_files(built))


def test_open_searches_without_loading_anything_else(built: Path) -> None:
    index = Index.open(built)
    assert len(index) == 3
    hits = index.search("beta garden music", k=2)
    assert [h.rank for h in hits] == [1, 2]
    assert hits[0].doc_id == "d1.txt" and hits[0].score > hits[1].score
    assert hits[0].embed_mode == "whole" and hits[0].chunk is None
    assert index.info()["encoder"]["dim"] == 32


def test_truncated_data_file_is_reported(built: Path) -> None:
    path = built / "vectors-000001.faiss"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(IndexFormatError, match="vectors-000001.faiss: .* truncated"):
        Index.open(built)


def test_missing_data_file_and_non_index_dirs(built: Path, tmp_path: Path) -> None:
    (built / "documents-000001.parquet").unlink()
    with pytest.raises(IndexFormatError, match="documents-000001.parquet: missing"):
        Index.open(built)
    with pytest.raises(IndexFormatError, match="not a ragidx index"):
        Index.open(tmp_path)
    with pytest.raises(IndexFormatError, match="no such index directory"):
        Index.open(tmp_path / "nope")


def test_faiss_and_store_disagreeing_is_reported(built: Path, tiny_model: Path) -> None:
    index = Index.open(built)
    index.vectors.remove(index.store.vids()[:1])  # corrupt on purpose: FAISS lost a vector
    index.commit()
    with pytest.raises(IndexFormatError, match="does not match the store"):
        Index.open(built)


def test_other_model_is_refused(built: Path, tiny_other_model: Path, tiny_st_model: Path) -> None:
    same_dim = Index.open(built, encoder_config=EncoderConfig(model=str(tiny_other_model), device="cpu"))
    with pytest.raises(ModelError, match="fingerprint"):
        same_dim.search("alpha")
    other_dim = Encoder(EncoderConfig(model=str(tiny_st_model), device="cpu"))
    with pytest.raises(ModelError, match="16-d vectors"):
        Index.open(built, encoder=other_dim)


def test_create_refuses_an_existing_index(built: Path, tiny_encoder: Encoder) -> None:
    with pytest.raises(IndexFormatError, match="already holds an index"):
        Index.create(built, tiny_encoder)


def test_in_memory_index_get_remove_and_commit_elsewhere(tmp_path: Path, tiny_encoder: Encoder) -> None:
    from ragidx.ingestion.pipeline import add_documents
    from ragidx.read.document import Document

    index = Index.create(None, tiny_encoder)
    assert index.name == "in-memory index"
    add_documents(index, [Document(d, f"text {d} river", "") for d in ("a", "b", "c")])
    assert [r.doc_id for r in index.get(["c", "zz", "a"])] == ["c", "a"]
    assert index.remove(["a", "zz"]) == 1 and index.store.doc_ids() == ["b", "c"]
    assert index.search("text b river", k=5)[0].doc_id == "b"  # searches see unflushed vectors
    with pytest.raises(IndexFormatError, match="in-memory index: give commit"):
        index.commit()
    index.commit(tmp_path / "one")
    assert Index.open(tmp_path / "one").store.doc_ids() == ["b", "c"]
    with pytest.raises(IndexFormatError, match="already holds an index"):
        Index.create(None, tiny_encoder).commit(tmp_path / "one")
    index.commit(tmp_path / "two")  # a copy under a new directory, which the index now uses
    assert index.directory == tmp_path / "two" and len(Index.open(tmp_path / "two")) == 2


def test_an_index_loads_and_searches_with_pickle_disabled(
    built: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import _pickle
    import pickle

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("pickle was used")

    for module in (pickle, _pickle):
        for name in ("load", "loads", "Unpickler"):
            monkeypatch.setattr(module, name, refuse)
    index = Index.open(built, encoder_config=EncoderConfig(device="cpu"))
    assert index.search("alpha river stone", k=1)[0].doc_id == "d0.txt"
    from ragidx.index.verify import verify

    assert verify(built).ok


def test_commit_refuses_a_generation_it_has_not_seen(built: Path, tiny_model: Path) -> None:
    from ragidx.ingestion.pipeline import add_documents
    from ragidx.read.document import Document

    first, second = Index.open(built), Index.open(built)
    add_documents(first, [Document("new-1", "delta harbor light", "")])
    first.commit()
    add_documents(second, [Document("new-2", "epsilon paper orange", "")])
    with pytest.raises(
        IndexFormatError, match=r"changed on disk since it was opened \(generation 2, opened at 1\)"
    ):
        second.commit()
    assert sorted(Index.open(built).store.doc_ids()) == ["d0.txt", "d1.txt", "d2.txt", "new-1"]


# ----------------------------------------------------------------------------- hybrid: two FAISS levels
@pytest.fixture()
def hybrid_copy(hybrid_index: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(hybrid_index, tmp_path / "hybrid"))


HYBRID_FILES = [
    "chunks-000001.parquet",
    "documents-000001.parquet",
    "lexical-000001.npz",
    "vectors-000001-doc.faiss",
    "vectors-000001.faiss",
]


def test_hybrid_index_files_round_trip(hybrid_copy: Path) -> None:
    assert _data_files(hybrid_copy) == HYBRID_FILES
    manifest = json.loads((hybrid_copy / MANIFEST_NAME).read_text())
    assert manifest["files"]["faiss.document"]["name"] == "vectors-000001-doc.faiss"
    assert manifest["long_doc"]["hybrid"]["fusion"] == "rrf"
    index = Index.open(hybrid_copy)
    vids = index.store.vids()
    before = index.vectors_of(vids)
    index.commit()  # a second generation, read back: same vectors at both levels
    assert _data_files(hybrid_copy) == [name.replace("000001", "000002") for name in HYBRID_FILES]
    again = Index.open(hybrid_copy)
    np.testing.assert_array_equal(again.vectors_of(vids), before)
    assert again.document_vectors is not None and again.document_vectors.ntotal == len(again)


def test_corrupt_or_unlisted_document_level_file_is_refused(hybrid_copy: Path) -> None:
    path = hybrid_copy / "vectors-000001-doc.faiss"
    data = path.read_bytes()
    middle = len(data) // 2
    path.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :])
    with pytest.raises(IndexFormatError, match="vectors-000001-doc.faiss: checksum differs"):
        Index.open(hybrid_copy)
    path.write_bytes(data)
    edit_manifest(hybrid_copy, lambda manifest: manifest["files"].pop("faiss.document"))
    with pytest.raises(IndexFormatError, match="lists no faiss.document file"):
        Index.open(hybrid_copy)


def test_levels_that_disagree_with_the_store_are_refused(hybrid_copy: Path) -> None:
    index = Index.open(hybrid_copy)
    assert index.document_vectors is not None
    vids, _ = index.store.document_vids("h3.txt")
    index.document_vectors.remove(vids[:1])  # corrupt on purpose: a document lost its document vector
    index.commit()
    with pytest.raises(IndexFormatError, match="document-level FAISS index .* does not match the store"):
        Index.open(hybrid_copy)
    from ragidx.index.verify import verify

    assert "document-level FAISS index" in verify(hybrid_copy).problems[0]


def test_a_chunk_vector_in_the_document_level_is_refused(hybrid_copy: Path) -> None:
    index = Index.open(hybrid_copy)
    assert index.document_vectors is not None
    vids, _ = index.store.document_vids("h3.txt")
    index.document_vectors.remove(vids[:1])
    index.document_vectors.add(index.vectors_of(vids[1:2]), vids[1:2])  # same count, wrong level
    index.commit()
    with pytest.raises(IndexFormatError, match="document-level FAISS ids differ from the store"):
        Index.open(hybrid_copy)


def test_delete_removes_both_levels_and_stale_files(hybrid_copy: Path) -> None:
    from ragidx.index.delete import delete
    from ragidx.index.verify import verify

    index = Index.open(hybrid_copy)
    gone_vids, _ = index.store.document_vids("h4.txt")
    (hybrid_copy / "vectors-000000-doc.faiss").write_bytes(b"left by a crash")
    report = delete(hybrid_copy, ids=["h4.txt"])
    assert report.removed == ["h4.txt"]
    after = Index.open(hybrid_copy)
    assert after.document_vectors is not None
    assert len(after) == after.document_vectors.ntotal == 7
    assert not set(gone_vids) & (set(after.vectors.ids()) | set(after.document_vectors.ids()))
    assert _data_files(hybrid_copy) == [name.replace("000001", "000002") for name in HYBRID_FILES]
    assert verify(hybrid_copy).ok


def test_in_memory_hybrid_index_refuses_a_document_without_its_document_vector(tiny_encoder: Encoder) -> None:
    from ragidx.embed.config import HybridConfig, LongDocConfig
    from ragidx.ingestion.pipeline import add_embedded

    index = Index.create(None, tiny_encoder, LongDocConfig(policy="late", hybrid=HybridConfig()))
    with pytest.raises(IndexFormatError, match="has 0 document-level vectors"):
        add_embedded(index, [Document("a", "text", "")], np.ones((1, 32)))


def test_every_document_needs_exactly_one_document_level_vector(tiny_encoder: Encoder) -> None:
    from ragidx.index.config import FaissConfig
    from ragidx.index.directory import check_agreement
    from ragidx.index.faiss_index import FaissIndex
    from ragidx.index.store import DocumentRecord, Store, VectorRecord

    store = Store.empty()
    for doc_id, ordinals in (("a", [-1, -1, 0]), ("b", [0])):  # a: two document vectors, b: none
        record = DocumentRecord(doc_id, "", "0" * 64, None, "text", 1, 1, "late", len(ordinals))
        base = 0 if doc_id == "a" else 3
        store.add(record, [VectorRecord(base + i, doc_id, o, 0, 1, 0, 4) for i, o in enumerate(ordinals)])
    upper, chunks = FaissIndex.create(32, FaissConfig()), FaissIndex.create(32, FaissConfig())
    upper.add(np.eye(2, 32, dtype=np.float32), np.array([0, 1]))
    chunks.add(np.eye(2, 32, dtype=np.float32), np.array([2, 3]))
    manifest = Index.create(None, tiny_encoder).manifest
    with pytest.raises(
        IndexFormatError, match="2 document-level vectors for 2 documents, 1 of which have one"
    ):
        check_agreement(Path("ix"), manifest, chunks, store, upper)


def test_removing_from_a_hybrid_index_forces_no_faiss_pass_per_document(
    hybrid_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which removed vectors are document-level comes from the store's ordinals, so removing n
    documents queues their FAISS removals (one pass at the next read), not n passes."""
    from tests.index.test_faiss_index import count_removal_passes

    index = Index.open(hybrid_copy)
    assert index.document_vectors is not None
    before = index.document_vectors.ntotal
    passes = count_removal_passes(monkeypatch)
    doc_ids = index.store.doc_ids()
    for doc_id in doc_ids[:2]:
        index.remove([doc_id])
    assert passes == []
    assert index.document_vectors.ntotal == before - 2 == len(index)  # one document-level vector each
    assert set(index.store.vids()) == set(index.vectors.ids()) | set(index.document_vectors.ids())


@pytest.mark.parametrize(
    "pooling",
    [
        {"pooling": ["lmk"], "landmark_placement": "sentence_grouped", "landmark_every": 4},
        {"pooling": ["mean_every_content"], "mean_every": 3},
    ],
)
def test_an_index_built_under_the_former_pooling_rules_keeps_them(
    tmp_path: Path, tiny_model: Path, pooling: dict[str, object]
) -> None:
    """An index whose manifest ragidx wrote before issue 28, with lmk "sentence" or "mean_every"
    (no "rules" in its pooling), embeds its queries by the rules its documents were embedded with:
    today's "sentence_grouped" and "mean_every_content"."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, text in enumerate(["Alpha river. Stone bridge!", "Beta garden music. Loud.", "Gamma winter."]):
        (docs / f"d{i}.txt").write_text(text)
    model = {"model": str(tiny_model), "device": "cpu", **pooling}
    ingest(docs, tmp_path / "ix", RagidxConfig().override(model=model))

    def as_written_before(raw: dict[str, Any]) -> None:
        recorded = raw["encoder"]["pooling"]
        assert "rules" not in recorded
        recorded["modes"] = ["mean_every" if m == "mean_every_content" else m for m in recorded["modes"]]
        if recorded["landmark_placement"] == "sentence_grouped":
            recorded["landmark_placement"] = "sentence"

    edit_manifest(tmp_path / "ix", as_written_before)
    index = Index.open(tmp_path / "ix")
    expected = Encoder(EncoderConfig.model_validate(model))
    assert index.encoder.pooling == expected.pooling
    query = "Alpha river. Stone bridge! Beta garden music."
    np.testing.assert_allclose(index.encoder.embed([query])[0], expected.embed([query])[0], atol=1e-6)
    assert len(index.search(query, k=3)) == 3  # and it searches


def test_an_onnx_index_records_its_precision_and_reopens_with_it(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """backend onnx int8: the manifest says onnx-int8; reopened with run-time settings that name no
    backend (dtype auto, as configs/default.toml writes it) the index embeds queries on it again;
    settings that name one win. A float32 index records nothing (its manifest is as before)."""
    pytest.importorskip("onnxruntime", reason="backend onnx needs the onnx extra")
    pytest.importorskip("onnx", reason="backend onnx needs the onnx extra")
    monkeypatch.setenv("RAGIDX_ONNX_CACHE", str(tmp_path / "onnx"))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("alpha river stone")
    fast = {"model": str(tiny_model), "device": "cpu", "backend": "onnx", "dtype": "int8"}
    ingest(docs, tmp_path / "ix", RagidxConfig().override(model=fast))
    raw = json.loads((tmp_path / "ix" / MANIFEST_NAME).read_text(encoding="utf-8"))
    assert raw["encoder"]["precision"] == "onnx-int8"
    reopened = Index.open(tmp_path / "ix", encoder_config=EncoderConfig(device="cpu", dtype="auto"))
    assert reopened.encoder.precision == "onnx-int8"
    explicit = Index.open(tmp_path / "ix", encoder_config=EncoderConfig(device="cpu", backend="torch"))
    assert explicit.encoder.precision == "float32"
    config = RagidxConfig().override(model={"model": str(tiny_model), "device": "cpu"})
    ingest(docs, tmp_path / "plain", config)
    plain = json.loads((tmp_path / "plain" / MANIFEST_NAME).read_text(encoding="utf-8"))
    assert "precision" not in plain["encoder"]


def test_postings_made_ahead_index_as_the_index_would_analyse_them(tiny_encoder: Encoder) -> None:
    """``Index.add(..., postings=)`` (ingest analyses a batch while the one before embeds) gives the
    lexical index of analysing at add time; postings of another document are refused."""
    from ragidx.index.config import LexicalConfig
    from ragidx.index.lexical import analyse
    from ragidx.index.store import DocumentRecord, VectorRecord

    texts = {"a": "The river floods the old mill. " * 40, "b": "Mills grind grain by the river bank."}
    indexes = [Index.create(None, tiny_encoder, lexical=LexicalConfig()) for _ in range(2)]
    for doc_id, text in texts.items():
        for ahead, index in enumerate(indexes):
            assert index.lexical is not None
            record = DocumentRecord(doc_id, doc_id, doc_id, "", text, 10, 10, "chunk", 1)
            span = [VectorRecord(-1, doc_id, 0, 0, 1, 0, len(text))]
            postings = analyse(index.lexical.analyzer, [doc_id], [text]) if ahead else None
            index.add(record, np.ones((1, tiny_encoder.dim), dtype=np.float32), span, postings=postings)
    plain, made_ahead = (index.lexical for index in indexes)
    assert plain is not None and made_ahead is not None
    for query in ("river mill", "grain bank", "floods"):
        np.testing.assert_array_equal(made_ahead.scores(query), plain.scores(query))
    assert made_ahead.doc_ids == plain.doc_ids and made_ahead.terms == plain.terms
    other = analyse(made_ahead.analyzer, ["x"], ["other words"])
    record = DocumentRecord("c", "c", "c", "", "other words", 2, 2, "chunk", 1)
    with pytest.raises(ValueError, match="postings of \\['x'\\] given for document 'c'"):
        span = [VectorRecord(-1, "c", 0, 0, 1, 0, 11)]
        indexes[1].add(record, np.ones((1, tiny_encoder.dim), dtype=np.float32), span, postings=other)
