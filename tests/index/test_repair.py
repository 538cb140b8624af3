"""``repair``: a damaged index becomes usable again from what is intact, and says what it dropped;
the next ingest adds the dropped documents back."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from ragidx.errors import IndexFormatError
from ragidx.index.directory import Index
from ragidx.index.lock import IndexLockedError, WriterLock
from ragidx.index.manifest import BACKUP_NAME, MANIFEST_NAME
from ragidx.index.verify import repair, verify
from ragidx.ingestion.pipeline import ingest
from tests.conftest import tiny_config, write_docs
from tests.index.manifest_edits import edit_manifest

DOC_IDS = [f"doc-{i:02d}.txt" for i in range(4)]
REPAIR_HINT = "ragidx verify --repair"


def _file(directory: Path, prefix: str) -> Path:
    return next(p for p in directory.iterdir() if p.name.startswith(prefix))


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _vectors(index: Index) -> dict[str, np.ndarray]:
    return {d: index.vectors_of(index.vector_ids(d)[0].tolist()) for d in index.doc_ids()}


@pytest.mark.parametrize("prefix", ["vectors-", "documents-", "chunks-"])
@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_a_damaged_vector_or_store_file_drops_its_documents_and_ingest_adds_them_back(
    built: Path, tiny_model: Path, prefix: str, damage: str
) -> None:
    path = _file(built, prefix)
    if damage == "flip":
        _flip(path)
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[:-5])
    else:
        path.unlink()
    docs = built.parent / "docs"
    with pytest.raises(IndexFormatError, match=REPAIR_HINT):  # what every damage message says to do
        ingest(docs, built, tiny_config(tiny_model))
    found = verify(built)
    assert not found.ok and found.repairable

    report = repair(built)
    assert report.repaired and report.generation == 2
    assert sorted(report.dropped) == DOC_IDS and report.dropped_unnamed == 0  # named, from BM25
    assert path.name in report.damage[0]
    assert verify(built).ok and len(Index.open(built)) == 0 and report.documents == 0
    again = ingest(docs, built, tiny_config(tiny_model))
    assert again.added == 4 and verify(built).ok
    after = Index.open(built)
    assert sorted(after.doc_ids()) == DOC_IDS
    assert after.search((docs / "doc-02.txt").read_text(), k=1)[0].doc_id == "doc-02.txt"


def test_a_damaged_lexical_file_is_rebuilt_and_nothing_is_dropped(built: Path) -> None:
    before = Index.open(built)
    assert before.lexical is not None
    scores = dict(zip(before.lexical.doc_ids, before.lexical.scores("Document 1").tolist(), strict=True))
    vectors = _vectors(before)
    _flip(_file(built, "lexical-"))
    report = repair(built)
    assert report.dropped == {} and report.rebuilt == ["the lexical index, from the stored texts"]
    after = Index.open(built)
    assert after.lexical is not None and verify(built).ok
    rebuilt = dict(zip(after.lexical.doc_ids, after.lexical.scores("Document 1").tolist(), strict=True))
    assert rebuilt == pytest.approx(scores, abs=1e-6)
    for doc_id, vector in _vectors(after).items():
        np.testing.assert_array_equal(vector, vectors[doc_id])


def test_a_streamed_document_is_dropped_when_the_lexical_index_must_be_rebuilt(
    tmp_path: Path, tiny_model: Path
) -> None:
    docs = write_docs(tmp_path / "docs", 3)
    (docs / "big.txt").write_text("Big file. " + "river stone light " * 200)
    ingest(docs, tmp_path / "ix", tiny_config(tiny_model, stream_bytes=2000))
    assert Index.open(tmp_path / "ix").document("big.txt").metadata.get("streamed")
    _flip(_file(tmp_path / "ix", "lexical-"))
    report = repair(tmp_path / "ix")
    assert list(report.dropped) == ["big.txt"] and "streamed file's head" in report.dropped["big.txt"]
    assert sorted(Index.open(tmp_path / "ix").doc_ids()) == DOC_IDS[:3] and verify(tmp_path / "ix").ok
    assert ingest(docs, tmp_path / "ix", tiny_config(tiny_model, stream_bytes=2000)).added == 1


def test_only_the_documents_of_a_damaged_shard_are_dropped(tmp_path: Path, tiny_model: Path) -> None:
    docs = write_docs(tmp_path / "docs", 6)
    config = tiny_config(tiny_model).override(index={"shards": 2})
    ingest(docs, tmp_path / "ix", config)
    index = Index.open(tmp_path / "ix")
    vectors = _vectors(index)
    in_shard_1 = sorted(d for d in index.doc_ids() if (index.vector_ids(d)[0] % 2 == 1).any())
    assert 0 < len(in_shard_1) < 6
    _flip(tmp_path / "ix" / "vectors-000001-s001.faiss")
    report = repair(tmp_path / "ix")
    assert sorted(report.dropped) == in_shard_1
    after = Index.open(tmp_path / "ix")
    assert sorted(after.doc_ids()) == sorted(set(vectors) - set(in_shard_1)) and verify(tmp_path / "ix").ok
    for doc_id, vector in _vectors(after).items():
        np.testing.assert_array_equal(vector, vectors[doc_id])
    assert ingest(docs, tmp_path / "ix", config).added == len(in_shard_1)
    assert verify(tmp_path / "ix").ok


def test_a_document_whose_vector_faiss_lost_is_the_only_one_dropped(built: Path) -> None:
    index = Index.open(built)
    lost, _ = index.store.document_vids("doc-02.txt")
    index.vectors.remove(lost)  # a writer bug: FAISS lost one document's vector
    index.commit()
    assert not verify(built).ok
    report = repair(built)
    assert list(report.dropped) == ["doc-02.txt"] and "vectors were lost" in report.dropped["doc-02.txt"]
    after = Index.open(built)
    assert sorted(after.doc_ids()) == [d for d in DOC_IDS if d != "doc-02.txt"] and verify(built).ok
    assert after.lexical is not None and "doc-02.txt" not in after.lexical.doc_ids


def test_hybrid_a_document_without_its_document_vector_is_dropped(hybrid_index: Path, tmp_path: Path) -> None:
    directory = Path(shutil.copytree(hybrid_index, tmp_path / "hybrid"))
    index = Index.open(directory)
    assert index.document_vectors is not None
    _, upper = index.vector_ids("h3.txt")
    index.document_vectors.remove(np.array([upper]))
    index.commit()
    report = repair(directory)
    assert list(report.dropped) == ["h3.txt"]
    after = Index.open(directory)
    assert after.document_vectors is not None and after.document_vectors.ntotal == len(after) == 7
    assert verify(directory).ok


def test_wrong_counts_are_rebuilt_without_dropping_anything(built: Path) -> None:
    edit_manifest(built, lambda manifest: manifest["counts"].update(documents=99))
    report = repair(built)
    assert report.dropped == {} and report.rebuilt == ["the manifest's counts"]
    assert Index.open(built).manifest.counts.documents == 4 and verify(built).ok


def test_a_sound_index_is_left_as_it_is(built: Path) -> None:
    (built / ".vectors-000002.faiss.tmp-1").write_bytes(b"left by a crash")
    report = repair(built)
    assert not report.repaired and report.documents == 4 and report.dropped == {}
    assert Index.open(built).manifest.generation == 1
    assert verify(built).notes == []  # the leftover went


def test_a_damaged_manifest_without_its_backup_cannot_be_repaired(built: Path) -> None:
    """With its backup it can (tests/index/test_manifest_repair.py)."""
    (built / BACKUP_NAME).unlink(missing_ok=True)
    path = built / MANIFEST_NAME
    path.write_text(path.read_text().replace('"next_vid": 4', '"next_vid": 5'))
    before = sorted(p.name for p in built.iterdir())
    found = verify(built)
    assert not found.ok and not found.repairable
    with pytest.raises(
        IndexFormatError,
        match="fails its checksum.*no manifest.backup.json.*restore manifest.json from a backup",
    ):
        repair(built)
    assert sorted(p.name for p in built.iterdir()) == before


def test_repair_waits_for_no_one_it_takes_the_writer_lock(built: Path) -> None:
    _flip(_file(built, "lexical-"))
    with WriterLock(built), pytest.raises(IndexLockedError):
        repair(built)
    assert repair(built).repaired
