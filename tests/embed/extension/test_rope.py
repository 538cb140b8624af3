"""RoPE context extension (PI, NTK, GP, SelfExtend, attention scaling) against slow references.

Every check runs a tiny random model built in-process through :class:`ragidx.embed.extension.Extension`
and compares it with something that does not share its mechanism:

* NTK ↔ the RoPE formula with base ``b·λ`` (and a second model built with ``rope_theta = b·λ``);
* PI ↔ the plain model fed float position ids ``m / s``; GP ↔ integer ids ``m // s``;
* SelfExtend ↔ a dense attention function registered with transformers that, for every (query, key)
  pair, rotates the key by the relative position of LongEmbed §1.2's rule;
* attention scaling ↔ the plain model with each layer's ``scaling`` multiplied by ``ln n / ln L_o``;
* Gemma 3 (sliding / full layer types, bidirectional) ↔ plain SDPA and a dense masked reference.
"""

from __future__ import annotations

import copy
import functools
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AttentionInterface, AutoModel, Gemma3TextModel, LlamaModel
from transformers.integrations.sdpa_attention import repeat_kv
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from ragidx.embed.config import ExtensionConfig
from ragidx.embed.extension import Extension
from ragidx.embed.extension import attention as attn
from ragidx.embed.extension.attention import ATTN_IMPLEMENTATION
from ragidx.embed.extension.rope import ntk_frequencies
from tests import tiny_models

F64 = torch.float64
L_O = 64  # the tiny models' trained window
LLAMA_THETA = 10_000.0
GEMMA_SLIDING_THETA, GEMMA_FULL_THETA = 10_000.0, 1_000_000.0
GEMMA_WINDOW = 8  # config value; transformers turns it into 8 // 2 + 1 = 5 (|i - j| < 5) when bidirectional
REFERENCE = "ragidx_test_dense_reference"


# --------------------------------------------------------------------------------- tiny models
def tiny_llama(seed: int = 0) -> LlamaModel:
    rope = {"rope_type": "default", "rope_theta": LLAMA_THETA}
    return tiny_models.tiny_llama(seed, vocab_size=200, max_position_embeddings=L_O, rope_parameters=rope)


def tiny_gemma(seed: int = 0, bidirectional: bool = True) -> Gemma3TextModel:
    return tiny_models.tiny_gemma(
        seed,
        vocab_size=200,
        max_position_embeddings=L_O,
        sliding_window=GEMMA_WINDOW,
        layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": GEMMA_SLIDING_THETA},
            "full_attention": {"rope_type": "default", "rope_theta": GEMMA_FULL_THETA},
        },
        use_bidirectional_attention=bidirectional,
        attn_implementation="sdpa",
    )


def token_ids(length: int, batch: int = 1, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 200, (batch, length), generator=generator)


def plain(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor | None = None, **kwargs
) -> torch.Tensor:
    mask = torch.ones_like(ids) if mask is None else mask
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, **kwargs).last_hidden_state


def extended(
    ext: Extension, ids: torch.Tensor, mask: torch.Tensor | None = None, role: str = "document"
) -> torch.Tensor:
    """One forward pass the way :class:`ragidx.embed.encoder.Encoder` runs it."""
    mask = torch.ones_like(ids) if mask is None else mask
    with torch.no_grad(), ext.forward_kwargs(ids, mask.sum(dim=1), role) as kwargs:
        return ext.model(input_ids=ids, attention_mask=mask, **kwargs).last_hidden_state


def close(actual: torch.Tensor, expected: torch.Tensor, atol: float) -> None:
    torch.testing.assert_close(actual, expected, atol=atol, rtol=0)


def differ(a: torch.Tensor, b: torch.Tensor, at_least: float = 1e-2) -> None:
    """The comparison above would have caught a wrong implementation: the outputs really differ."""
    assert (a - b).abs().max().item() > at_least


def frequencies(base: float, dim: int) -> torch.Tensor:
    """θ_j = base^(−2j/d), j = 0..d/2−1, in float64."""
    return 1.0 / base ** (torch.arange(0, dim, 2, dtype=F64) / dim)


def attention_factor(length: int) -> float:
    return max(1.0, math.log(length) / math.log(L_O))


