"""Position tuning: frozen original rows, learnable interleaved rows, exact short-input invariance."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ragidx.embed.extension.ape import interpolated_table
from ragidx.errors import ConfigError
from ragidx.train.positions import InterleavedTable, attach, export_table, shifted_ids, write_marker
from tests.tiny_models import tiny_bert, tiny_xlmr


def test_table_starts_as_pi_with_original_rows_at_multiples_of_s() -> None:
    original = torch.randn(16, 8)
    table = InterleavedTable(original, scale=4)
    full = table.table()
    assert full.shape == (64, 8)
    assert torch.equal(full[::4], original)  # bit-identical, not just close
    assert torch.allclose(full, interpolated_table(original, 4))
    assert table.learned.shape == (48, 8)


def test_every_buffer_and_index_lives_on_the_device_of_the_given_table() -> None:
    """Issue 38: the index buffers were built on the default device (CPU), which crashed
    ``ragidx train --positions pi --device cuda``; ``meta`` stands in for the GPU here
    (tests/embed/test_meta_device.py audits every forward the same way)."""
    table = InterleavedTable(torch.zeros(512, 8, device="meta"), 4)
    assert {name: str(t.device) for name, t in table.named_buffers()} == {
        "frozen_rows": "meta",
        "frozen_index": "meta",
        "learned_index": "meta",
    }
    assert table.learned.device.type == "meta"
    assert table(torch.arange(10, device="meta").unsqueeze(0)).shape == (1, 10, 8)


def test_indices_match_the_mask_they_replace() -> None:
    for rows, scale, offset in ((16, 4, 0), (16, 2, 2), (5, 3, 1)):
        table = InterleavedTable(torch.randn(rows + offset, 4), scale, offset)
        frozen = torch.zeros(offset + rows * scale, dtype=torch.bool)
        frozen[:offset] = True
        frozen[offset::scale] = True
        assert torch.equal(table.frozen_index, frozen.nonzero().squeeze(1))
        assert torch.equal(table.learned_index, (~frozen).nonzero().squeeze(1))


def test_only_interleaved_rows_learn_and_weight_decay_cannot_move_originals() -> None:
    model = tiny_bert(positions=16)
    before = model.embeddings.position_embeddings.weight.detach().clone()
    table = attach(model, target_length=64)
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert trainable == [table.learned]
    optimizer = torch.optim.AdamW(trainable, lr=0.1, weight_decay=0.5)
    ids = torch.arange(10).unsqueeze(0)
    for start in (3, 17, 40):
        positions = shifted_ids(torch.tensor([start]), 10, table)
        out = model(input_ids=ids, position_ids=positions, token_type_ids=torch.zeros_like(ids))
        out.last_hidden_state.pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    full = table.table().detach()
    assert torch.equal(full[::4], before)  # the originals never moved
    assert not torch.allclose(full, interpolated_table(before, 4))  # the others did
    grads_ok = all(
        p.grad is None for n, p in model.named_parameters() if n != "embeddings.position_embeddings.learned"
    )
    assert grads_ok


def test_offset_models_keep_their_leading_rows_frozen() -> None:
    model = tiny_xlmr(positions=16)  # ids start at padding_idx + 1 = 2
    weight = model.embeddings.position_embeddings.weight.detach().clone()
    table = attach(model, target_length=32, offset=2)
    full = table.table()
    assert full.shape == (2 + 32, weight.shape[1])
    assert torch.equal(full[:2], weight[:2])
    assert torch.equal(full[2::2], weight[2:])


def test_target_must_be_a_multiple_beyond_the_table() -> None:
    with pytest.raises(ConfigError, match="must exceed"):
        attach(tiny_bert(positions=16), target_length=16)
    with pytest.raises(ConfigError, match="multiple"):
        attach(tiny_bert(positions=16), target_length=40)


def test_exported_model_embeds_short_inputs_exactly_as_the_untuned_one(
    tmp_path: Path, tiny_model: Path
) -> None:
    """The spec's invariant: after position tuning, an input within the original window gives the
    untuned model's embedding exactly (ragidx feeds ids 0, s, 2s, … from the marker)."""
    from transformers import AutoModel

    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import Encoder

    model = AutoModel.from_pretrained(tiny_model, add_pooling_layer=False)
    table = attach(model, target_length=4 * model.config.max_position_embeddings)
    with torch.no_grad():
        table.learned.add_(torch.randn_like(table.learned))  # as if trained: the new rows moved
    export_table(model, table)
    tuned = tmp_path / "tuned"
    model.save_pretrained(tuned)
    Encoder(EncoderConfig(model=str(tiny_model))).tokenizer.save_pretrained(tuned)
    write_marker(tuned, table)

    base = Encoder(EncoderConfig(model=str(tiny_model), device="cpu"))
    after = Encoder(EncoderConfig(model=str(tuned), device="cpu"))
    assert after.native_window == 4 * base.native_window
    texts = ["a short text", "another one, a little longer than the first text is"]
    assert torch.equal(torch.from_numpy(after.embed(texts)[0]), torch.from_numpy(base.embed(texts)[0]))
    # a long input reaches the tuned rows (it would not fit the untuned model at all)
    long_text = " ".join(["word"] * (2 * base.native_window))
    tokens = after.tokenize(long_text)
    vector = after.embed_windows([after.window(tokens, 0, after.content_budget(tokens))])
    assert vector.shape == (1, after.dim)
