"""APE context extension (GP, RP, PI) against slow references, on tiny BERT and XLM-R models."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import BertModel

from ragidx.embed.config import ExtensionConfig
from ragidx.embed.extension import Extension
from ragidx.embed.extension.ape import interpolated_table, position_ids
from ragidx.errors import ModelError
from tests.tiny_models import tiny_bert, tiny_xlmr

L_O = 64


def _bert(positions: int = L_O) -> BertModel:
    return tiny_bert(positions, attn_implementation="sdpa")


def _ids(length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(5, 100, (1, length), generator=torch.Generator().manual_seed(seed))


def _run(model: torch.nn.Module, ext: Extension | None, ids: torch.Tensor) -> torch.Tensor:
    mask = torch.ones_like(ids)
    with torch.no_grad():
        if ext is None:
            return model(input_ids=ids, attention_mask=mask).last_hidden_state
        with ext.forward_kwargs(ids, mask.sum(dim=1), "document") as extra:
            return model(input_ids=ids, attention_mask=mask, **extra).last_hidden_state


def _reference(model: BertModel, ids: torch.Tensor, table: torch.Tensor, pids: torch.Tensor) -> torch.Tensor:
    """The plain model with an explicit position table and ids (and all-zero token types)."""
    original = model.embeddings.position_embeddings
    model.embeddings.position_embeddings = torch.nn.Embedding.from_pretrained(table)
    try:
        with torch.no_grad():
            return model(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                position_ids=pids.unsqueeze(0),
                token_type_ids=torch.zeros_like(ids),
            ).last_hidden_state
    finally:
        model.embeddings.position_embeddings = original


def _slow_pi_table(table: torch.Tensor, s: int) -> torch.Tensor:
    """Spec §1.1, row by row: E_t[i·s] = E_o[i]; linear in between; the last s−1 rows repeat E_o[-1]."""
    rows = []
    for j in range(table.shape[0] * s):
        i, frac = divmod(j, s)
        if i + 1 >= table.shape[0]:
            rows.append(table[-1])
        else:
            rows.append((1 - frac / s) * table[i] + (frac / s) * table[i + 1])
    return torch.stack(rows)


def test_pi_table_follows_the_formula() -> None:
    table = torch.randn(10, 4, dtype=torch.float64)
    for s in (1, 2, 3, 8):
        built = interpolated_table(table, s)
        assert built.shape == (10 * s, 4)
        torch.testing.assert_close(built, _slow_pi_table(table, s))
        torch.testing.assert_close(built[::s], table)  # originals kept at every s-th row
    torch.testing.assert_close(interpolated_table(table, 1), table)  # PI at scale 1 is the identity


def test_gp_and_rp_ids_follow_their_definitions() -> None:
    assert position_ids("gp", 9, 4, 2).tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4]
    assert position_ids("rp", 9, 4, 2).tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0]
    assert position_ids("pi", 5, 4, 2).tolist() == [0, 1, 2, 3, 4]
    assert max(position_ids("gp", 4096, 512, 8).tolist()) == 511  # GP stays inside the table


@pytest.mark.parametrize("method", ["pi", "gp", "rp"])
def test_inputs_within_the_window_are_unchanged(method: str) -> None:
    model = _bert()
    ids = _ids(L_O)
    plain = _run(model, None, ids)
    ext = Extension(model, ExtensionConfig(method=method, target_length=256), native_window=L_O)
    torch.testing.assert_close(_run(model, ext, ids), plain, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    ("method", "pids"),
    [
        ("gp", lambda n: torch.arange(n) // 3),
        ("rp", lambda n: torch.arange(n) % L_O),
    ],
)
def test_gp_and_rp_equal_the_model_run_with_remapped_ids(method: str, pids) -> None:
    model = _bert()
    ids = _ids(150)
    config = ExtensionConfig(method=method, target_length=192, attention_scaling=False)
    ext = Extension(model, config, native_window=L_O)
    expected = _reference(model, ids, model.embeddings.position_embeddings.weight.detach(), pids(150))
    torch.testing.assert_close(_run(model, ext, ids), expected, atol=1e-5, rtol=1e-5)


def test_pi_equals_the_model_with_an_interpolated_table() -> None:
    model = _bert()
    ids = _ids(150)
    weight = model.embeddings.position_embeddings.weight.detach().clone()
    ext = Extension(model, ExtensionConfig(method="pi", target_length=192, attention_scaling=False), L_O)
    expected = _reference(model, ids, _slow_pi_table(weight, 3), torch.arange(150))
    torch.testing.assert_close(_run(model, ext, ids), expected, atol=1e-5, rtol=1e-5)
    # the model's own table is back, untouched
    assert model.embeddings.position_embeddings.weight.shape == (L_O, 32)
    torch.testing.assert_close(model.embeddings.position_embeddings.weight, weight)


def test_attention_scaling_multiplies_logits_by_log_ratio() -> None:
    model = _bert()
    ids = _ids(150)
    ext = Extension(model, ExtensionConfig(method="gp", target_length=192), native_window=L_O)
    factor = math.log(150) / math.log(L_O)
    layers = [layer.attention.self for layer in model.encoder.layer]
    for layer in layers:
        layer.scaling *= factor
    try:
        expected = _reference(
            model, ids, model.embeddings.position_embeddings.weight.detach(), torch.arange(150) // 3
        )
    finally:
        for layer in layers:
            layer.scaling /= factor
    torch.testing.assert_close(_run(model, ext, ids), expected, atol=1e-5, rtol=1e-5)


def test_xlmr_offset_rows_are_kept() -> None:
    """RoBERTa-style ids start at padding_idx + 1 = 2: PI interpolates rows 2… and keeps rows 0–1."""
    model = tiny_xlmr(L_O, attn_implementation="sdpa")
    weight = model.embeddings.position_embeddings.weight.detach().clone()
    ext = Extension(
        model, ExtensionConfig(method="pi", target_length=128, attention_scaling=False), L_O, offset=2
    )
    ids = _ids(100)
    table = torch.cat([weight[:2], _slow_pi_table(weight[2:], 2)])
    expected = _reference(model, ids, table, torch.arange(100) + 2)
    torch.testing.assert_close(_run(model, ext, ids), expected, atol=1e-5, rtol=1e-5)
    short = _ids(L_O)
    torch.testing.assert_close(_run(model, ext, short), _run(model, None, short), atol=1e-6, rtol=0)


def test_rope_methods_are_refused_for_a_position_table() -> None:
    with pytest.raises(ValueError, match="not an extension for absolute position tables"):
        Extension(_bert(), ExtensionConfig(method="ntk", target_length=256), native_window=L_O)


def test_interpolated_table_stays_on_the_tables_device() -> None:
    """PI builds its table where the model is (a CUDA model's table on the GPU, not the CPU)."""
    table = torch.randn(8, 4, device="meta")
    assert interpolated_table(table, 4).device.type == "meta"


@pytest.mark.parametrize("method", ["pi", "gp"])
def test_a_scale_short_of_the_target_length_is_refused_in_one_line(method: str) -> None:
    """PI's table has L_o · s rows and GP reads row floor(n / s): an explicit scale below
    ceil(L_t / L_o) would index past the table (an IndexError in the embedding lookup)."""
    expected = (
        rf"^extension.scale = 2 is too small for {method} on .*: 64 positions × 2 reach 128 tokens, "
        r"short of extension.target_length = 256; leave scale unset \(ceil\(target_length / 64\) = 4\), "
        r"set it to at least 4, or lower target_length to 128$"
    )
    with pytest.raises(ModelError, match=expected):
        Extension(_bert(), ExtensionConfig(method=method, target_length=256, scale=2), native_window=L_O)
    model = _bert()
    ext = Extension(model, ExtensionConfig(method=method, target_length=256, scale=4), native_window=L_O)
    assert torch.isfinite(_run(model, ext, _ids(256))).all()  # the least scale that reaches L_t runs
    Extension(
        _bert(), ExtensionConfig(method="rp", target_length=256, scale=2), native_window=L_O
    )  # RP wraps


def test_an_original_length_past_the_table_is_refused() -> None:
    config = ExtensionConfig(method="rp", target_length=256, original_length=128)
    with pytest.raises(ModelError, match="original_length = 128 exceeds the 64 learned positions"):
        Extension(_bert(), config, native_window=L_O)
    xlmr = ExtensionConfig(method="pi", target_length=256, original_length=66)  # 66 rows, 2 of them offset
    with pytest.raises(ModelError, match="original_length = 66 exceeds the 64 learned positions"):
        Extension(tiny_xlmr(L_O, attn_implementation="sdpa"), xlmr, native_window=L_O, offset=2)
