"""Late chunking, the vectors-per-doc budget and hybrid plans (ragidx.embed.plan), against slow,
obviously correct references on tiny random models."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from ragidx.embed.config import EncoderConfig, ExtensionConfig, HybridConfig, LongDocConfig
from ragidx.embed.documents import embed_plans, plan_tokens
from ragidx.embed.encoder import Encoder
from ragidx.embed.plan import pass_owners, plan
from tests.conftest import long_text


def _late(**options: object) -> LongDocConfig:
    return LongDocConfig(policy="late", **{"overlap": 0, **options})


# ----------------------------------------------------------------------------- plans
def test_late_spans_map_onto_token_offsets_with_right_aligned_last_chunk() -> None:
    result = plan(1000, 512, _late(chunk_size=256))
    assert result.mode == "late"
    assert result.spans == [(0, 256), (256, 512), (512, 768), (744, 1000)]
    assert result.passes == ((0, 512), (384, 896), (488, 1000))  # window passes, a quarter overlap
    assert result.n_embedded == 1000 and not result.single_vector


def test_late_overlapping_chunks_and_one_extended_pass() -> None:
    result = plan(600, 100, _late(chunk_size=200, overlap=50), extended_window=1000)
    assert result.spans == [(0, 200), (150, 350), (300, 500), (400, 600)]
    assert result.passes == ((0, 600),)  # fits the extended window: one pass


def test_late_short_document_is_whole_and_long_one_is_covered_not_cut() -> None:
    assert plan(200, 512, _late(chunk_size=256)).mode == "whole"
    long = plan(5000, 512, _late(chunk_size=256), extended_window=2048)
    assert long.passes[0] == (0, 2048) and long.passes[-1][1] == 5000 and long.n_embedded == 5000
    cut = plan(5000, 512, _late(chunk_size=256, max_tokens=1000))
    assert cut.n_embedded == 1000 and cut.n_tokens == 5000


def test_pass_owners_take_each_token_from_its_most_central_pass() -> None:
    passes = [(0, 512), (384, 896), (488, 1000)]
    owners = pass_owners(passes)
    assert owners[0][0] == 0 and owners[-1][1] == 1000
    assert all(a[1] == b[0] for a, b in itertools.pairwise(owners))  # a partition
    for token in range(1000):
        (owner,) = [i for i, (lo, hi) in enumerate(owners) if lo <= token < hi]
        centrality = [min(token - s, e - 1 - token) if s <= token < e else -1 for s, e in passes]
        assert owner == int(np.argmax(centrality)), token


@pytest.mark.parametrize("policy", ["chunk", "late"])
def test_vectors_per_doc_budget_groups_consecutive_chunks(policy: str) -> None:
    for k in (1, 2, 3, 4):
        result = plan(2000, 512, LongDocConfig(policy=policy, chunk_size=128, overlap=0, vectors_per_doc=k))
        rows = result.chunk_rows
        assert len(rows) == k and rows[0][0] == 0 and rows[-1][1] == 2000
        assert all(a[1] <= b[1] for a, b in itertools.pairwise(rows))
    few = plan(300, 512, LongDocConfig(policy="late", chunk_size=128, overlap=0, vectors_per_doc=16))
    assert len(few.chunk_rows) == 3  # fewer chunks than K: one vector each


def test_hybrid_rows_put_the_document_vector_first() -> None:
    hybrid = plan(1000, 512, _late(chunk_size=256, hybrid=HybridConfig(document="pass")))
    assert hybrid.document == "pass" and hybrid.rows[0] == (0, 1000) and len(hybrid.rows) == 5
    pcw = plan(
        1000,
        512,
        LongDocConfig(policy="chunk", chunk_size=256, overlap=0, hybrid=HybridConfig(document="pcw")),
    )
    assert pcw.document is not None and pcw.document != "pass" and pcw.document.mode == "pcw"
    assert pcw.windows == [*pcw.spans, *pcw.document.spans]
    whole = plan(100, 512, _late(hybrid=HybridConfig()))
    assert whole.mode == "whole" and whole.rows == [(0, 100), (0, 100)]


def test_hybrid_and_budget_only_with_chunk_or_late() -> None:
    with pytest.raises(ValueError, match="chunk and late"):
        LongDocConfig(policy="pcw", vectors_per_doc=4)
    with pytest.raises(ValueError, match="pass"):
        LongDocConfig(policy="chunk", hybrid=HybridConfig(document="pass"))


# ----------------------------------------------------------------------------- vectors
def _states(encoder: Encoder, input_ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return encoder.model(input_ids=torch.tensor([input_ids])).last_hidden_state[0]


def _normalised(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector)


def test_one_chunk_spanning_the_document_is_whole_document_mean_pooling(tiny_encoder: Encoder) -> None:
    tokens = tiny_encoder.tokenize(long_text(40, seed=3))
    n = len(tokens)
    assert 10 < n <= tiny_encoder.content_budget(tokens)
    one_chunk = LongDocConfig(policy="late", chunk_size=n, overlap=0)
    doc_plan = plan(n, n - 1, one_chunk, extended_window=tiny_encoder.content_budget(tokens))
    assert doc_plan.mode == "late" and doc_plan.spans == [(0, n)] and doc_plan.passes == ((0, n),)
    (late,) = embed_plans(tiny_encoder, [(tokens, doc_plan)])
    whole = tiny_encoder.embed_windows([tiny_encoder.window(tokens)])
    np.testing.assert_allclose(late[0], whole[0], atol=1e-5)


def test_late_chunks_match_a_slow_reference_over_one_pass(tiny_encoder: Encoder) -> None:
    tokens = tiny_encoder.tokenize(long_text(45, seed=4))
    n = len(tokens)
    config = LongDocConfig(policy="late", chunk_size=16, overlap=4, hybrid=HybridConfig(document="pass"))
    doc_plan = plan_tokens(tiny_encoder, tokens, config)
    assert doc_plan.passes == ((0, n),) and len(doc_plan.spans) >= 3
    (vectors,) = embed_plans(tiny_encoder, [(tokens, doc_plan)])
    window = tiny_encoder.window(tokens)
    states = _states(tiny_encoder, window.input_ids).numpy()
    start = window.content_start
    np.testing.assert_allclose(vectors[0], _normalised(states.mean(axis=0)), atol=1e-5)  # the pass
    for row, (lo, hi) in zip(vectors[1:], doc_plan.spans, strict=True):
        picked = list(range(start + lo, start + hi))
        if lo == 0:
            picked = list(range(start)) + picked  # leading [CLS]
        if hi == n:
            picked += list(range(start + n, len(window.input_ids)))  # trailing [SEP]
        np.testing.assert_allclose(row, _normalised(states[picked].mean(axis=0)), atol=1e-5)


def test_late_chunks_over_several_passes_match_a_slow_reference(tiny_encoder: Encoder) -> None:
    """A document three windows long: every token's state from its most central pass."""
    tokens = tiny_encoder.tokenize(long_text(120, seed=5))
    n, budget = len(tokens), tiny_encoder.content_budget(tokens)
    assert n > 2 * budget
    doc_plan = plan_tokens(tiny_encoder, tokens, LongDocConfig(policy="late", chunk_size=20, overlap=0))
    assert len(doc_plan.passes) >= 3
    (vectors,) = embed_plans(tiny_encoder, [(tokens, doc_plan)])
    per_pass = []
    for s, e in doc_plan.passes:
        window = tiny_encoder.window(tokens, s, e)
        per_pass.append((s, e, window, _states(tiny_encoder, window.input_ids).numpy()))
    token_states = []
    for t in range(n):
        best = max(per_pass, key=lambda p: min(t - p[0], p[1] - 1 - t) if p[0] <= t < p[1] else -1)
        s, _, window, states = best
        token_states.append(states[window.content_start + t - s])
    first, last = per_pass[0], per_pass[-1]
    lead = list(first[3][: first[2].content_start])
    trail = list(last[3][last[2].content_start + last[1] - last[0] :])
    for row, (lo, hi) in zip(vectors, doc_plan.spans, strict=True):
        picked = token_states[lo:hi] + (lead if lo == 0 else []) + (trail if hi == n else [])
        np.testing.assert_allclose(row, _normalised(np.mean(picked, axis=0)), atol=1e-5)


