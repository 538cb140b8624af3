"""Tests for ragidx.embed.config: the long-document defaults a new index records for its model, and
manifests written before them reading back unchanged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.embed.config import CHUNK_SIZE_WHY, LongDocConfig
from ragidx.index.directory import Index
from tests.conftest import long_text

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "index-0.1"


def test_the_chunk_size_follows_the_models_own_max_seq_length_below_its_window() -> None:
    chosen = LongDocConfig().for_model(512, 256)  # all-MiniLM-L6-v2
    assert (chosen.chunk_size, chosen.chunk_size_from, chosen.overlap) == (256, "max_seq_length", 32)
    assert chosen.chunk_size_note == CHUNK_SIZE_WHY and "53.7" in CHUNK_SIZE_WHY and "50.5" in CHUNK_SIZE_WHY
    for unchanged in (
        LongDocConfig().for_model(512, 512),  # e5-small: its max_seq_length is its window
        LongDocConfig().for_model(512, None),  # a plain transformers folder
        LongDocConfig(chunk_size=128).for_model(512, 256),  # set by hand
        LongDocConfig(policy="pcw").for_model(512, 256),
        LongDocConfig(policy="late").for_model(512, 256),
        LongDocConfig(overlap=300).for_model(512, 256),  # would not leave a chunk
    ):
        assert unchanged.chunk_size_from is None and unchanged.chunk_size_note is None
    assert LongDocConfig(chunk_size=128).for_model(512, 256).chunk_size == 128


@pytest.mark.parametrize("name", ["chunk", "hybrid"])
def test_manifests_of_the_previous_release_read_back_exactly(name: str) -> None:
    """What a 0.1 index recorded is what this code reads and writes back (the same settings, the
    same embedding fingerprint): new defaults never change how an existing index re-ingests."""
    recorded = json.loads((FIXTURE / name / "manifest.json").read_text(encoding="utf-8"))["long_doc"]
    assert LongDocConfig.model_validate(recorded).model_dump(mode="json") == recorded


@pytest.fixture
def short_st_model(tiny_st_model: Path, tmp_path: Path) -> Path:
    """The tiny sentence-transformers model, its max_seq_length (48) below its window (64)."""
    folder = Path(shutil.copytree(tiny_st_model, tmp_path / "short-st"))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 48}))
    return folder


def _chunk_lengths(index: Index, doc_id: str) -> set[int]:
    vids, _ = index.store.document_vids(doc_id)
    rows = [index.store.vector(int(v)) for v in vids]
    return {row.tok_end - row.tok_start for row in rows}


def test_a_new_index_records_the_chosen_chunk_size_and_info_says_why(
    short_st_model: Path, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "long.md").write_text(long_text(300, seed=1))
    runner = CliRunner()
    result = runner.invoke(app, ["ingest", str(docs), "-i", str(tmp_path / "ix"), "-m", str(short_st_model)])
    assert result.exit_code == 0, result.output
    index = Index.open(tmp_path / "ix")
    assert (index.manifest.long_doc.chunk_size, index.manifest.long_doc.chunk_size_from) == (
        48,
        "max_seq_length",
    )
    assert _chunk_lengths(index, "long.md") == {48}
    info = runner.invoke(app, ["info", str(tmp_path / "ix")])
    text = " ".join(info.stdout.replace("│", " ").split())
    assert "chunk size 48 tokens: the model's own max_seq_length (sentence_bert_config.json)" in text


def test_an_index_built_before_the_default_keeps_whole_window_chunks(
    short_st_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index that recorded no chunk size (as every index before this default did) re-ingests
    with whole-window chunks, not the model's max_seq_length."""
    from ragidx.ingestion.pipeline import ingest
    from tests.conftest import tiny_config

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "first.md").write_text(long_text(300, seed=1))
    with monkeypatch.context() as old_release:
        old_release.setattr(LongDocConfig, "for_model", lambda self, window, max_seq_length: self)
        ingest(docs, tmp_path / "ix", tiny_config(short_st_model))
    assert Index.open(tmp_path / "ix").manifest.long_doc.chunk_size is None
    (docs / "second.md").write_text(long_text(300, seed=2))
    report = ingest(docs, tmp_path / "ix", tiny_config(short_st_model))
    assert (report.added, report.unchanged) == (1, 1)
    index = Index.open(tmp_path / "ix")
    assert index.manifest.long_doc.chunk_size is None and index.manifest.long_doc.chunk_size_from is None
    window = _chunk_lengths(index, "first.md")
    assert _chunk_lengths(index, "second.md") == window and max(window) > 48


# ------------------------------------------------------------------- extension: scale_from
def test_the_default_extension_scale_dumps_as_before() -> None:
    """scale_from = "target" is not written: manifests, their fingerprints and embedding-cache keys
    of every existing setting stay byte-identical."""
    from ragidx.embed.config import ExtensionConfig

    default = ExtensionConfig(method="pi", target_length=1024)
    assert default.scale_from == "target" and not default.per_document
    assert "scale_from" not in default.model_dump() and "scale_from" not in default.model_dump(mode="json")
    assert "scale_from" not in ExtensionConfig(method="ntk", scale_from="target").model_dump()
    long_doc = LongDocConfig(policy="extend", extension=default).model_dump(mode="json")
    assert "scale_from" not in long_doc["extension"]
    assert list(long_doc["extension"]) == [
        "method",
        "target_length",
        "original_length",
        "scale",
        "ntk_lambda",
        "se_group",
        "se_window",
        "attention_scaling",
        "tau",
        "query_tau",
    ]
    per_document = ExtensionConfig(method="pi", target_length=1024, scale_from="document")
    dumped = per_document.model_dump(mode="json")
    assert dumped["scale_from"] == "document" and per_document.per_document
    assert ExtensionConfig.model_validate(dumped) == per_document


def test_a_fixed_scale_and_a_per_document_scale_are_refused_together(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from ragidx.config import RagidxConfig
    from ragidx.embed.config import ExtensionConfig
    from ragidx.errors import ConfigError

    with pytest.raises(ValidationError, match="scale = 4 fixes s for every document"):
        ExtensionConfig(method="pi", scale=4, scale_from="document")
    path = tmp_path / "both.toml"
    path.write_text('[long_doc.extension]\nmethod = "pi"\nscale = 4\nscale_from = "document"\n')
    with pytest.raises(ConfigError) as raised:
        RagidxConfig.load(path)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"{path}: long_doc.extension: ")
    assert "scale_from = 'document' takes s from each document's length; give one of them" in message
    path.write_text('[long_doc.extension]\nmethod = "pi"\nscale_from = "doc"\n')
    with pytest.raises(
        ConfigError, match="long_doc.extension.scale_from: Input should be 'target' or 'document'"
    ):
        RagidxConfig.load(path)


def test_a_per_document_scale_round_trips_through_a_config_file(tmp_path: Path) -> None:
    """The TOML of docs/extension.md loads, and its dump validates back to the same settings."""
    from ragidx.config import RagidxConfig

    path = tmp_path / "ragidx.toml"
    path.write_text(
        '[long_doc]\npolicy = "extend"\n\n[long_doc.extension]\nmethod = "ntk"\ntarget_length = 32768\n'
        'scale_from = "document"\n'
    )
    config = RagidxConfig.load(path)
    assert config.long_doc.extension.scale_from == "document"
    assert RagidxConfig.model_validate(config.model_dump()).long_doc == config.long_doc
    assert config.long_doc.extension.scale_for(2048) == 16  # without a length: the one for L_t
    assert config.long_doc.extension.scale_for(2048, 3000) == 2
