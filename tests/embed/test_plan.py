"""Long-document plans (whole/chunk/pcw/truncate) and PCW against a slow reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from ragidx.config import RagidxConfig
from ragidx.embed.config import LongDocConfig
from ragidx.embed.encoder import Encoder
from ragidx.embed.plan import plan, settled_spans
from ragidx.index.store import Store
from ragidx.ingestion.pipeline import ingest
from tests.conftest import long_text


def test_fitting_document_is_whole_under_every_policy() -> None:
    for policy in ("chunk", "pcw", "truncate"):
        result = plan(100, 100, LongDocConfig(policy=policy))
        assert result.mode == "whole" and result.spans == [(0, 100)] and result.n_embedded == 100


def test_pcw_follows_the_spec_last_chunk_right_aligned() -> None:
    """LongEmbed PCW: window-sized chunks, no overlap, last one shifted to end at the end."""
    result = plan(1100, 512, LongDocConfig(policy="pcw"))
    assert result.mode == "pcw"
    assert result.spans == [(0, 512), (512, 1024), (588, 1100)]
    assert all(e - s == 512 for s, e in result.spans)
    exact = plan(1024, 512, LongDocConfig(policy="pcw"))
    assert exact.spans == [(0, 512), (512, 1024)]


def test_pcw_cuts_to_max_tokens_first_and_records_it() -> None:
    result = plan(10_000, 512, LongDocConfig(policy="pcw", max_tokens=4096))
    assert result.spans == [(i, i + 512) for i in range(0, 4096, 512)]
    assert result.n_tokens == 10_000 and result.n_embedded == 4096


def test_chunks_overlap_and_cover_the_document() -> None:
    result = plan(600, 512, LongDocConfig(policy="chunk", chunk_size=256, overlap=32))
    assert result.mode == "chunk"
    assert result.spans == [(0, 256), (224, 480), (344, 600)]
    covered = set().union(*(set(range(s, e)) for s, e in result.spans))
    assert covered == set(range(600))
    assert not result.single_vector


def test_chunk_size_defaults_to_the_window_and_is_capped_by_it() -> None:
    assert plan(1000, 400, LongDocConfig(overlap=0)).spans == [(0, 400), (400, 800), (600, 1000)]
    assert plan(1000, 400, LongDocConfig(chunk_size=900, overlap=0)).spans[0] == (0, 400)


def test_an_explicit_chunk_size_chunks_documents_that_fit_the_window() -> None:
    """chunk:128 means 128-token chunks even for a 300-token document in a 512-token window."""
    result = plan(300, 512, LongDocConfig(policy="chunk", chunk_size=128, overlap=0))
    assert result.mode == "chunk" and result.spans == [(0, 128), (128, 256), (172, 300)]
    assert plan(100, 512, LongDocConfig(policy="chunk", chunk_size=128)).mode == "whole"


def test_truncate_is_explicit_and_counted() -> None:
    result = plan(3000, 512, LongDocConfig(policy="truncate"))
    assert result.mode == "truncate" and result.spans == [(0, 512)]
    assert result.n_tokens - result.n_embedded == 2488


def test_max_tokens_within_window_means_truncate() -> None:
    result = plan(3000, 512, LongDocConfig(policy="chunk", max_tokens=300))
    assert result.mode == "truncate" and result.spans == [(0, 300)]


def test_invalid_configs_are_rejected() -> None:
    with pytest.raises(ValidationError, match="overlap"):
        LongDocConfig(chunk_size=64, overlap=64)
    with pytest.raises(ValidationError):
        LongDocConfig(policy="extend-everything")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        plan(0, 512, LongDocConfig())


def _reference_chunk_vector(encoder: Encoder, ids: list[int]) -> np.ndarray:
    """Mean pooling of one [CLS] ids [SEP] input, straight through transformers (no batching)."""
    tok = encoder.tokenizer
    input_ids = torch.tensor([[tok.cls_token_id, *ids, tok.sep_token_id]])
    with torch.no_grad():
        hidden = encoder.model(input_ids=input_ids).last_hidden_state[0]
    return hidden.mean(dim=0).numpy()


def test_pcw_vector_equals_mean_of_independently_encoded_chunks(tmp_path, tiny_encoder: Encoder) -> None:
    """An ingested PCW document vector = L2(mean of un-normalised chunk vectors), chunk by chunk."""
    text = long_text(400, seed=7)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "long.txt").write_text(text)
    config = RagidxConfig().override(
        model={"model": str(tiny_encoder.folder.path), "device": "cpu"}, long_doc={"policy": "pcw"}
    )
    ingest(tmp_path / "docs", tmp_path / "index", config)
    from ragidx.index.directory import Index

    index = Index.open(tmp_path / "index")
    stored = index.vectors.index.reconstruct(0)
    assert isinstance(index.store, Store) and index.store.document("long.txt").embed_mode == "pcw"

    tokens = tiny_encoder.tokenize(text)
    budget = tiny_encoder.content_budget(tokens)
    spans = plan(len(tokens), budget, LongDocConfig(policy="pcw")).spans
    assert len(spans) >= 3
    chunks = [_reference_chunk_vector(tiny_encoder, tokens.ids[s:e]) for s, e in spans]
    expected = np.mean(chunks, axis=0)
    expected /= np.linalg.norm(expected)
    np.testing.assert_allclose(stored, expected, atol=1e-5)


@pytest.mark.parametrize(
    "config",
    [
        LongDocConfig(policy="chunk"),
        LongDocConfig(policy="chunk", chunk_size=7, overlap=3),
        LongDocConfig(policy="chunk", chunk_size=40, overlap=0),
        LongDocConfig(policy="pcw"),
        LongDocConfig(policy="chunk", chunk_size=5, overlap=1, max_tokens=37),
        LongDocConfig(policy="pcw", max_tokens=50),
    ],
)
def test_settled_spans_open_every_longer_documents_plan(config: LongDocConfig) -> None:
    """What the streaming path embeds while reading is a prefix of the final plan, whatever the
    document's final length turns out to be."""
    window = 16
    for n_read in range(1, 90):
        settled = settled_spans(n_read, window, config)
        for n_tokens in range(n_read, n_read + 40):
            assert plan(n_tokens, window, config).spans[: len(settled)] == settled, (n_read, n_tokens)
        for first in range(len(settled) + 2):  # the ones after those already taken
            assert settled_spans(n_read, window, config, first) == settled[first:], (n_read, first)
