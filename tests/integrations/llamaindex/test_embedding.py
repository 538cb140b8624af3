"""RagidxEmbedding: LlamaIndex's BaseEmbedding contract (batch, async, query vs text), long texts
embedded whole by the policy (the vector ``ragidx ingest`` stores for pcw; extend in one pass),
and several-vectors policies refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding

from ragidx.config import RagidxConfig
from ragidx.embed.encoder import Encoder
from ragidx.errors import ConfigError
from ragidx.index.directory import Index
from ragidx.integrations.llamaindex import RagidxEmbedding
from tests.conftest import long_text


def test_the_base_embedding_contract(tiny_encoder: Encoder) -> None:
    embedding = RagidxEmbedding(encoder=tiny_encoder, embed_batch_size=2)
    assert isinstance(embedding, BaseEmbedding) and embedding.model_name == tiny_encoder.folder.name
    texts = [long_text(30, seed=i) for i in range(5)]
    batch = embedding.get_text_embedding_batch(texts)  # LlamaIndex splits it into batches of 2
    singles = [embedding.get_text_embedding(text) for text in texts]
    np.testing.assert_allclose(batch, singles, atol=1e-5)
    assert all(len(v) == embedding.dim and np.linalg.norm(v) == pytest.approx(1.0, abs=1e-5) for v in batch)
    query = embedding.get_query_embedding("river stone")
    expected, _ = tiny_encoder.embed(["river stone"], role="query")
    np.testing.assert_allclose(query, expected[0], atol=1e-6)


async def test_async_gives_the_same_vectors(tiny_encoder: Encoder) -> None:
    embedding = RagidxEmbedding(encoder=tiny_encoder)
    text = long_text(200, seed=3)
    np.testing.assert_allclose(
        await embedding.aget_text_embedding(text), embedding.get_text_embedding(text), atol=1e-6
    )
    np.testing.assert_allclose(
        await embedding.aget_query_embedding("bees"), embedding.get_query_embedding("bees"), atol=1e-6
    )


def test_a_long_text_is_one_pcw_vector_the_one_ingest_stores(tmp_path: Path, tiny_model: Path) -> None:
    from ragidx.ingestion.pipeline import ingest

    text = long_text(400)
    config = RagidxConfig().override(
        model={"model": str(tiny_model), "device": "cpu"}, long_doc={"policy": "pcw"}
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "long.txt").write_text(text)
    ingest(tmp_path / "docs", tmp_path / "ix", config)
    index = Index.open(tmp_path / "ix")
    stored = index.vectors_of(index.store.vids())[0]
    embedding = RagidxEmbedding.from_config(config)
    vector = embedding.get_text_embedding(text)
    assert embedding.last_plans[0].mode == "pcw" and len(embedding.last_plans[0].spans) > 4
    np.testing.assert_allclose(vector, stored, atol=1e-5)


def test_extend_embeds_past_the_window_in_one_pass(tiny_model: Path) -> None:
    extend = RagidxEmbedding(
        str(tiny_model),
        device="cpu",
        long_doc={"policy": "extend", "extension": {"method": "pi", "target_length": 256}},
    )
    vector = extend.get_text_embedding(long_text(150))  # ~200 tokens, past the 64-token window
    plan = extend.last_plans[0]
    assert plan.mode == "extend" and plan.spans == [(0, plan.n_tokens)] and plan.n_tokens > 64
    assert len(vector) == extend.dim and extend.long_doc.policy == "extend"


@pytest.mark.parametrize(
    "long_doc", [{"policy": "chunk"}, {"policy": "late", "vectors_per_doc": 2}, {"policy": "nope"}]
)
def test_several_vectors_per_text_and_bad_policies_are_refused(tiny_encoder: Encoder, long_doc: dict) -> None:
    with pytest.raises(ConfigError, match="long_doc") as info:
        RagidxEmbedding(encoder=tiny_encoder, long_doc=long_doc)
    assert "\n" not in str(info.value)
