"""Per-document extension scale (``ExtensionConfig.scale_from = "document"``): s = ceil(n / L_o) from
each input's own length, on tiny BERT (APE: PI, GP, RP), Llama and Gemma 3 (RoPE: PI, GP, NTK,
SelfExtend) models built in-process.

The reference for a document of n tokens is the obviously correct one: the same document through a
fixed-scale config with ``scale = ceil(n / L_o)`` (and, for NTK and SelfExtend, the defaults derived
from that s). Every test also checks that the fixed *target* scale gives something else, so it can
fail.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from ragidx.embed.config import EncoderConfig, ExtensionConfig, LongDocConfig
from ragidx.embed.extension import Extension
from ragidx.embed.extension import ape as ape_module
from ragidx.embed.extension import rope as rope_module
from ragidx.errors import ModelError
from tests.embed.extension.test_rope import extended, plain, tiny_gemma, tiny_llama, token_ids
from tests.tiny_models import tiny_bert

L_O = 64  # the tiny models' trained window
TARGET = 512  # L_t: the target scale is ceil(512 / 64) = 8
N = 150  # a document between L_o and L_t: its own scale is ceil(150 / 64) = 3
APE = ["pi", "gp", "rp"]
ROPE = ["pi", "gp", "ntk", "selfextend"]
MODELS = {
    "bert": lambda: tiny_bert(L_O, attn_implementation="sdpa"),
    "llama": tiny_llama,
    "gemma": tiny_gemma,
}
CASES = [("bert", m) for m in APE] + [(family, m) for family in ("llama", "gemma") for m in ROPE]


def _ids(family: str, length: int, seed: int = 1) -> torch.Tensor:
    if family == "bert":
        return torch.randint(5, 100, (1, length), generator=torch.Generator().manual_seed(seed))
    return token_ids(length, seed=seed)


def _per_document(method: str, **options: object) -> ExtensionConfig:
    return ExtensionConfig(method=method, target_length=TARGET, scale_from="document", **options)


def _fixed(method: str, scale: int, **options: object) -> ExtensionConfig:
    """The reference: s fixed to ``scale`` (target_length L_o·s, so PI and GP tables reach it)."""
    return ExtensionConfig(method=method, target_length=L_O * scale, scale=scale, **options)


def _differ(a: torch.Tensor, b: torch.Tensor) -> None:
    assert (a - b).abs().max().item() > 1e-3


# ---------------------------------------------------------------------------------- 1. reference
@pytest.mark.parametrize(("family", "method"), CASES)
def test_a_document_uses_its_own_scale(family: str, method: str) -> None:
    """n = 150, L_o = 64: the per-document pass equals the pass with s = 3 fixed, and differs from
    the index's s = 8 (RP does not use s: it equals both)."""
    model = MODELS[family]()
    ids = _ids(family, N)
    s = math.ceil(N / L_O)
    ext = Extension(model, _per_document(method), native_window=L_O)
    got = extended(ext, ids)
    reference = extended(Extension(model, _fixed(method, s), native_window=L_O), ids)
    torch.testing.assert_close(got, reference, atol=1e-6, rtol=0)
    assert ext.scales == (s,) and ext.scale == TARGET // L_O  # the largest s, the one for L_t
    target = extended(Extension(model, ExtensionConfig(method=method, target_length=TARGET), L_O), ids)
    if method == "rp":
        torch.testing.assert_close(got, target, atol=1e-6, rtol=0)
    else:
        _differ(got, target)


def test_ntk_and_selfextend_derive_lambda_g_w_from_the_documents_scale() -> None:
    config = _per_document("ntk")
    assert config.scale_for(L_O, N) == 3 and config.scale_for(L_O) == 8  # without a length: L_t's
    assert config.ntk_factor(L_O, 3) == 4.0 and config.ntk_factor(L_O) == 10.0
    assert _per_document("selfextend").selfextend_params(L_O, 3) == (21, 4)
    # explicit values stay whatever s is
    assert _per_document("ntk", ntk_lambda=2.5).ntk_factor(L_O, 3) == 2.5
    assert _per_document("selfextend", se_window=10, se_group=6).selfextend_params(L_O, 3) == (10, 6)
    # the default (scale_from = "target") ignores the length
    assert ExtensionConfig(method="pi", target_length=TARGET).scale_for(L_O, N) == 8


