"""verify and open: corrupted FAISS, Parquet and manifest files are each detected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragidx.errors import IndexFormatError
from ragidx.index.directory import STAGING_NAME, Index
from ragidx.index.manifest import MANIFEST_NAME
from ragidx.index.verify import verify
from ragidx.ingestion.pipeline import ingest
from tests.conftest import tiny_config, write_docs
from tests.index.manifest_edits import edit_manifest


@pytest.fixture()
def built(tmp_path: Path, tiny_model: Path) -> Path:
    ingest(write_docs(tmp_path / "docs", 4), tmp_path / "ix", tiny_config(tiny_model))
    return tmp_path / "ix"


def _flip_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def test_sound_index_verifies(built: Path) -> None:
    report = verify(built)
    assert report.ok and report.problems == [] and report.notes == []
    assert (report.generation, report.documents, report.vectors) == (1, 4, 4)


DATA_FILES = [
    "vectors-000001.faiss",
    "documents-000001.parquet",
    "chunks-000001.parquet",
    "lexical-000001.npz",
]


@pytest.mark.parametrize("name", DATA_FILES)
@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_data_files_are_detected(built: Path, name: str, damage: str) -> None:
    path = built / name
    if damage == "flip":
        _flip_byte(path, len(path.read_bytes()) // 2)
    else:
        path.write_bytes(path.read_bytes()[:-7])
    expected = "checksum differs" if damage == "flip" else "truncated"
    with pytest.raises(IndexFormatError, match=rf"{name}: .*{expected}"):
        Index.open(built)
    report = verify(built)
    assert not report.ok and name in report.problems[0] and expected in report.problems[0]


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda text: text[: len(text) // 2], "unreadable manifest"),
        (lambda text: text.replace('"generation": 1', '"generation": "one"'), "invalid manifest"),
        (lambda text: "", "unreadable manifest"),
    ],
)
def test_damaged_manifest_is_detected(built: Path, damage, message: str) -> None:
    path = built / MANIFEST_NAME
    path.write_text(damage(path.read_text()))
    with pytest.raises(IndexFormatError, match=message):
        Index.open(built)
    assert message in verify(built).problems[0]


def test_ids_and_counts_must_agree(built: Path) -> None:
    index = Index.open(built)
    vid = int(index.store.vids()[0])
    vector = index.vectors.index.reconstruct(vid)
    index.vectors.remove(index.store.vids()[:1])
    index.vectors.add(vector[None, :], [vid + 1000])  # same count, different id
    index.commit()
    with pytest.raises(IndexFormatError, match="FAISS ids differ from the store"):
        Index.open(built)
    assert "FAISS ids differ" in verify(built).problems[0]


def test_manifest_counts_are_checked_and_leftovers_noted(built: Path) -> None:
    edit_manifest(built, lambda manifest: manifest["counts"].update(documents=99))
    (built / STAGING_NAME).mkdir()
    (built / ".vectors-000002.faiss.tmp-1").write_bytes(b"x")
    report = verify(built)
    assert report.problems == [f"{built / MANIFEST_NAME}: counts differ from the store"]
    assert any(STAGING_NAME in n for n in report.notes) and any(".tmp-1" in n for n in report.notes)


def test_a_lexical_index_of_other_documents_is_refused(built: Path) -> None:
    """A lexical file whose checksum is right but whose documents are not the store's (a manifest
    pointing at another index's file) is caught by the agreement check."""
    import hashlib

    from ragidx.index.config import LexicalConfig
    from ragidx.index.lexical import LexicalIndex

    other = LexicalIndex.empty(LexicalConfig())
    other.add_texts(["doc-00.txt", "stranger.txt"], ["Document 0.", "not in this index"])
    data = other.to_bytes()
    entry = json.loads((built / MANIFEST_NAME).read_text())["files"]["lexical"]
    (built / entry["name"]).write_bytes(data)
    signed = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    edit_manifest(built, lambda manifest: manifest["files"]["lexical"].update(signed))
    with pytest.raises(IndexFormatError, match="lexical index lacks 3 stored documents and holds 1 others"):
        Index.open(built)
    assert not verify(built).ok
