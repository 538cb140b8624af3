"""The extend policy end to end: encoder windows, ingest records, manifest, query-side settings, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.config import RagidxConfig
from ragidx.embed.config import EncoderConfig, ExtensionConfig
from ragidx.embed.encoder import Encoder
from ragidx.errors import ModelError
from ragidx.index.directory import Index
from ragidx.ingestion.pipeline import ingest
from tests.conftest import TINY_WINDOW, long_text


def _extend(model: Path, **extension: object) -> RagidxConfig:
    return RagidxConfig().override(
        model={"model": str(model), "device": "cpu"},
        long_doc={"policy": "extend", "extension": {"method": "pi", "target_length": 256, **extension}},
    )


def test_encoder_extended_window_and_budget(tiny_model: Path) -> None:
    encoder = Encoder(
        EncoderConfig(model=str(tiny_model), device="cpu"),
        extension=ExtensionConfig(method="pi", target_length=256),
    )
    tokens = encoder.tokenize(long_text(400))
    assert encoder.extended_window == 256
    assert encoder.content_budget(tokens) == TINY_WINDOW - 2
    assert encoder.content_budget(tokens, extended=True) == 254
    vectors = encoder.embed_windows([encoder.window(tokens, 0, 254), encoder.window(tokens, 0, 30)])
    assert np.isfinite(vectors).all() and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    plain = Encoder(EncoderConfig(model=str(tiny_model), device="cpu"))
    with pytest.raises(ModelError, match="exceeds the 64-token window"):
        plain.embed_windows([plain.window(tokens, 0, 200)])
    # short windows batched with long ones give the plain model's vectors
    np.testing.assert_allclose(vectors[1], plain.embed_windows([plain.window(tokens, 0, 30)])[0], atol=1e-5)


def test_batches_put_extended_windows_alone(tiny_model: Path) -> None:
    encoder = Encoder(
        EncoderConfig(model=str(tiny_model), device="cpu"),
        extension=ExtensionConfig(method="gp", target_length=256),
    )
    tokens = encoder.tokenize(long_text(400))
    windows = [encoder.window(tokens, 0, n) for n in (200, 10, 150, 20, 62)]
    order = sorted(range(5), key=lambda i: len(windows[i].input_ids), reverse=True)
    batches = encoder._batches(order, windows)
    assert batches[:2] == [[0], [2]] and sorted(i for b in batches[2:] for i in b) == [1, 3, 4]


def test_ingest_records_extension_and_cut(tmp_path: Path, tiny_model: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "short.txt").write_text("A short note.")
    (docs / "mid.txt").write_text(long_text(150, seed=1))  # longer than 64, shorter than 256 tokens
    (docs / "long.txt").write_text(long_text(400, seed=2))  # longer than 256 tokens: cut, recorded
    report = ingest(docs, tmp_path / "ix", _extend(tiny_model, query_tau=0.8))
    assert report.by_mode == {"whole": 1, "extend:pi": 2}
    index = Index.open(tmp_path / "ix")
    mid, long_doc = index.store.document("mid.txt"), index.store.document("long.txt")
    assert mid.embed_mode == "extend:pi" and mid.n_vectors == 1 and mid.n_embedded == mid.n_tokens > 62
    assert long_doc.n_embedded == 254 < long_doc.n_tokens
    assert index.manifest.long_doc.extension.method == "pi"
    assert index.manifest.long_doc.extension.query_tau == 0.8
    assert index.manifest.counts.by_mode == {"extend:pi": 2, "whole": 1}
    # the query side picks the index's extension (and its query τ) up by itself
    assert index.encoder.extension is not None and index.encoder.extension.config.tau_for("query") == 0.8
    hits = index.search(index.store.document("short.txt").text, k=3)
    assert hits[0].doc_id == "short.txt" and len(hits) == 3


def test_extend_needs_a_method() -> None:
    from ragidx.errors import ConfigError

    with pytest.raises(ConfigError, match="needs an extension method"):
        RagidxConfig().override(long_doc={"policy": "extend"})


def test_tempscale_changes_vectors_and_query_tau_is_separate(tiny_model: Path) -> None:
    folder = Path(tiny_model)
    plain = Encoder(EncoderConfig(model=str(folder), device="cpu"))
    tempered = Encoder(
        EncoderConfig(model=str(folder), device="cpu"), extension=ExtensionConfig(tau=0.5, query_tau=1.0)
    )
    texts = ["river stone light", "garden paper music winter"]
    base, _ = plain.embed(texts, role="document")
    as_doc, _ = tempered.embed(texts, role="document")
    as_query, _ = tempered.embed(texts, role="query")
    assert float(np.min(np.sum(base * as_doc, axis=1))) < 0.9999  # τ = 0.5 changes documents
    np.testing.assert_allclose(as_query, base, atol=1e-5)  # τ = 1 for queries: the plain model


def test_cli_extend_with_a_preset_file(tmp_path: Path, tiny_model: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "mid.txt").write_text(long_text(150, seed=1))
    preset = tmp_path / "preset.toml"
    preset.write_text(
        '[long_doc]\npolicy = "extend"\n[long_doc.extension]\nmethod = "rp"\ntarget_length = 512\n'
    )
    runner = CliRunner()
    args = [
        "ingest",
        str(docs),
        "-i",
        str(tmp_path / "ix"),
        "-m",
        str(tiny_model),
        "--extension",
        str(preset),
        "--json",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["by_mode"] == {"extend:rp": 1}
    flags = [
        "ingest",
        str(docs),
        "-i",
        str(tmp_path / "ix2"),
        "-m",
        str(tiny_model),
        "--long-doc",
        "extend",
        "--method",
        "gp",
        "--target-length",
        "256",
        "--tau",
        "0.9",
        "--json",
    ]
    result = runner.invoke(app, flags)
    assert json.loads(result.stdout)["by_mode"] == {"extend:gp": 1}
    manifest = json.loads((tmp_path / "ix2" / "manifest.json").read_text())
    assert manifest["long_doc"]["extension"]["tau"] == 0.9
    assert runner.invoke(app, ["info", str(tmp_path / "ix2")]).exit_code == 0
    from ragidx.cli.info import _long_doc
    from ragidx.index.manifest import Manifest

    described = _long_doc(Manifest.read(tmp_path / "ix2"))
    assert (
        described
        == "extend (gp to 256 tokens, attention scaling on), TempScale τ 0.9 documents / 0.9 queries"
    )
    query = runner.invoke(app, ["query", "river stone", "-i", str(tmp_path / "ix2"), "--json"])
    assert json.loads(query.stdout)[0]["embed_mode"] == "extend:gp"


def test_pi_with_a_scale_short_of_the_target_length_is_a_one_line_error(
    tmp_path: Path, tiny_model: Path
) -> None:
    """all-MiniLM-L6-v2-like APE model (64 positions here), PI to 4,096 tokens with scale 2: one
    line naming the setting and what to do, not an IndexError from the embedding lookup."""
    with pytest.raises(
        ModelError, match=r"^extension.scale = 2 is too small for pi on .* set it to at least 64"
    ):
        Encoder(
            EncoderConfig(model=str(tiny_model), device="cpu"),
            extension=ExtensionConfig(method="pi", target_length=4096, scale=2),
        )
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.txt").write_text("A short note.")
    preset = tmp_path / "preset.toml"
    preset.write_text('[long_doc]\npolicy = "extend"\n[long_doc.extension]\nmethod = "pi"\nscale = 2\n')
    ix = tmp_path / "ix"
    args = ["ingest", str(docs), "-i", str(ix), "-m", str(tiny_model), "--extension", str(preset)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.startswith("error: extension.scale = 2 is too small for pi")
    assert len(result.output.strip().splitlines()) == 1


def test_a_per_document_scale_is_recorded_applied_and_shown(tmp_path: Path, tiny_model: Path) -> None:
    """scale_from = "document" through ingest: the manifest records it (the default records
    nothing), the reopened index's encoder applies it, ragidx info says so, and a document's vector
    is the one its own s gives (≈100 tokens: s = 2, not ceil(256 / 64) = 4)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "mid.txt").write_text(long_text(80, seed=1))
    ingest(docs, tmp_path / "ix", _extend(tiny_model, method="gp", scale_from="document"))
    ingest(docs, tmp_path / "fixed", _extend(tiny_model, method="gp"))
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert manifest["long_doc"]["extension"]["scale_from"] == "document"
    default = json.loads((tmp_path / "fixed" / "manifest.json").read_text())
    assert "scale_from" not in default["long_doc"]["extension"]
    index = Index.open(tmp_path / "ix")
    assert index.manifest.long_doc.extension.scale_from == "document"
    assert index.encoder.extension is not None and index.encoder.extension.config.per_document
    from ragidx.cli.info import _long_doc

    assert _long_doc(index.manifest) == (
        "extend (gp to 256 tokens, s per document = ceil(n / L_o), attention scaling on)"
    )
    doc = index.store.document("mid.txt")
    assert doc.embed_mode == "extend:gp" and 64 < doc.n_tokens + 2 <= 128
    fixed = Index.open(tmp_path / "fixed")
    stored, target = (ix.reconstruct(ix.vector_ids("mid.txt")[0])[0] for ix in (index, fixed))
    own = Encoder(
        EncoderConfig(model=str(tiny_model), device="cpu"),
        extension=ExtensionConfig(method="gp", target_length=128, scale=2),
    )
    tokens = own.tokenize(doc.text, "document")
    expected = own.embed_windows([own.window(tokens, 0, len(tokens))])[0]
    np.testing.assert_allclose(stored, expected, atol=1e-5)
    assert np.abs(stored - target).max() > 1e-4  # the index-wide s = 4 gives another vector