@pytest.mark.parametrize(
    ("method", "options"),
    [("ntk", {"ntk_lambda": 2.5}), ("selfextend", {"se_window": 10, "se_group": 6})],
)
def test_explicit_lambda_g_w_stay_under_a_per_document_scale(method: str, options: dict) -> None:
    """With λ (or w and g) given, s plays no part in NTK (SelfExtend): the index's settings apply."""
    model = tiny_llama()
    ids = token_ids(N)
    got = extended(Extension(model, _per_document(method, **options), native_window=L_O), ids)
    fixed = ExtensionConfig(method=method, target_length=TARGET, **options)
    expected = extended(Extension(model, fixed, native_window=L_O), ids)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def test_rope_pi_per_document_equals_fractional_position_ids() -> None:
    """An independent reference: n = 200 → s = 4, the plain model fed ids m / 4 (exact in float32)."""
    model = tiny_llama()
    ids = token_ids(200)
    config = _per_document("pi", attention_scaling=False)
    got = extended(Extension(model, config, native_window=L_O), ids)
    expected = plain(model, ids, position_ids=(torch.arange(200, dtype=torch.float32) / 4)[None])
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def test_ape_gp_per_document_equals_grouped_ids() -> None:
    """An independent reference: the plain BERT fed ids floor(m / 3) (n = 150)."""
    model = tiny_bert(L_O, attn_implementation="sdpa")
    ids = _ids("bert", N)
    got = extended(Extension(model, _per_document("gp", attention_scaling=False), native_window=L_O), ids)
    with torch.no_grad():
        expected = model(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            position_ids=(torch.arange(N) // 3)[None],
            token_type_ids=torch.zeros_like(ids),
        ).last_hidden_state
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------ 2. the window
@pytest.mark.parametrize(("family", "method"), CASES)
@pytest.mark.parametrize("length", [L_O, 37])
def test_inputs_within_the_window_run_the_unmodified_model(family: str, method: str, length: int) -> None:
    model = MODELS[family]()
    ids = _ids(family, length)
    expected = plain(model, ids)
    ext = Extension(model, _per_document(method), native_window=L_O)
    with ext.forward_kwargs(ids, torch.tensor([length]), "document") as kwargs:
        assert kwargs == {}
    assert torch.equal(extended(ext, ids), expected)
    assert ext.scales == ()  # nothing built for them


def test_a_padded_input_takes_its_scale_from_its_real_length() -> None:
    """A batch of one with a padded tail (the Encoder never makes one): s from the 150 real tokens
    (3), not the width 200 (4), and the real tokens' states as without the padding."""
    model = tiny_llama()
    ids = token_ids(N)
    padded = torch.cat([ids, torch.zeros((1, 50), dtype=ids.dtype)], dim=1)
    mask = torch.cat([torch.ones_like(ids), torch.zeros((1, 50), dtype=ids.dtype)], dim=1)
    ext = Extension(model, _per_document("pi"), native_window=L_O)
    got = extended(ext, padded, mask)[:, :N]
    assert ext.scales == (3,)
    torch.testing.assert_close(got, extended(ext, ids), atol=1e-5, rtol=0)
    bert = tiny_bert(L_O, attn_implementation="sdpa")  # GP's ids of the tail stay inside the table
    ape = Extension(bert, _per_document("gp"), native_window=L_O)
    short = _ids("bert", 130)
    tail = torch.cat([short, torch.zeros((1, 70), dtype=short.dtype)], dim=1)
    tail_mask = torch.cat([torch.ones_like(short), torch.zeros((1, 70), dtype=short.dtype)], dim=1)
    torch.testing.assert_close(
        extended(ape, tail, tail_mask)[:, :130], extended(ape, short), atol=1e-5, rtol=0
    )


# ------------------------------------------------------------------ 3, 4. through the Encoder
def _encoder(folder: Path, extension: ExtensionConfig):
    from ragidx.embed.encoder import Encoder

    return Encoder(EncoderConfig(model=str(folder), device="cpu"), extension=extension)


def _embed_documents(encoder, texts: list[str], extension: ExtensionConfig) -> list[np.ndarray]:
    from ragidx.embed.documents import embed_plans, plan_tokens

    config = LongDocConfig(policy="extend", max_tokens=extension.target_length, extension=extension)
    planned = []
    for text in texts:
        tokens = encoder.tokenize(text, "document")
        planned.append((tokens, plan_tokens(encoder, tokens, config)))
    return [vectors[0] for vectors in embed_plans(encoder, planned)]


@pytest.mark.parametrize("method", APE)
def test_encoder_documents_each_use_their_own_scale_whatever_their_batch(
    tiny_model: Path, method: str
) -> None:
    """Tiny BERT (window 64), L_t = 512: document A (≈100 tokens, s = 2) alone, and with B (≈200
    tokens, s = 4) and a short one in one call, gets the same vector; each equals the fixed-scale
    encoder with its own s; positions are built once per s."""
    from tests.conftest import long_text

    config = _per_document(method)
    encoder = _encoder(tiny_model, config)
    a, b, short = long_text(80, seed=1), long_text(190, seed=2), "A short note."
    n_a, n_b = (len(encoder.tokenize(t, "document")) + 2 for t in (a, b))  # [CLS] … [SEP]
    s_a, s_b = math.ceil(n_a / L_O), math.ceil(n_b / L_O)
    assert (s_a, s_b) == (2, 4), (n_a, n_b)
    built: list[int] = []
    original = ape_module.ApePositions.__init__

    def counting(self, model, method, original_length, scale, offset):
        built.append(scale)
        original(self, model, method, original_length, scale, offset)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ape_module.ApePositions, "__init__", counting)
        alone = _embed_documents(encoder, [a], config)[0]
        together = _embed_documents(encoder, [short, b, a, b], config)
    assert sorted(built) == [2, 4] and encoder.extension is not None and encoder.extension.scales == (2, 4)
    np.testing.assert_allclose(together[2], alone, atol=1e-6, rtol=0)
    np.testing.assert_allclose(together[1], together[3], atol=1e-6, rtol=0)
    for vector, s, text in ((alone, s_a, a), (together[1], s_b, b)):
        reference = _embed_documents(_encoder(tiny_model, _fixed(method, s)), [text], _fixed(method, s))[0]
        np.testing.assert_allclose(vector, reference, atol=1e-6, rtol=0)
        if method != "rp":
            target = ExtensionConfig(method=method, target_length=TARGET)
            assert (
                np.abs(vector - _embed_documents(_encoder(tiny_model, target), [text], target)[0]).max()
                > 1e-4
            )
    # the short document is the plain model's
    plain_vector = _embed_documents(_encoder(tiny_model, ExtensionConfig()), [short], config)[0]
    np.testing.assert_allclose(together[0], plain_vector, atol=1e-6, rtol=0)


