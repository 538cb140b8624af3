"""``repair``: a damaged index becomes usable again losing only what is lost: every document whose
text survives is kept or embedded again, the damaged generation waits in quarantine, and the
documents it drops are named (and kept in ``dropped.jsonl``) for the next ingest to add back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ragidx.errors import IndexFormatError
from ragidx.index.directory import Index
from ragidx.index.lock import IndexLockedError, WriterLock
from ragidx.index.manifest import BACKUP_NAME, MANIFEST_NAME
from ragidx.index.verify import DROPPED_NAME, QUARANTINE_NAME, repair, verify
from ragidx.ingestion.pipeline import ingest
from tests.conftest import tiny_config, write_docs
from tests.index.manifest_edits import edit_manifest

DOC_IDS = [f"doc-{i:02d}.txt" for i in range(4)]
REPAIR_HINT = "ragidx verify --repair"
FILES = ("vectors-", "documents-", "chunks-", "lexical-")


def _file(directory: Path, prefix: str) -> Path:
    return next(p for p in directory.iterdir() if p.name.startswith(prefix))


def _flip(path: Path, position: int | None = None, bit: int = 0xFF) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if position is None else position] ^= bit
    path.write_bytes(bytes(data))


def _vectors(index: Index) -> dict[str, np.ndarray]:
    return {d: index.vectors_of(index.vector_ids(d)[0].tolist()) for d in index.doc_ids()}


def _texts(index: Index) -> dict[str, str]:
    return {d: index.document(d).text for d in index.doc_ids()}


def _cosines(after: Index, before: dict[str, np.ndarray]) -> dict[str, float]:
    """Per kept document, the least cosine between its vectors now and before (same count asked)."""
    out = {}
    for doc_id, vectors in _vectors(after).items():
        assert vectors.shape == before[doc_id].shape, doc_id
        out[doc_id] = float(np.min(np.sum(vectors * before[doc_id], axis=1)))
    return out


@pytest.fixture(scope="module")
def twelve(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """A sound index of 12 documents (some chunked: more vectors than documents), never modified."""
    root = tmp_path_factory.mktemp("twelve")
    docs = write_docs(root / "docs", 12, words=40)
    ingest(docs, root / "ix", tiny_config(tiny_model))
    return root / "ix"


def _positions(size: int, count: int) -> list[int]:
    """``count`` byte positions spread over a file, with its first and last bytes (footer, magic)."""
    spread = np.linspace(0, size - 1, count - 4).astype(int).tolist()
    return sorted({0, size - 1, size - 5, size - 9, *spread})


SWEEPS = [
    *(pytest.param(prefix, 12, id=f"{prefix}12") for prefix in FILES),  # the quick loop: 12 bytes a file
    *(pytest.param(prefix, 100, id=f"{prefix}100", marks=pytest.mark.slow) for prefix in FILES),
]


@pytest.mark.parametrize(("prefix", "count"), SWEEPS)
def test_one_flipped_byte_anywhere_loses_at_most_the_document_whose_bytes_it_hit(
    twelve: Path, tmp_path: Path, prefix: str, count: int
) -> None:
    """Issue 39: one flipped bit, anywhere in one file, loses at most the document whose own bytes
    (its row group of the documents file) it hit, and none whose text survives; every kept text is
    what was stored and every vector (kept or embedded again) is the original one."""
    before = Index.open(twelve)
    texts, vectors = _texts(before), _vectors(before)
    size = _file(twelve, prefix).stat().st_size
    for number, position in enumerate(_positions(size, count)):
        directory = Path(shutil.copytree(twelve, tmp_path / f"ix-{number}"))
        _flip(_file(directory, prefix), position, bit=1 << (number % 8))
        if verify(directory, plan=False).ok:  # a bit nothing reads (e.g. Parquet's leading magic)
            continue
        report = repair(directory)
        where = f"{prefix} byte {position} of {size}: {report.to_dict()}"
        after = Index.open(directory)
        assert verify(directory, plan=False).ok, where
        lost = set(texts) - set(after.doc_ids())
        assert lost == set(report.dropped) and report.dropped_unnamed == 0, where
        assert len(lost) <= (1 if prefix == "documents-" else 0), where
        assert set(report.kept) | set(report.reembedded) == set(after.doc_ids()), where
        assert _texts(after) == {d: texts[d] for d in after.doc_ids()}, where
        cosines = _cosines(after, vectors)
        assert min(cosines.values()) > 0.999, (where, cosines)
        kept = {d for d in report.kept if d not in report.reembedded}
        for doc_id, vector in _vectors(after).items():  # kept vectors are the stored ones, exactly
            if doc_id in kept:
                np.testing.assert_array_equal(vector, vectors[doc_id], err_msg=where)
        quarantine = Path(report.quarantine or "")
        assert (quarantine / _file(twelve, prefix).name).is_file(), where
        if lost:
            dropped = [json.loads(line) for line in (quarantine / DROPPED_NAME).read_text().splitlines()]
            assert [record["_id"] for record in dropped] == sorted(lost), where
        shutil.rmtree(directory)


@pytest.mark.parametrize("prefix", ["vectors-", "documents-", "chunks-"])
@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_a_damaged_vector_or_store_file_loses_only_what_it_held(
    built: Path, tiny_model: Path, prefix: str, damage: str
) -> None:
    before = Index.open(built)
    texts, vectors = _texts(before), _vectors(before)
    path = _file(built, prefix)
    files = sorted(p.name for p in built.iterdir() if p.is_file() and not p.name.startswith("."))
    originals = {name: (built / name).read_bytes() for name in files if name != path.name}
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
    assert not found.ok and found.repairable and found.repair_plan is not None
    planned = repair(built, dry_run=True)
    assert planned.dry_run and not planned.repaired and found.repair_plan == planned.summary()
    assert Index.exists(built) and not (built / QUARANTINE_NAME).exists()  # a dry run writes nothing

    report = repair(built)
    assert report.repaired and report.generation == 2 and report.summary() == planned.summary()
    assert path.name in report.damage[0]
    assert verify(built).ok
    after = Index.open(built)
    if prefix == "documents-" and damage == "delete":  # the texts are gone: named, from BM25
        assert sorted(report.dropped) == DOC_IDS and report.dropped_unnamed == 0 and len(after) == 0
    else:  # every text survives: nothing is lost
        assert report.dropped == {} and sorted(after.doc_ids()) == DOC_IDS
        assert _texts(after) == texts and min(_cosines(after, vectors).values()) > 0.999
    quarantine = Path(report.quarantine or "")
    assert quarantine == built / QUARANTINE_NAME / "generation-000001"
    held = sorted(p.name for p in quarantine.iterdir() if p.name != DROPPED_NAME)
    assert held == sorted(set(files) - ({path.name} if damage == "delete" else set()))
    for name in held:  # the damaged generation as it was, damage included
        assert (quarantine / name).read_bytes() == originals.get(name, (quarantine / name).read_bytes())
    assert any(QUARANTINE_NAME in note for note in verify(built).notes)
    again = ingest(docs, built, tiny_config(tiny_model))
    assert again.added == len(report.dropped) and verify(built).ok
    assert sorted(Index.open(built).doc_ids()) == DOC_IDS


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


def test_a_damaged_shard_re_embeds_only_the_vectors_in_its_damaged_block(
    tmp_path: Path, tiny_model: Path
) -> None:
    docs = write_docs(tmp_path / "docs", 6)
    config = tiny_config(tiny_model).override(index={"shards": 2})
    ingest(docs, tmp_path / "ix", config)
    index = Index.open(tmp_path / "ix")
    vectors = _vectors(index)
    in_shard_1 = sorted(d for d in index.doc_ids() if (index.vector_ids(d)[0] % 2 == 1).any())
    assert 0 < len(in_shard_1) < 6
    _flip(tmp_path / "ix" / "vectors-000001-s001.faiss")
    report = repair(tmp_path / "ix")
    assert report.dropped == {} and len(report.reembedded) > 0 and set(report.reembedded) <= set(in_shard_1)
    after = Index.open(tmp_path / "ix")
    assert sorted(after.doc_ids()) == sorted(vectors) and verify(tmp_path / "ix").ok
    for doc_id, vector in _vectors(after).items():
        if doc_id not in report.reembedded:
            np.testing.assert_array_equal(vector, vectors[doc_id])
    assert min(_cosines(after, vectors).values()) > 0.999
    assert ingest(docs, tmp_path / "ix", config).added == 0  # nothing to add back
    assert verify(tmp_path / "ix").ok


def test_a_document_whose_vector_faiss_lost_is_embedded_again(built: Path) -> None:
    index = Index.open(built)
    vectors = _vectors(index)
    lost, _ = index.store.document_vids("doc-02.txt")
    index.vectors.remove(lost)  # a writer bug: FAISS lost one document's vector
    index.commit()
    assert not verify(built).ok
    assert verify(built).repair_plan == "keep 3, re-embed 1, drop 0"
    report = repair(built)
    assert (
        list(report.reembedded) == ["doc-02.txt"] and "vectors were lost" in report.reembedded["doc-02.txt"]
    )
    assert report.dropped == {} and sorted(report.kept) == [d for d in DOC_IDS if d != "doc-02.txt"]
    after = Index.open(built)
    assert sorted(after.doc_ids()) == DOC_IDS and verify(built).ok
    assert after.lexical is not None and sorted(after.lexical.doc_ids) == DOC_IDS
    assert min(_cosines(after, vectors).values()) > 0.999
    assert after.search(after.document("doc-02.txt").text, k=1)[0].doc_id == "doc-02.txt"


def test_hybrid_a_document_without_its_document_vector_is_embedded_again(
    hybrid_index: Path, tmp_path: Path
) -> None:
    directory = Path(shutil.copytree(hybrid_index, tmp_path / "hybrid"))
    index = Index.open(directory)
    assert index.document_vectors is not None
    vectors = {
        d: index.vectors_of([*index.vector_ids(d)[0].tolist(), index.vector_ids(d)[1]])
        for d in index.doc_ids()
    }
    _, upper = index.vector_ids("h3.txt")
    index.document_vectors.remove(np.array([upper]))
    index.commit()
    report = repair(directory)
    assert list(report.reembedded) == ["h3.txt"] and report.dropped == {}
    after = Index.open(directory)
    assert after.document_vectors is not None and after.document_vectors.ntotal == len(after) == 8
    chunks, document = after.vector_ids("h3.txt")
    again = after.vectors_of([*chunks.tolist(), document])
    assert again.shape == vectors["h3.txt"].shape
    assert np.min(np.sum(again * vectors["h3.txt"], axis=1)) > 0.999
    assert verify(directory).ok


def test_vectors_made_outside_ragidx_cannot_be_embedded_again_so_their_documents_go_to_dropped_jsonl(
    tmp_path: Path,
) -> None:
    """An index LangChain filled (``add_embedded``): its documents' texts are kept in quarantine,
    in the JSONL form ``ragidx ingest`` reads, with the reason."""
    from ragidx.index.manifest import ExternalEncoderInfo
    from ragidx.ingestion.pipeline import add_embedded
    from ragidx.read.document import Document

    rng = np.random.default_rng(0)
    index = Index.create(tmp_path / "ix", ExternalEncoderInfo(name="outside", dim=64))
    documents = [Document(f"e{i}", f"external text {i}", source="api", metadata={"n": i}) for i in range(40)]
    add_embedded(index, documents, rng.normal(size=(40, 64)))
    index.commit()
    before = _vectors(Index.open(tmp_path / "ix"))
    path = _file(tmp_path / "ix", "vectors-")
    codes_end = path.stat().st_size - 8 * 40 - 8  # Flat: the vectors, then the ids' count and ids
    _flip(path, codes_end - 256 * 2 - 128)  # the middle of e37's 256 bytes
    report = repair(tmp_path / "ix")
    # the 256-byte block it hit holds parts of e37 and of one neighbour: both are lost
    assert (
        "e37" in report.dropped and len(report.dropped) == 2 and set(report.dropped) <= {"e36", "e37", "e38"}
    )
    assert "made outside ragidx (outside)" in report.dropped["e37"] and report.reembedded == {}
    after = Index.open(tmp_path / "ix")
    assert len(after) == 38 and verify(tmp_path / "ix").ok
    for doc_id, vector in _vectors(after).items():
        np.testing.assert_array_equal(vector, before[doc_id])
    lines = (Path(report.quarantine or "") / DROPPED_NAME).read_text().splitlines()
    records = {record["_id"]: record for record in map(json.loads, lines)}
    assert sorted(records) == sorted(report.dropped)
    record = records["e37"]
    assert record["text"] == "external text 37" and record["n"] == 37
    assert record["ragidx_repair"]["source"] == "api"


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


def _as_before_salvage(directory: Path) -> None:
    """Rewrite the store as ragidx wrote it before issue 39: one row group per file, no page CRCs,
    no footer copy, no block CRCs of the FAISS files (the manifest re-signed to match)."""
    import hashlib

    import pyarrow.parquet as pq

    signed = {}
    for key, prefix in (("documents", "documents-"), ("chunks", "chunks-")):
        path = _file(directory, prefix)
        table = pq.read_table(path).replace_schema_metadata(None)
        pq.write_table(table, path, compression="zstd")
        data = path.read_bytes()
        signed[key] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    edit_manifest(directory, lambda manifest: [manifest["files"][k].update(v) for k, v in signed.items()])


@pytest.mark.parametrize("prefix", ["vectors-", "chunks-"])
def test_an_index_written_before_salvage_loses_no_text_to_a_damaged_vector_file(
    built: Path, prefix: str
) -> None:
    """Without block CRCs nothing proves a vector of a damaged FAISS file sound, and without page
    CRCs a damaged vector-rows file proves no row: every document is embedded again, none dropped."""
    _as_before_salvage(built)
    before = Index.open(built)
    texts, vectors = _texts(before), _vectors(before)
    _flip(_file(built, prefix))
    report = repair(built)
    assert report.dropped == {} and sorted(report.reembedded) == DOC_IDS, report.to_dict()
    after = Index.open(built)
    assert verify(built).ok and _texts(after) == texts and min(_cosines(after, vectors).values()) > 0.999


def test_a_lost_id_comes_back_from_the_vector_table_order_and_lost_fields_are_reset(
    twelve: Path, tmp_path: Path
) -> None:
    """A damaged page of the doc_id column costs no document (ids follow the vector rows' order);
    one of the metadata column resets that document's metadata, named in the report."""
    import pyarrow.parquet as pq

    directory = Path(shutil.copytree(twelve, tmp_path / "ix"))
    path = _file(directory, "documents-")
    meta = pq.read_metadata(path)
    names = meta.schema.to_arrow_schema().names
    texts = _texts(Index.open(twelve))
    for column in ("doc_id", "metadata"):
        chunk = meta.row_group(5).column(names.index(column))
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        _flip(path, start + chunk.total_compressed_size - 3, bit=0x04)  # in its last page's data
    report = repair(directory)
    assert report.dropped == {} and report.reset == {"doc-05.txt": ["metadata"]}, report.to_dict()
    assert any("2 column chunks of 12 row groups lost" in line for line in report.damage), report.damage
    after = Index.open(directory)
    assert _texts(after) == texts and after.document("doc-05.txt").metadata == {} and verify(directory).ok
