"""``ragidx ingest``'s flags → settings (ragidx.cli.ingest_settings): the layering and every refusal,
without running an ingest."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragidx.cli.ingest_settings import IngestFlags, ingest_settings
from ragidx.errors import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_no_flags_are_the_defaults_and_nothing_is_marked_as_set() -> None:
    settings = ingest_settings(IngestFlags())
    assert settings.long_doc.policy == "chunk" and settings.lexical.enabled
    assert settings.long_doc.model_fields_set == set() and settings.lexical.model_fields_set == set()


def test_flags_override_the_config_file() -> None:
    settings = ingest_settings(
        IngestFlags(config=CONFIGS / "default.toml", long_doc="pcw", batch_size=8, faiss_factory="HNSW32")
    )
    assert (settings.long_doc.policy, settings.model.batch_size, settings.index.factory) == (
        "pcw",
        8,
        "HNSW32",
    )
    assert settings.long_doc.overlap == 32  # from the file


def test_pooling_shorthands() -> None:
    assert ingest_settings(IngestFlags(pooling="lmk:32")).model.landmark_every == 32
    sentence = ingest_settings(IngestFlags(pooling="lmk-sentence")).model
    assert (sentence.pooling, sentence.landmark_placement) == (("lmk",), "sentence")
    grouped = ingest_settings(IngestFlags(pooling="lmk-sentence-grouped:32")).model
    assert (grouped.pooling, grouped.landmark_placement, grouped.landmark_every) == (
        ("lmk",),
        "sentence_grouped",
        32,
    )
    content = ingest_settings(IngestFlags(pooling="mean_every_content:8")).model
    assert (content.pooling, content.mean_every) == (("mean_every_content",), 8)
    with pytest.raises(ConfigError, match="lmk-sentence puts a landmark after every sentence and takes no"):
        ingest_settings(IngestFlags(pooling="lmk-sentence:64"))
    with pytest.raises(ConfigError, match="only lmk, lmk-sentence-grouped, multicls, mean_every and"):
        ingest_settings(IngestFlags(pooling="mean:3"))


def test_hybrid_flags() -> None:
    late = ingest_settings(IngestFlags(long_doc="late", hybrid="rrf")).long_doc
    assert late.hybrid is not None and (late.hybrid.document, late.hybrid.fusion) == ("pass", "rrf")
    chunk = ingest_settings(IngestFlags(hybrid="0.3", hybrid_tuned_on="qmsum dev")).long_doc
    assert chunk.hybrid is not None and (chunk.hybrid.document, chunk.hybrid.weight) == ("pcw", 0.3)
    assert chunk.hybrid.tuned_on == "qmsum dev"
    with pytest.raises(ConfigError, match="need --hybrid"):
        ingest_settings(IngestFlags(hybrid_document="pcw"))


def test_a_strategy_excludes_the_long_document_flags() -> None:
    settings = ingest_settings(IngestFlags(strategy="chunk:256:0+best:2"))
    assert (settings.long_doc.chunk_size, settings.long_doc.overlap, settings.long_doc.best_chunks) == (
        256,
        0,
        2,
    )
    with pytest.raises(ConfigError, match="give the long-document settings in it, not also --chunk-size"):
        ingest_settings(IngestFlags(strategy="chunk", chunk_size=128))
    with pytest.raises(ConfigError, match="needs the extended length; add --max-tokens"):
        ingest_settings(IngestFlags(strategy="extend:pi"))
    with pytest.raises(ConfigError, match="--hybrid-tuned-on needs a hybrid"):
        ingest_settings(IngestFlags(strategy="chunk", hybrid_tuned_on="x"))


def test_a_strategys_bm25_part_sets_the_lexical_fusion() -> None:
    weighted = ingest_settings(IngestFlags(strategy="chunk+bm25:0.4")).lexical
    assert (weighted.enabled, weighted.fusion, weighted.weight) == (True, "weighted", 0.4)
    assert ingest_settings(IngestFlags(strategy="chunk+bm25:rrf")).lexical.fusion == "rrf"
    with pytest.raises(ConfigError, match="bm25:auto is chosen by cross-validation"):
        ingest_settings(IngestFlags(strategy="chunk+bm25:auto"))
    with pytest.raises(ConfigError, match="BM25 alone embeds nothing"):
        ingest_settings(IngestFlags(strategy="bm25"))


def test_lexical_flag() -> None:
    assert ingest_settings(IngestFlags(lexical=False)).lexical.enabled is False
    on = ingest_settings(IngestFlags(lexical=True)).lexical
    assert on.enabled and "enabled" in on.model_fields_set  # explicit: adds BM25 to an old index
