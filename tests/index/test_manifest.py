"""Tests for ragidx.index.manifest: Manifest write/read round trip, read errors, and write_atomic."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ragidx.embed.config import LongDocConfig, PoolingConfig
from ragidx.errors import IndexFormatError
from ragidx.index.config import FaissConfig, LexicalConfig
from ragidx.index.manifest import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    Counts,
    EncoderInfo,
    ExternalEncoderInfo,
    FileEntry,
    Manifest,
    write_atomic,
)

WHEN = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def _manifest() -> Manifest:
    return Manifest(
        ragidx_version="0.1.0",
        created=WHEN,
        updated=WHEN,
        generation=3,
        next_vid=42,
        encoder=EncoderInfo(
            name="sentence-transformers/all-MiniLM-L6-v2",
            revision="abc123",
            fingerprint="f" * 64,
            model_type="bert",
            dim=384,
            window=512,
            native_window=512,
            pooling=PoolingConfig(modes=("cls", "mean"), include_prompt=False),
            dense_layers=1,
            query_prompt="query: ",
            document_prompt="passage: ",
        ),
        long_doc=LongDocConfig(policy="chunk", chunk_size=256, overlap=64, max_tokens=4096),
        faiss=FaissConfig(factory="IDMap2,HNSW32", gpu="never", search_params="efSearch=64"),
        counts=Counts(
            documents=2, vectors=5, tokens=900, tokens_embedded=800, by_mode={"chunk": 1, "whole": 1}
        ),
        files={"faiss": FileEntry(name="vectors-3.faiss", sha256="0" * 64, bytes=1234)},
    )


def _write_raw(directory: Path, raw: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / MANIFEST_NAME
    path.write_text(raw if isinstance(raw, str) else json.dumps(raw), encoding="utf-8")
    return path


def test_write_read_round_trip(tmp_path: Path) -> None:
    manifest = _manifest()
    manifest.write(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST_NAME]
    again = Manifest.read(tmp_path)
    assert again == manifest
    assert again.faiss.factory == "HNSW32"
    assert again.encoder.pooling.modes == ("cls", "mean")
    assert again.created == WHEN
    assert again.long_doc.max_tokens == 4096
    assert again.files["faiss"].bytes == 1234
    raw = json.loads((tmp_path / MANIFEST_NAME).read_text(encoding="utf-8"))
    assert raw["format"] == "ragidx-index"
    assert raw["format_version"] == FORMAT_VERSION == 2
    assert list(raw)[-1] == "checksum"  # format 2: the fields, then their sha256
    assert raw["metric"] == "inner_product"


def test_defaults() -> None:
    manifest = Manifest(
        ragidx_version="0.1.0",
        encoder=_manifest().encoder,
        long_doc=LongDocConfig(),
        faiss=FaissConfig(),
    )
    assert (manifest.generation, manifest.next_vid) == (0, 0)
    assert manifest.counts == Counts()
    assert manifest.files == {}
    assert manifest.created.tzinfo is not None
    assert manifest.created.microsecond == 0


def test_read_missing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(IndexFormatError, match=rf"^{re.escape(str(missing))}: no such index directory"):
        Manifest.read(missing)


def test_read_directory_without_manifest(tmp_path: Path) -> None:
    with pytest.raises(
        IndexFormatError, match=rf"^{re.escape(str(tmp_path))}: not a ragidx index \(no manifest.json\)"
    ):
        Manifest.read(tmp_path)


@pytest.mark.parametrize("text", ["{not json", ""])
def test_read_invalid_json(tmp_path: Path, text: str) -> None:
    path = _write_raw(tmp_path, text)
    with pytest.raises(IndexFormatError, match=rf"^{re.escape(str(path))}: unreadable manifest"):
        Manifest.read(tmp_path)


def test_read_non_utf8(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_NAME).write_bytes(b'{"format": "\xff"}')
    with pytest.raises(
        IndexFormatError, match=rf"^{re.escape(str(tmp_path / MANIFEST_NAME))}: unreadable manifest"
    ):
        Manifest.read(tmp_path)


def test_read_missing_required_field(tmp_path: Path) -> None:
    raw = json.loads(_manifest().model_dump_json())
    del raw["encoder"]["fingerprint"]
    path = _write_raw(tmp_path, raw)
    with pytest.raises(
        IndexFormatError,
        match=rf"^{re.escape(str(path))}: invalid manifest \(encoder.fingerprint: Field required\)",
    ):
        Manifest.read(tmp_path)


def test_read_unknown_field(tmp_path: Path) -> None:
    raw = json.loads(_manifest().model_dump_json())
    raw["surprise"] = 1
    path = _write_raw(tmp_path, raw)
    with pytest.raises(
        IndexFormatError, match=rf"^{re.escape(str(path))}: invalid manifest \(surprise: Extra inputs"
    ):
        Manifest.read(tmp_path)


def test_read_not_an_object(tmp_path: Path) -> None:
    path = _write_raw(tmp_path, [1, 2])
    with pytest.raises(IndexFormatError, match=rf"^{re.escape(str(path))}: invalid manifest"):
        Manifest.read(tmp_path)


def test_read_newer_format_version(tmp_path: Path) -> None:
    raw = json.loads(_manifest().model_dump_json())
    raw["format_version"] = 999
    path = _write_raw(tmp_path, raw)
    with pytest.raises(
        IndexFormatError, match=rf"^{re.escape(str(path))}: written by a newer ragidx \(format 999\); upgrade"
    ):
        Manifest.read(tmp_path)


@pytest.mark.parametrize("version", ["2", None])
def test_read_non_integer_format_version(tmp_path: Path, version: object) -> None:
    raw = json.loads(_manifest().model_dump_json())
    raw["format_version"] = version
    path = _write_raw(tmp_path, raw)
    with pytest.raises(IndexFormatError, match=re.escape(str(path))):
        Manifest.read(tmp_path)


def test_write_atomic_replaces_content_and_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "data.bin"
    write_atomic(target, b"first")
    assert target.read_bytes() == b"first"
    write_atomic(target, b"second, longer content")
    assert target.read_bytes() == b"second, longer content"
    write_atomic(target, b"")
    assert target.read_bytes() == b""
    assert [p.name for p in tmp_path.iterdir()] == ["data.bin"]


def test_write_replaces_previous_manifest(tmp_path: Path) -> None:
    first = _manifest()
    first.write(tmp_path)
    second = first.model_copy(update={"generation": 4, "next_vid": 99})
    second.write(tmp_path)
    again = Manifest.read(tmp_path)
    assert (again.generation, again.next_vid) == (4, 99)
    assert [p.name for p in tmp_path.iterdir()] == [MANIFEST_NAME]


def test_an_external_encoder_round_trips_and_old_manifests_read_as_ragidx(tmp_path: Path) -> None:
    external = _manifest().model_copy(update={"encoder": ExternalEncoderInfo(name="langchain:Fake", dim=6)})
    external.write(tmp_path)
    raw = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert raw["encoder"] == {"kind": "external", "name": "langchain:Fake", "dim": 6}
    assert Manifest.read(tmp_path).encoder == ExternalEncoderInfo(name="langchain:Fake", dim=6)
    _manifest().write(tmp_path)  # ragidx encoders write no kind, as before
    assert "kind" not in json.loads((tmp_path / MANIFEST_NAME).read_text())["encoder"]
    assert isinstance(Manifest.read(tmp_path).encoder, EncoderInfo)
    raw["encoder"] = {"kind": "external", "name": "langchain:Fake"}
    path = _write_raw(tmp_path, raw)
    expected = rf"^{re.escape(str(path))}: invalid manifest \(encoder.dim: Field required\)"
    with pytest.raises(IndexFormatError, match=expected):
        Manifest.read(tmp_path)


def test_a_lexical_section_from_before_passages_reads_as_whole_documents(tmp_path: Path) -> None:
    """Manifests written before ``passage_terms`` existed scored whole documents: they read as 0,
    whatever today's default; a section that records it keeps it."""
    manifest = _manifest()
    manifest.lexical = LexicalConfig()
    assert manifest.lexical.passage_terms == 256  # today's default for a new index
    raw = json.loads(manifest.model_dump_json())
    assert Manifest.model_validate(raw).lexical == LexicalConfig()
    del raw["lexical"]["passage_terms"]
    old = Manifest.model_validate(raw)
    assert old.lexical is not None and old.lexical.passage_terms == 0
    assert old.lexical.model_copy(update={"passage_terms": 256}) == LexicalConfig()