# --------------------------------------------------------------------------------- spies / references
@contextmanager
def spy(monkeypatch: pytest.MonkeyPatch, name: str, block: int | None = None) -> Iterator[list[dict]]:
    """Record calls to ``ragidx.embed.extension.attention.<name>`` (optionally forcing a small block)."""
    original = getattr(attn, name)
    calls: list[dict] = []

    def wrapper(*args, **kwargs):
        if block is not None:
            kwargs["block"] = block
        calls.append({"args": args, "kwargs": kwargs})
        return original(*args, **kwargs)

    monkeypatch.setattr(attn, name, wrapper)
    yield calls
    monkeypatch.setattr(attn, name, original)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@functools.cache
def selfextend_relative(length: int, window: int, group: int) -> torch.Tensor:
    """LongEmbed §1.2, pair by pair: rel = j − i inside the window, else
    sign(j − i) · (|j//g − i//g| + w − w//g)."""
    rel = torch.zeros(length, length, dtype=torch.long)
    for i in range(length):
        for j in range(length):
            if abs(i - j) < window:
                rel[i, j] = j - i
            else:
                sign = 1 if j > i else -1
                rel[i, j] = sign * (abs(j // group - i // group) + window - window // group)
    return rel


def test_relative_rule_reproduces_the_worked_example() -> None:
    """The reference rule itself (10 tokens, w = 4, g = 2; spec §1.2)."""
    rel = selfextend_relative(10, window=4, group=2)
    assert rel[0].tolist() == [0, 1, 2, 3, 4, 4, 5, 5, 6, 6]
    assert rel[4].tolist() == [-4, -3, -2, -1, 0, 1, 2, 3, 4, 4]


def dense_reference(
    padding: torch.Tensor | None = None,
    selfextend: tuple[int, int] | None = None,
    factor: float = 1.0,
    positions: torch.Tensor | None = None,
) -> Callable:
    """A transformers attention function computing the full L×L softmax in float64.

    ``padding``: (B, L) keys to keep; sliding layers keep ``|i − j| < module.sliding_window``; causal
    layers keep ``j <= i``; ``factor`` multiplies the logits of layers without a sliding window.
    ``selfextend=(w, g)``: in layers without a sliding window, each key is re-rotated (with
    frequencies from the layer's rope_theta) so that the pair sees the §1.2 relative position.
    The model must have rotated q and k at positions ``positions`` (default 0..L−1).
    """

    def reference(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        groups = module.num_key_value_groups
        q = query.to(F64)
        k = repeat_kv(key, groups).to(F64)
        v = repeat_kv(value, groups).to(F64)
        length, dim = q.shape[2], q.shape[3]
        i = torch.arange(length)[:, None]
        j = torch.arange(length)[None, :]
        window = getattr(module, "sliding_window", None)
        keep = torch.ones(length, length, dtype=torch.bool)
        if window:
            keep &= (i - j).abs() < window
        if module.is_causal:
            keep &= j <= i
        keep = keep[None, None]
        if padding is not None:
            keep = keep & padding.bool()[:, None, None, :]
        if selfextend is not None and not window:
            pos = torch.arange(length) if positions is None else positions
            w, g = selfextend
            rel = selfextend_relative(length, w, g)
            delta = (rel - (pos[None, :] - pos[:, None])).to(F64)  # extra rotation of key j for query i
            layer_type = getattr(module, "layer_type", None)
            rope = module.config.rope_parameters
            theta = rope.get(layer_type, rope)["rope_theta"]
            angles = delta[..., None] * frequencies(theta, dim)  # (L, L, d/2)
            cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
            k_pair = k[:, :, None] * cos + rotate_half(k)[:, :, None] * sin  # (B, H, L_q, L_k, d)
            logits = torch.einsum("bhid,bhijd->bhij", q, k_pair)
        else:
            logits = q @ k.transpose(-1, -2)
        logits = logits * scaling * (1.0 if window else factor)
        logits = logits.masked_fill(~keep, float("-inf"))
        weights = torch.softmax(logits, dim=-1).nan_to_num(0.0)
        out = (weights @ v).to(query.dtype)
        return out.transpose(1, 2).contiguous(), None

    return reference


@contextmanager
def as_reference(model: torch.nn.Module, function: Callable, monkeypatch: pytest.MonkeyPatch):
    """A copy of ``model`` whose attention is ``function`` (registered for this test only)."""
    monkeypatch.setitem(AttentionInterface._global_mapping, REFERENCE, function)
    monkeypatch.setitem(AttentionMaskInterface._global_mapping, REFERENCE, sdpa_mask)
    ref = copy.deepcopy(model)
    ref.set_attn_implementation(REFERENCE)
    yield ref


# ================================================================================= 1. NTK formula
@pytest.mark.parametrize("base", [10_000.0, 1_000_000.0])
@pytest.mark.parametrize("dim", [8, 64, 128])
@pytest.mark.parametrize("factor", [2.0, 3.0, 4.5, 10.0])
def test_ntk_frequencies_are_the_rope_formula_with_base_times_lambda(
    base: float, dim: int, factor: float
) -> None:
    inv = frequencies(base, dim)
    expected = torch.tensor(
        [1.0 / (base * factor) ** (2 * j / dim) for j in range(dim // 2)], dtype=F64
    )  # θ'_j = (b·λ)^(−2j/d), term by term
    got = ntk_frequencies(inv, factor)
    assert got.dtype == F64
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)
    assert got[0] == inv[0]  # the highest frequency never moves
    assert torch.all(got[1:] < inv[1:])


def test_ntk_lambda_one_returns_the_original() -> None:
    for inv in (frequencies(10_000.0, 64), frequencies(10_000.0, 64).float()):
        got = ntk_frequencies(inv, 1.0)
        assert got.dtype == inv.dtype
        assert torch.equal(got, inv)


def test_ntk_keeps_float32_buffers_float32() -> None:
    inv = frequencies(10_000.0, 32).float()
    got = ntk_frequencies(inv, 3.0)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), frequencies(30_000.0, 32), rtol=1e-6, atol=0)


def test_extended_frequency_buffers_inside_the_forward() -> None:
    """PI divides by s; NTK's default λ is ceil(1.25 s) (s = 3 → λ = 4, base 40,000)."""
    model = tiny_llama()
    rotary = model.rotary_emb
    original = rotary.inv_freq.clone()
    ids = token_ids(150)
    expected = {"pi": frequencies(LLAMA_THETA, 8) / 3, "ntk": frequencies(4 * LLAMA_THETA, 8)}
    for method, freqs in expected.items():
        ext = Extension(model, ExtensionConfig(method=method, target_length=192), native_window=L_O)
        with ext.forward_kwargs(ids, torch.tensor([150]), "document"):
            torch.testing.assert_close(rotary.inv_freq.double(), freqs, rtol=1e-6, atol=0)
            assert torch.equal(rotary.original_inv_freq, original)
        assert torch.equal(rotary.inv_freq, original)


# ================================================================================= 2. tiny Llama
@pytest.mark.parametrize("method", ["pi", "ntk", "gp", "selfextend"])
@pytest.mark.parametrize("attention_scaling", [True, False])
def test_inputs_within_the_window_run_the_plain_model(method: str, attention_scaling: bool) -> None:
    model = tiny_llama()
    ids = token_ids(L_O, batch=2)
    mask = torch.ones_like(ids)
    mask[1, 40:] = 0
    single = token_ids(37, seed=2)
    expected = [plain(model, ids, mask), plain(model, single)]
    original = model.rotary_emb.inv_freq.clone()
    ext = Extension(
        model,
        ExtensionConfig(method=method, target_length=192, attention_scaling=attention_scaling),
        native_window=L_O,
    )
    with ext.forward_kwargs(ids, mask.sum(dim=1), "document") as kwargs:
        assert kwargs == {}
        assert torch.equal(model.rotary_emb.inv_freq, original)
    close(extended(ext, ids, mask), expected[0], atol=1e-6)
    close(extended(ext, single), expected[1], atol=1e-6)


def test_one_token_past_the_window_is_extended() -> None:
    model = tiny_llama()
    config = ExtensionConfig(method="gp", target_length=192, attention_scaling=False)
    ext = Extension(model, config, native_window=L_O)
    ids = token_ids(L_O + 1)
    got = extended(ext, ids)
    close(got, plain(model, ids, position_ids=(torch.arange(L_O + 1) // 3)[None]), atol=1e-5)
    differ(got, plain(model, ids))


IDENTITY_SETTINGS = {
    "ntk-lambda-1": {"method": "ntk", "ntk_lambda": 1.0},
    "pi-scale-1": {"method": "pi", "scale": 1},
    "gp-scale-1": {"method": "gp", "scale": 1},
    "selfextend-group-1": {"method": "selfextend", "se_group": 1},
    "selfextend-window-past-the-input": {"method": "selfextend", "se_window": 400},  # no far keys
}


@pytest.mark.parametrize("settings", IDENTITY_SETTINGS.values(), ids=IDENTITY_SETTINGS.keys())
def test_identity_settings_past_the_window_equal_the_plain_model(
    settings: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain RoPE runs past 64 fine; these settings change no position, so nothing may change."""
    model = tiny_llama()
    ids = token_ids(150)
    expected = plain(model, ids)
    ext = Extension(
        model, ExtensionConfig(target_length=192, attention_scaling=False, **settings), native_window=L_O
    )
    with spy(monkeypatch, "self_extend_attention", block=32) as calls:
        got = extended(ext, ids)
    assert len(calls) == (2 if settings["method"] == "selfextend" else 0)  # the SelfExtend path ran
    close(got, expected, atol=1e-5)


@pytest.mark.parametrize(
    ("target", "scale", "atol"),
    [
        (256, 4, 1e-6),  # m·(θ/4) and (m/4)·θ are the same float32 numbers
        (192, 3, 3e-4),  # m·(θ/3) and (m/3)·θ round differently (angles up to 50 rad)
    ],
)
def test_pi_equals_fractional_position_ids(target: int, scale: int, atol: float) -> None:
    model = tiny_llama()
    ids = token_ids(150)
    ext = Extension(
        model, ExtensionConfig(method="pi", target_length=target, attention_scaling=False), native_window=L_O
    )
    assert ext.scale == scale
    got = extended(ext, ids)
    expected = plain(model, ids, position_ids=(torch.arange(150, dtype=torch.float32) / scale)[None])
    close(got, expected, atol=atol)
    differ(got, plain(model, ids))


def test_gp_equals_grouped_position_ids() -> None:
    model = tiny_llama()
    ids = token_ids(150)
    ext = Extension(
        model, ExtensionConfig(method="gp", target_length=192, attention_scaling=False), native_window=L_O
    )
    got = extended(ext, ids)
    close(got, plain(model, ids, position_ids=(torch.arange(150) // 3)[None]), atol=1e-5)
    differ(got, plain(model, ids))


@pytest.mark.parametrize("ntk_lambda", [None, 2.5])
def test_ntk_equals_a_model_built_with_base_times_lambda(ntk_lambda: float | None) -> None:
    model = tiny_llama()
    ids = token_ids(150)
    config = ExtensionConfig(method="ntk", target_length=192, ntk_lambda=ntk_lambda, attention_scaling=False)
    got = extended(Extension(model, config, native_window=L_O), ids)
    config = copy.deepcopy(model.config)
    config.rope_parameters["rope_theta"] = LLAMA_THETA * (ntk_lambda or 4)
    rebased = LlamaModel(config).eval()
    rebased.load_state_dict(model.state_dict())
    torch.testing.assert_close(
        rebased.rotary_emb.inv_freq.double(),
        frequencies(LLAMA_THETA * (ntk_lambda or 4), 8),
        rtol=1e-6,
        atol=0,
    )
    close(got, plain(rebased, ids), atol=1e-5)
    differ(got, plain(model, ids))


SELFEXTEND_CASES = {
    # L = 100, L_o = 64, target 128 → s = 2, defaults w = 32, g = 3
    "defaults": {},
    "w10-g4": {"se_window": 10, "se_group": 4},
    "w7-g5-scaled": {"se_window": 7, "se_group": 5, "attention_scaling": True},
}


@pytest.mark.parametrize("block", [None, 16])
@pytest.mark.parametrize("settings", SELFEXTEND_CASES.values(), ids=SELFEXTEND_CASES.keys())
def test_selfextend_llama_equals_dense_pairwise_reference(
    settings: dict, block: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny_llama()
    length = 100
    ids = token_ids(length)
    options = {"attention_scaling": False, **settings}
    ext = Extension(
        model, ExtensionConfig(method="selfextend", target_length=128, **options), native_window=L_O
    )
    window, group = ExtensionConfig(method="selfextend", target_length=128, **options).selfextend_params(L_O)
    assert (window, group) == (settings.get("se_window", 32), settings.get("se_group", 3))
    factor = attention_factor(length) if options["attention_scaling"] else 1.0
    with spy(monkeypatch, "self_extend_attention", block=block) as calls:
        got = extended(ext, ids)
    assert len(calls) == 2
    reference = dense_reference(selfextend=(window, group), factor=factor)
    with as_reference(model, reference, monkeypatch) as ref:
        expected = plain(ref, ids)
    close(got, expected, atol=1e-4)
    differ(got, plain(model, ids), at_least=1e-3)


def test_dense_reference_without_selfextend_is_the_plain_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference machinery itself (registration, GQA, causal mask) reproduces SDPA."""
    model = tiny_llama()
    ids = token_ids(100)
    with as_reference(model, dense_reference(), monkeypatch) as ref:
        close(plain(ref, ids), plain(model, ids), atol=1e-5)


@pytest.mark.parametrize("method", ["pi", "ntk"])
def test_frequency_buffers_restored_after_the_forward(method: str) -> None:
    model = tiny_llama()
    ids = token_ids(150)
    before = plain(model, ids)
    original = model.rotary_emb.inv_freq.clone()
    ext = Extension(model, ExtensionConfig(method=method, target_length=192), native_window=L_O)
    differ(extended(ext, ids), before)
    assert torch.equal(model.rotary_emb.inv_freq, original)
    assert torch.equal(model.rotary_emb.original_inv_freq, original)
    assert torch.equal(plain(model, ids), before)
    with pytest.raises(RuntimeError, match="boom"), ext.forward_kwargs(ids, torch.tensor([150]), "document"):
        assert not torch.equal(model.rotary_emb.inv_freq, original)
        raise RuntimeError("boom")
    assert torch.equal(model.rotary_emb.inv_freq, original)
    assert torch.equal(plain(model, ids), before)


@pytest.mark.parametrize(
    ("dtype", "atol"),
    [
        (torch.float32, 5e-5),  # ragidx multiplies the query, the reference the scale: rounding differs
        (torch.float64, 5e-6),  # tight enough to tell ln 150 from ln 151
    ],
)
def test_attention_scaling_multiplies_every_logit_by_log_ratio(dtype: torch.dtype, atol: float) -> None:
    model = tiny_llama().to(dtype)
    ids = token_ids(150)
    config = ExtensionConfig(method="pi", target_length=256)  # s = 4: exact PI reference, see above
    scaled = extended(Extension(model, config, native_window=L_O), ids)
    unscaled = extended(
        Extension(model, config.model_copy(update={"attention_scaling": False}), native_window=L_O), ids
    )
    differ(scaled, unscaled)
    positions = (torch.arange(150, dtype=torch.float32) / 4)[None]
    reference = copy.deepcopy(model)
    for layer in reference.layers:
        layer.self_attn.scaling *= attention_factor(150)
    close(scaled, plain(reference, ids, position_ids=positions), atol=atol)
    close(unscaled, plain(model, ids, position_ids=positions), atol=1e-5)


@pytest.mark.parametrize("method", ["ntk", "selfextend"])
def test_encoder_embeds_long_windows_extended_and_short_ones_plain(
    method: str, tiny_decoder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through :class:`Encoder` (tiny Llama, window 128, target 256 → s = 2): a long window equals
    the model rebuilt with base 3·θ (NTK, λ = 3) or the dense SelfExtend reference (w = 64, g = 3),
    with logits × ln 200 / ln 128, last-token pooled; short windows in the same call stay plain."""
    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import Encoder, Window

    settings = EncoderConfig(model=str(tiny_decoder), device="cpu")
    encoder = Encoder(settings, extension=ExtensionConfig(method=method, target_length=256))
    baseline = Encoder(settings)
    assert encoder.window_size == 128
    generator = torch.Generator().manual_seed(5)
    lengths = [200, 40, 128, 90]
    windows = [Window(torch.randint(5, 200, (n,), generator=generator).tolist(), 0) for n in lengths]
    vectors = encoder.embed_windows(windows)
    short = baseline.embed_windows(windows[1:])
    np.testing.assert_allclose(vectors[1:], short, atol=1e-6, rtol=0)

    model = baseline.model
    ids = torch.tensor([windows[0].input_ids])
    factor = math.log(200) / math.log(128)
    if method == "ntk":
        config = copy.deepcopy(model.config)
        config.rope_parameters["rope_theta"] = config.rope_parameters["rope_theta"] * 3
        reference = type(model)(config).eval()
        reference.load_state_dict(model.state_dict())
        for layer in reference.layers:
            layer.self_attn.scaling *= factor
        hidden = plain(reference, ids)
    else:
        with as_reference(model, dense_reference(selfextend=(64, 3), factor=factor), monkeypatch) as ref:
            hidden = plain(ref, ids)
    expected = torch.nn.functional.normalize(hidden[0, -1], dim=-1).numpy()
    np.testing.assert_allclose(vectors[0], expected, atol=2e-5, rtol=0)
    unextended = torch.nn.functional.normalize(plain(model, ids)[0, -1], dim=-1).numpy()
    assert np.abs(vectors[0] - unextended).max() > 1e-3


# ================================================================================= 3. Gemma 3 layout
def test_gemma_config_is_the_layout_under_test() -> None:
    model = tiny_gemma()
    assert model.config.sliding_window == GEMMA_WINDOW // 2 + 1
    windows = [layer.self_attn.sliding_window for layer in model.layers]
    assert windows == [5, 5, 5, None]
    assert not any(layer.self_attn.is_causal for layer in model.layers)
    rotary = model.rotary_emb
    torch.testing.assert_close(
        rotary.sliding_attention_inv_freq.double(), frequencies(GEMMA_SLIDING_THETA, 8), rtol=1e-6, atol=0
    )
    torch.testing.assert_close(
        rotary.full_attention_inv_freq.double(), frequencies(GEMMA_FULL_THETA, 8), rtol=1e-6, atol=0
    )


@pytest.mark.parametrize("method", ["pi", "ntk"])
def test_gemma_only_full_attention_frequencies_are_extended(method: str) -> None:
    model = tiny_gemma()
    rotary = model.rotary_emb
    sliding, full = rotary.sliding_attention_inv_freq.clone(), rotary.full_attention_inv_freq.clone()
    ids = token_ids(150)
    ext = Extension(model, ExtensionConfig(method=method, target_length=192), native_window=L_O)
    expected = (
        frequencies(GEMMA_FULL_THETA, 8) / 3 if method == "pi" else frequencies(GEMMA_FULL_THETA * 4, 8)
    )
    with ext.forward_kwargs(ids, torch.tensor([150]), "document"):
        torch.testing.assert_close(rotary.full_attention_inv_freq.double(), expected, rtol=1e-6, atol=0)
        assert torch.equal(rotary.sliding_attention_inv_freq, sliding)
        assert torch.equal(rotary.sliding_attention_original_inv_freq, sliding)
        assert torch.equal(rotary.full_attention_original_inv_freq, full)
    assert torch.equal(rotary.full_attention_inv_freq, full)
    assert torch.equal(rotary.sliding_attention_inv_freq, sliding)


def test_gemma_sdpa_is_the_bidirectional_sliding_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the ragidx paths are compared with: SDPA = dense softmax with |i − j| < 5 on sliding
    layers, everything on the full layer, padded keys dropped (real rows)."""
    model = tiny_gemma()
    ids = token_ids(40, batch=2)
    mask = torch.ones_like(ids)
    mask[1, 25:] = 0
    with as_reference(model, dense_reference(padding=mask), monkeypatch) as ref:
        expected = plain(ref, ids, mask)
    got = plain(model, ids, mask)
    close(got[0], expected[0], atol=1e-5)
    close(got[1, :25], expected[1, :25], atol=1e-5)
    # a wider window (a causal-only or a ≤ instead of < rule) is visibly different
    wide = copy.deepcopy(model)
    for layer in wide.layers[:3]:
        layer.self_attn.sliding_window = 6
    with as_reference(wide, dense_reference(padding=mask), monkeypatch) as ref:
        differ(plain(ref, ids, mask)[0], got[0], at_least=1e-3)


def test_gemma_ragidx_without_a_plan_reproduces_sdpa() -> None:
    model = tiny_gemma()
    ids = token_ids(40, batch=2)
    mask = torch.ones_like(ids)
    mask[1, 25:] = 0
    long_ids = token_ids(150, seed=3)
    expected = plain(model, ids, mask), plain(model, long_ids)
    ragidx = copy.deepcopy(model)
    ragidx.set_attn_implementation(ATTN_IMPLEMENTATION)
    assert ragidx.config._attn_implementation == ATTN_IMPLEMENTATION
    got = plain(ragidx, ids, mask), plain(ragidx, long_ids)
    close(got[0][0], expected[0][0], atol=1e-6)
    close(got[0][1, :25], expected[0][1, :25], atol=1e-6)
    close(got[1], expected[1], atol=1e-6)
    # and through an Extension (attention scaling switches the model to ragidx) on short inputs
    ext = Extension(copy.deepcopy(model), ExtensionConfig(method="ntk", target_length=192), native_window=L_O)
    assert ext.model.config._attn_implementation == ATTN_IMPLEMENTATION
    short = extended(ext, ids, mask)
    close(short[0], expected[0][0], atol=1e-6)
    close(short[1, :25], expected[0][1, :25], atol=1e-6)


@pytest.mark.parametrize(
    ("bidirectional", "window"), [(True, 5), (False, 8)], ids=["bidirectional", "causal"]
)
@pytest.mark.parametrize("block", [None, 16])
def test_gemma_planned_path_with_unchanged_positions_equals_sdpa(
    block: int | None, bidirectional: bool, window: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NTK with λ = 1 and no scaling changes no position: blockwise sliding windows + compact masks
    must give the plain model's output (bidirectional |i − j| < 5; causal 0 <= i − j < 8)."""
    model = tiny_gemma(bidirectional=bidirectional)
    ids = token_ids(150)
    expected = plain(model, ids)
    ext = Extension(
        model,
        ExtensionConfig(method="ntk", target_length=192, ntk_lambda=1.0, attention_scaling=False),
        native_window=L_O,
    )
    model.set_attn_implementation(ATTN_IMPLEMENTATION)  # nothing in this config asks for it
    with spy(monkeypatch, "windowed_attention", block=block) as calls:
        got = extended(ext, ids)
    windows = [call["args"][4] for call in calls]
    # the three sliding layers ran blockwise; a causal full layer runs as a window wider than the input
    assert windows == [window] * 3 + ([] if bidirectional else [151])
    close(got, expected, atol=1e-5)


def test_gemma_pi_with_attention_scaling_equals_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """PI acts on the full layer's frequencies only; attention scaling on the full layer only
    (a sliding window never grows)."""
    model = tiny_gemma()
    ids = token_ids(150)
    got = extended(Extension(model, ExtensionConfig(method="pi", target_length=192), native_window=L_O), ids)
    reference = copy.deepcopy(model)
    reference.set_attn_implementation("sdpa")
    reference.rotary_emb.full_attention_inv_freq.copy_(frequencies(GEMMA_FULL_THETA, 8) / 3)
    reference.layers[3].self_attn.scaling *= attention_factor(150)
    close(got, plain(reference, ids), atol=1e-5)
    differ(got, plain(model, ids))


@pytest.mark.parametrize("block", [None, 32])
def test_gemma_selfextend_equals_dense_reference(block: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bidirectional SelfExtend on the full layer (θ = 1e6, mirrored upper triangle), windows on the
    sliding layers; L = 150, target 192 → s = 3, w = 21, g = 4."""
    model = tiny_gemma()
    length = 150
    ids = token_ids(length)
    config = ExtensionConfig(method="selfextend", target_length=192)
    window, group = config.selfextend_params(L_O)
    assert (window, group) == (21, 4)
    with spy(monkeypatch, "self_extend_attention", block=block) as calls:
        got = extended(Extension(model, config, native_window=L_O), ids)
    assert len(calls) == 1
    reference = dense_reference(selfextend=(window, group), factor=attention_factor(length))
    with as_reference(model, reference, monkeypatch) as ref:
        expected = plain(ref, ids)
    close(got, expected, atol=1e-4)
    differ(got, plain(model, ids), at_least=1e-3)


def test_selfextend_rule_with_no_window_is_grouped_positions() -> None:
    """With w = 0 the §1.2 rule gives every pair GP's relative position ``j//g − i//g``."""
    rel = selfextend_relative(20, window=0, group=3)
    i, j = torch.arange(20)[:, None], torch.arange(20)[None, :]
    assert torch.equal(rel, j // 3 - i // 3)


def test_gemma_gp_groups_the_full_layer_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """GP on a model with layer types groups positions in the extended (full-attention) layer only:
    sliding layers keep exact positions. Reference: dense attention with the pairwise rule at w = 0
    (= ``j//s − i//s``) on the full layer, plain positions on the sliding ones."""
    model = tiny_gemma()
    length = 150
    ids = token_ids(length)
    ext = Extension(model, ExtensionConfig(method="gp", target_length=192), native_window=L_O)
    assert ext.scale == 3
    got = extended(ext, ids)
    reference = dense_reference(selfextend=(0, 3), factor=attention_factor(length))
    with as_reference(model, reference, monkeypatch) as ref:
        expected = plain(ref, ids)
    close(got, expected, atol=1e-4)
    # grouping every layer's positions (one position_ids tensor for all layers) is visibly different
    everywhere = plain(ref, ids, position_ids=(torch.arange(length) // 3)[None])
    differ(got, everywhere, at_least=1e-2)
    # the hook is gone after the pass: the plain model again
    close(plain(model, ids), plain(copy.deepcopy(model), ids), atol=0)
    assert not model.rotary_emb._forward_pre_hooks


@pytest.mark.parametrize("method", ["pi", "ntk", "gp", "selfextend"])
def test_gemma_extended_in_bfloat16_follows_float32(method: str, tmp_path: Path) -> None:
    """bfloat16 as ragidx loads it for a GPU (``from_pretrained(dtype=bfloat16)``: bf16 weights, RoPE
    frequencies kept in float32), run on the CPU: every extended path, with TempScale and attention
    scaling, follows its float32 output (the plain bf16 model is 0.9998 from float32 here too),
    and stays far from the unextended pass, so the check can tell them apart."""
    model = tiny_gemma()
    model.save_pretrained(tmp_path)
    half = AutoModel.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    assert half.rotary_emb.full_attention_inv_freq.dtype == torch.float32
    ids = token_ids(150)
    config = ExtensionConfig(method=method, target_length=192, tau=0.8)
    expected = extended(Extension(model, config, native_window=L_O), ids)
    got = extended(Extension(half, config, native_window=L_O), ids)
    assert got.dtype == torch.bfloat16

    def cosine(a: torch.Tensor) -> float:
        return torch.nn.functional.cosine_similarity(a.float(), expected, dim=-1).min().item()

    assert cosine(got) > 0.999
    assert cosine(plain(half, ids)) < 0.99


# ================================================================================= 4. real EmbeddingGemma
GEMMA_FOLDER = Path(os.environ.get("RAGIDX_MODELS", "/nonexistent")) / "gemma"
PRESETS = Path(__file__).resolve().parents[3] / "configs" / "extension"


@pytest.mark.slow
@pytest.mark.skipif(not GEMMA_FOLDER.is_dir(), reason="EmbeddingGemma not fetched ($RAGIDX_MODELS/gemma)")
@pytest.mark.skipif(
    os.environ.get("RAGIDX_BIG_TESTS") != "1", reason="25-45 s per preset on 2 CPU cores; RAGIDX_BIG_TESTS=1"
)
@pytest.mark.parametrize("preset", ["gemma-ntk-4k", "gemma-selfextend-4k"])
def test_embeddinggemma_extended_stays_finite_and_unit_norm(preset: str) -> None:
    from ragidx.config import RagidxConfig
    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import Encoder
    from tests.conftest import long_text

    path = PRESETS / f"{preset}.toml"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    extension = RagidxConfig.load(path).long_doc.extension
    encoder = Encoder(EncoderConfig(model=str(GEMMA_FOLDER), device="cpu"), extension=extension)
    assert encoder.window_size == 2048
    assert encoder.extension is not None and encoder.extension.scale == 2
    tokens = encoder.tokenize(long_text(3000))
    overhead = len(encoder.window(tokens, 0, 0).input_ids)  # specials + prompt
    long_window = encoder.window(tokens, 0, 2600 - overhead)
    assert len(long_window.input_ids) == 2600
    short_window = encoder.window(tokens, 0, 200)
    vectors = encoder.embed_windows([long_window, short_window])
    assert vectors.shape == (2, encoder.dim)
    assert np.isfinite(vectors).all()
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