@pytest.mark.parametrize("method", ["ntk", "selfextend"])
def test_rope_encoder_documents_of_two_scales_in_one_call(tiny_decoder: Path, method: str) -> None:
    """Tiny Llama (window 128), L_t = 1,024: inputs of 200 (s = 2) and 300 tokens (s = 3) in one
    call each equal the fixed-scale encoder with their s (λ = 3 / 4, (w, g) = (64, 3) / (42, 4)),
    and the shorter one's vector is the same embedded alone."""
    from ragidx.embed.encoder import Window

    config = ExtensionConfig(method=method, target_length=1024, scale_from="document")
    encoder = _encoder(tiny_decoder, config)
    generator = torch.Generator().manual_seed(5)
    windows = [Window(torch.randint(5, 200, (n,), generator=generator).tolist(), 0) for n in (200, 300)]
    both = encoder.embed_windows(windows)
    alone = encoder.embed_windows(windows[:1])
    np.testing.assert_allclose(both[0], alone[0], atol=1e-6, rtol=0)
    assert encoder.extension is not None and encoder.extension.scales == (2, 3)
    for row, s in ((0, 2), (1, 3)):
        fixed = ExtensionConfig(method=method, target_length=128 * s, scale=s)
        reference = _encoder(tiny_decoder, fixed).embed_windows([windows[row]])[0]
        np.testing.assert_allclose(both[row], reference, atol=1e-6, rtol=0)
        target = _encoder(tiny_decoder, ExtensionConfig(method=method, target_length=1024))
        assert np.abs(both[row] - target.embed_windows([windows[row]])[0]).max() > 1e-4


def test_positions_are_built_lazily_and_once_per_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_llama()
    built: list[int] = []
    original = rope_module.RopePositions.__init__

    def counting(self, model, config, original_length, scale):
        built.append(scale)
        original(self, model, config, original_length, scale)

    monkeypatch.setattr(rope_module.RopePositions, "__init__", counting)
    ext = Extension(model, _per_document("ntk"), native_window=L_O)
    assert built == [] and ext.scales == ()
    for n in (150, 140, 100, 150, 400):
        extended(ext, token_ids(n))
    assert built == [3, 2, 7] and ext.scales == (2, 3, 7)
    assert ext.positions_for(3) is ext.positions_for(3)
    # at most KEPT_SCALES are kept, the least recently used goes first
    for n in (700, 800):
        extended(ext, token_ids(n))
    assert built == [3, 2, 7, 11, 13] and ext.scales == (3, 7, 11, 13)  # 2: used least recently
    extended(ext, token_ids(150))
    assert built == [3, 2, 7, 11, 13]  # 3 was kept
    # the default builds the index's s up front, once
    built.clear()
    fixed = Extension(model, ExtensionConfig(method="ntk", target_length=TARGET), native_window=L_O)
    extended(fixed, token_ids(150))
    extended(fixed, token_ids(100))
    assert built == [8] and fixed.scales == (8,)


def test_a_model_or_method_that_cannot_serve_is_refused_up_front() -> None:
    """Positions are built lazily, but a wrong method or a scale-too-small table still fails at
    construction, as with the fixed scale."""
    with pytest.raises(ModelError, match="not an extension for rotary positions"):
        Extension(tiny_llama(), _per_document("rp"), native_window=L_O)
    with pytest.raises(ValueError, match="not an extension for absolute position tables"):
        Extension(tiny_bert(L_O), _per_document("ntk"), native_window=L_O)
    with pytest.raises(ModelError, match="exceeds the 64 learned positions"):
        Extension(tiny_bert(L_O), _per_document("pi", original_length=128), native_window=L_O)