@pytest.mark.parametrize(
    ("pooling", "modes", "placement"),
    [
        ({"modes": ["lmk"], "landmark_placement": "sentence"}, ("lmk",), "sentence_grouped"),
        ({"modes": ["mean_every"]}, ("mean_every_content",), "fixed"),
        ({"modes": ["lmk"], "landmark_placement": "fixed"}, ("lmk",), "fixed"),
    ],
)
def test_pooling_recorded_before_issue_28_keeps_its_rules(
    tmp_path: Path, pooling: dict[str, Any], modes: tuple[str, ...], placement: str
) -> None:
    """A manifest's pooling without ``rules`` was written by a ragidx whose lmk "sentence" and
    "mean_every" are today's "sentence_grouped" and "mean_every_content": it reads as those, so the
    index embeds queries as it embedded its documents, and writes them under those names."""
    manifest = _manifest()
    raw = json.loads(manifest.model_dump_json())
    raw["encoder"]["pooling"] = {**raw["encoder"]["pooling"], **pooling}
    assert "rules" not in raw["encoder"]["pooling"]
    old = Manifest.model_validate(raw)
    assert isinstance(old.encoder, EncoderInfo)
    assert (old.encoder.pooling.modes, old.encoder.pooling.landmark_placement) == (modes, placement)
    old.write(tmp_path)
    again = json.loads((tmp_path / MANIFEST_NAME).read_text())["encoder"]["pooling"]
    assert (tuple(again["modes"]), again["landmark_placement"], "rules" in again) == (modes, placement, False)
    assert Manifest.read(tmp_path) == old


