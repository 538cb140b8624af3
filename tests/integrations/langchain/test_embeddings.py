"""RagidxEmbeddings: langchain-tests' standard suites, and long texts embedded by their policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from langchain_tests.integration_tests import EmbeddingsIntegrationTests
from langchain_tests.unit_tests import EmbeddingsUnitTests

from ragidx.config import RagidxConfig
from ragidx.embed.config import LongDocConfig
from ragidx.embed.documents import embed_plans, plan_tokens
from ragidx.embed.encoder import Encoder
from ragidx.errors import ConfigError
from ragidx.index.directory import Index
from ragidx.ingestion.pipeline import ingest
from ragidx.integrations.langchain import RagidxEmbeddings
from tests.conftest import long_text


class _Params:
    """The suites build ``RagidxEmbeddings(**params)``; an autouse fixture fills ``params``."""

    params: ClassVar[dict[str, Any]] = {}

    @property
    def embeddings_class(self) -> type[RagidxEmbeddings]:
        return RagidxEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return self.params


class TestRagidxEmbeddingsUnit(_Params, EmbeddingsUnitTests):
    """The unit suite on a tiny random model, loaded from its folder by name like a user would."""

    @pytest.fixture(autouse=True)
    def _model(self, tiny_model: Path) -> None:
        type(self).params = {"model": str(tiny_model), "device": "cpu"}


class TestRagidxEmbeddingsIntegration(_Params, EmbeddingsIntegrationTests):
    """The integration suite on the real default model (loaded once per session)."""

    @pytest.fixture(autouse=True)
    def _model(self, default_encoder: Encoder) -> None:
        type(self).params = {"encoder": default_encoder}


def test_a_long_text_is_embedded_whole_by_pcw_as_ragidx_ingest_does(tmp_path: Path, tiny_model: Path) -> None:
    text = long_text(400)
    config = RagidxConfig().override(
        model={"model": str(tiny_model), "device": "cpu"}, long_doc={"policy": "pcw"}
    )
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "long.txt").write_text(text)
    ingest(docs, tmp_path / "ix", config)
    index = Index.open(tmp_path / "ix")
    stored = index.vectors_of(index.store.vids())[0]

    embeddings = RagidxEmbeddings.from_config(config)
    vector = np.asarray(embeddings.embed_documents([text])[0])
    assert embeddings.last_plans[0].mode == "pcw" and len(embeddings.last_plans[0].spans) > 4
    np.testing.assert_allclose(vector, stored, atol=1e-5)
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)


def test_policies_give_different_vectors_for_long_texts_only(tiny_encoder: Encoder) -> None:
    text, short = long_text(400), "a short text about a river"
    pcw = RagidxEmbeddings(encoder=tiny_encoder)
    truncate = RagidxEmbeddings(encoder=tiny_encoder, long_doc={"policy": "truncate"})
    long_pcw, short_pcw = pcw.embed_documents([text, short])
    long_cut, short_cut = truncate.embed_documents([text, short])
    assert [p.mode for p in truncate.last_plans] == ["truncate", "whole"]
    np.testing.assert_allclose(short_pcw, short_cut, atol=1e-6)
    assert not np.allclose(long_pcw, long_cut, atol=1e-3)
    # truncate keeps exactly the first window: the same as embedding that window's text
    first = tiny_encoder.tokenize(text)
    budget = tiny_encoder.content_budget(first)
    head = tiny_encoder.embed_windows([tiny_encoder.window(first, 0, budget)])[0]
    np.testing.assert_allclose(long_cut, head, atol=1e-5)


def test_extend_embeds_past_the_window_in_one_pass(tiny_model: Path) -> None:
    text = long_text(150)  # ~200 tokens: more than the 64-token window, less than the 256 target
    extend = RagidxEmbeddings(
        str(tiny_model),
        device="cpu",
        long_doc={"policy": "extend", "extension": {"method": "pi", "target_length": 256}},
    )
    (vector,) = extend.embed_documents([text])
    plan = extend.last_plans[0]
    assert plan.mode == "extend" and plan.spans == [(0, plan.n_tokens)] and plan.n_tokens > 64
    assert len(vector) == extend.dim


def test_chunk_policy_is_refused_and_empty_text_still_has_a_vector(tiny_encoder: Encoder) -> None:
    with pytest.raises(ConfigError, match="one vector per text"):
        RagidxEmbeddings(encoder=tiny_encoder, long_doc={"policy": "chunk"})
    (vector,) = RagidxEmbeddings(encoder=tiny_encoder).embed_documents([""])
    assert len(vector) == tiny_encoder.dim and np.isfinite(vector).all()


def test_queries_use_the_query_prompt(tiny_st_model: Path) -> None:
    embeddings = RagidxEmbeddings(str(tiny_st_model), device="cpu")
    query, document = embeddings.embed_query("river"), embeddings.embed_documents(["river"])[0]
    assert not np.allclose(query, document, atol=1e-4)  # "query: " vs "passage: " prompts
    expected, _ = embeddings.encoder.embed(["river"], role="query")
    np.testing.assert_allclose(query, expected[0], atol=1e-6)


@pytest.mark.parametrize(
    "long_doc",
    [
        {"policy": "late"},
        {"policy": "late", "vectors_per_doc": 2},
        {"policy": "chunk", "vectors_per_doc": 4},
        {"policy": "late", "vectors_per_doc": 1, "hybrid": {}},
    ],
)
def test_several_vectors_per_text_are_refused_with_the_way_out(tiny_encoder: Encoder, long_doc: dict) -> None:
    with pytest.raises(ConfigError, match="one vector per text.*RagidxRetriever"):
        RagidxEmbeddings(encoder=tiny_encoder, long_doc=long_doc)


@pytest.mark.parametrize("policy", ["late", "chunk"])
def test_a_budget_of_one_vector_embeds_each_text_once(tiny_encoder: Encoder, policy: str) -> None:
    long_doc = LongDocConfig(policy=policy, chunk_size=16, overlap=0, vectors_per_doc=1)
    embeddings = RagidxEmbeddings(encoder=tiny_encoder, long_doc=long_doc)
    texts = [long_text(120, seed=1), "Bees dance."]
    vectors = embeddings.embed_documents(texts)
    assert [p.mode for p in embeddings.last_plans] == [policy, "whole"]
    assert len(embeddings.last_plans[0].spans) > 4 and len(embeddings.last_plans[0].rows) == 1
    tokens = tiny_encoder.tokenize(texts[0])
    (expected,) = embed_plans(tiny_encoder, [(tokens, plan_tokens(tiny_encoder, tokens, long_doc))])
    np.testing.assert_allclose(vectors[0], expected[0], atol=1e-6)
