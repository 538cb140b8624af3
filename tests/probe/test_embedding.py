"""A strategy bound to an encoder: the same vectors as the library, cached across strategies and runs."""

from __future__ import annotations

import numpy as np
import pytest

from ragidx.embed.cache import EmbeddingCache
from ragidx.embed.config import EncoderConfig
from ragidx.embed.documents import embed_plans, plan_tokens
from ragidx.errors import ConfigError
from ragidx.probe.embedding import ProbeEncoder
from ragidx.strategy import parse
from tests.conftest import TINY_WINDOW, long_text


@pytest.fixture(scope="module")
def base(tiny_model):
    return EncoderConfig(model=str(tiny_model), device="cpu")


def test_reach_per_strategy(base):
    assert ProbeEncoder(parse("truncate"), base, 256).reach == TINY_WINDOW - 2  # [CLS] … [SEP]
    assert ProbeEncoder(parse("pcw"), base, 256).reach == 256
    assert ProbeEncoder(parse("extend:pi"), base, 256).reach == 256 - 2


def test_vectors_are_the_library_vectors(base):
    encoder = ProbeEncoder(parse("pcw"), base, 256)
    texts = [long_text(150, seed=1), "short text"]
    expected = [
        embed_plans(encoder.encoder, [(t, plan_tokens(encoder.encoder, t, encoder.long_doc))])[0][0]
        for t in map(encoder.tokens, texts)
    ]
    np.testing.assert_allclose(encoder.embed(texts), np.stack(expected), atol=1e-6)


def test_cache_shares_short_texts_across_strategies_and_persists(base, tmp_path):
    short, long = "a short sentence.", long_text(150, seed=2)
    first = ProbeEncoder(parse("pcw"), base, 256, EmbeddingCache(tmp_path))
    vectors = first.embed([short, long])
    assert (first.cache.hits, first.cache.misses) == (0, 2)
    first.embed([short, long])
    assert (first.cache.hits, first.cache.misses) == (2, 2)
    second = ProbeEncoder(parse("extend:pi"), base, 256, EmbeddingCache(tmp_path))  # a new run, from disk
    other = second.embed([short, long])
    assert (second.cache.hits, second.cache.misses) == (1, 1)  # the short text fits the window
    np.testing.assert_array_equal(other[0], vectors[0])
    assert not np.allclose(other[1], vectors[1])
    tau = ProbeEncoder(parse("pcw+tau:0.5"), base, 256, EmbeddingCache(tmp_path))
    tau.embed([short])
    assert tau.cache.misses == 1  # TempScale changes every vector
    assert len(list(tmp_path.glob("part-*.parquet"))) == 3
    assert not list(tmp_path.glob("*.tmp"))


def test_cut_is_token_exact(base):
    encoder = ProbeEncoder(parse("pcw"), base, 256)
    text = long_text(100, seed=3)
    for n in (1, 17, 50):
        cut = encoder.cut(text, n)
        assert encoder.tokens(cut).ids == encoder.tokens(text).ids[:n]
    assert encoder.cut("two words", 10) == "two words"


def test_chunk_is_refused(base):
    with pytest.raises(ConfigError, match="one vector per text"):
        ProbeEncoder(parse("chunk"), base, 256)