def test_pooling_under_todays_rules_round_trips(tmp_path: Path) -> None:
    for pooling in (
        PoolingConfig(modes=("lmk",), landmark_placement="sentence"),
        PoolingConfig(modes=("mean_every",), mean_every=32),
    ):
        manifest = _manifest()
        assert isinstance(manifest.encoder, EncoderInfo)
        manifest.encoder.pooling = pooling
        manifest.write(tmp_path)
        raw = json.loads((tmp_path / MANIFEST_NAME).read_text())
        assert raw["encoder"]["pooling"]["rules"] == 2
        read = Manifest.read(tmp_path)
        assert isinstance(read.encoder, EncoderInfo) and read.encoder.pooling == pooling


def test_the_precision_is_recorded_only_when_not_float32(tmp_path: Path) -> None:
    """float32 manifests dump as before (no key); a faster precision reads back as written."""
    manifest = _manifest()
    assert manifest.encoder.precision is None
    assert "precision" not in manifest.encoder.model_dump(mode="json")
    encoder = manifest.encoder.model_copy(update={"precision": "onnx-int8"})
    manifest.model_copy(update={"encoder": encoder}).write(tmp_path)
    raw = json.loads((tmp_path / MANIFEST_NAME).read_text(encoding="utf-8"))
    assert raw["encoder"]["precision"] == "onnx-int8"
    assert Manifest.read(tmp_path).encoder.precision == "onnx-int8"