def test_budget_vectors_are_group_means_of_chunk_vectors(tiny_encoder: Encoder) -> None:
    tokens = tiny_encoder.tokenize(long_text(150, seed=6))
    full = plan_tokens(tiny_encoder, tokens, LongDocConfig(policy="chunk", chunk_size=16, overlap=0))
    grouped = plan_tokens(
        tiny_encoder, tokens, LongDocConfig(policy="chunk", chunk_size=16, overlap=0, vectors_per_doc=2)
    )
    raw = tiny_encoder.embed_windows(
        [tiny_encoder.window(tokens, s, e) for s, e in full.spans], normalize=False
    )
    (vectors,) = embed_plans(tiny_encoder, [(tokens, grouped)])
    assert full.mode == "chunk" and len(full.spans) >= 5 and len(vectors) == 2
    middle = round(len(full.spans) / 2)
    for row, (a, b) in zip(vectors, [(0, middle), (middle, len(full.spans))], strict=True):
        np.testing.assert_allclose(row, _normalised(raw[a:b].mean(axis=0)), atol=1e-5)


def test_late_chunking_runs_through_an_extended_rope_encoder(tiny_decoder: object) -> None:
    """Late chunks over one extended pass (a RoPE model, PI past its 128 positions): finite, unit,
    distinct per chunk, and the pass is longer than the model's window."""
    encoder = Encoder(
        EncoderConfig(model=str(tiny_decoder), device="cpu"),
        extension=ExtensionConfig(method="pi", target_length=256),
    )
    tokens = encoder.tokenize(long_text(150, seed=8))
    config = LongDocConfig(
        policy="late", chunk_size=32, overlap=0, extension=ExtensionConfig(method="pi", target_length=256)
    )
    doc_plan = plan_tokens(encoder, tokens, config)
    assert len(doc_plan.passes) == 1 and doc_plan.passes[0][1] > encoder.content_budget(tokens)
    (vectors,) = embed_plans(encoder, [(tokens, doc_plan)])
    assert np.isfinite(vectors).all() and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert len(vectors) == len(doc_plan.spans) and not np.allclose(vectors[0], vectors[1])


def test_late_overlap_defaults_to_none_unless_asked() -> None:
    assert LongDocConfig(policy="late", chunk_size=16).overlap == 0
    assert LongDocConfig(policy="late", chunk_size=16, overlap=4).overlap == 4
    assert LongDocConfig(policy="chunk", chunk_size=64).overlap == 32
