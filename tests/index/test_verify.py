"""verify and open: corrupted FAISS, Parquet and manifest files are each detected."""

from __future__ import annotations

import base64
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


def test_the_store_is_written_for_salvage(built: Path) -> None:
    """One row group per document in a small index, a CRC on every page (a damaged page fails to
    read instead of decoding to something else), the documents footer copied (with its CRC) and the
    FAISS file's block CRCs in the vector-rows file (ragidx.index.salvage)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ragidx.index.salvage import BLOCK_CHECKS_KEY
    from ragidx.index.store import DOCUMENTS_FOOTER_KEY, parquet_footer

    documents = (built / "documents-000001.parquet").read_bytes()
    assert pq.read_metadata(io.BytesIO(documents)).num_row_groups == 4
    chunks = pq.read_metadata(built / "chunks-000001.parquet").metadata
    crc, _, copy = chunks[DOCUMENTS_FOOTER_KEY.encode()].partition(b":")
    assert base64.b64decode(copy) == parquet_footer(documents) and len(crc) == 8
    assert "faiss" in json.loads(chunks[BLOCK_CHECKS_KEY.encode()])
    meta = pq.read_metadata(io.BytesIO(documents))
    text = meta.row_group(2).column(meta.schema.to_arrow_schema().names.index("text"))
    damaged = bytearray(documents)
    damaged[text.data_page_offset + text.total_compressed_size - 2] ^= 0x01
    parquet = pq.ParquetFile(pa.BufferReader(bytes(damaged)), page_checksum_verification=True)
    with pytest.raises(OSError, match="CRC"):
        parquet.read_row_group(2, columns=["text"])
    assert parquet.read_row_group(1, columns=["text"]).num_rows == 1


def test_verify_says_what_repair_would_do(built: Path) -> None:
    assert verify(built).repair_plan is None  # sound: nothing to do
    _flip_byte(built / "lexical-000001.npz", 100)
    assert verify(built).repair_plan == "keep 4, re-embed 0, drop 0"
    (built / "lexical-000001.npz").unlink()
    (built / "documents-000001.parquet").unlink()
    assert verify(built).repair_plan == "keep 0, re-embed 0, drop 4"
