"""The fused CPU forward of BERT-family encoders against the model's own forward (the reference)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from ragidx.embed import fused_bert
from ragidx.embed.fused_bert import FusedBert
from tests.tiny_models import tiny_bert, tiny_llama, tiny_xlmr

BUILDERS: dict[str, Callable[[], torch.nn.Module]] = {
    "bert": lambda: tiny_bert(),
    "xlm-roberta": lambda: tiny_xlmr(),
    "bert-gelu-tanh": lambda: tiny_bert(hidden_act="gelu_new"),
    "bert-relu": lambda: tiny_bert(hidden_act="relu"),  # not fused into the product: run after it
}


def batch(vocab: int = 100, rows: int = 3, length: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded random ids (ids >= 5: no special or padding ids) and their mask."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (rows, length), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 13:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 1  # the padding id of XLM-R (any id will do for BERT: masked)
    return ids, mask


def reference(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, **extra: torch.Tensor
) -> torch.Tensor:
    with torch.inference_mode():
        hidden: torch.Tensor = model(input_ids=ids, attention_mask=mask, **extra).last_hidden_state
    return hidden


def fused_states(
    fused: FusedBert, ids: torch.Tensor, mask: torch.Tensor, **extra: torch.Tensor
) -> torch.Tensor:
    with torch.inference_mode():
        return fused(ids, mask, **extra)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_the_fused_forward_gives_the_models_hidden_states(name: str) -> None:
    model = BUILDERS[name]()
    fused = FusedBert.build(model)
    assert fused is not None
    ids, mask = batch()
    keep = mask.bool()
    mine, theirs = fused_states(fused, ids, mask), reference(model, ids, mask)
    assert mine.shape == theirs.shape
    torch.testing.assert_close(mine[keep], theirs[keep], atol=2e-5, rtol=1e-4)


def test_the_gelu_is_fused_only_where_the_model_uses_one() -> None:
    algorithms = {name: FusedBert.build(BUILDERS[name]()) for name in ("bert", "bert-gelu-tanh", "bert-relu")}
    assert {name: f.layers[0].gelu for name, f in algorithms.items() if f is not None} == {
        "bert": "none",
        "bert-gelu-tanh": "tanh",
        "bert-relu": None,
    }


def test_bfloat16_follows_the_models_bfloat16_forward() -> None:
    model = tiny_bert().to(torch.bfloat16)
    fused = FusedBert.build(model)
    assert fused is not None
    ids, mask = batch()
    keep = mask.bool()
    mine, theirs = fused_states(fused, ids, mask)[keep].float(), reference(model, ids, mask)[keep].float()
    assert torch.nn.functional.cosine_similarity(mine, theirs, dim=-1).min() > 0.999


def test_position_ids_reach_the_embeddings() -> None:
    """Extensions and tuned positions pass position ids (here GP's ``pid // 2``)."""
    model = tiny_bert()
    fused = FusedBert.build(model)
    assert fused is not None
    ids, mask = batch()
    positions = (torch.arange(ids.shape[1]) // 2).unsqueeze(0).expand_as(ids)
    keep = mask.bool()
    mine = fused_states(fused, ids, mask, position_ids=positions)
    theirs = reference(model, ids, mask, position_ids=positions)
    torch.testing.assert_close(mine[keep], theirs[keep], atol=2e-5, rtol=1e-4)
    assert not torch.allclose(mine[keep], fused_states(fused, ids, mask)[keep])


def test_no_padding_needs_no_mask() -> None:
    model = tiny_bert()
    fused = FusedBert.build(model)
    assert fused is not None
    ids, _ = batch()
    mask = torch.ones_like(ids)
    torch.testing.assert_close(
        fused_states(fused, ids, mask), reference(model, ids, mask), atol=2e-5, rtol=1e-4
    )


def test_weights_changed_in_place_are_packed_again() -> None:
    """``ragidx train`` updates the weights in place; the next embedding must use the new ones."""
    model = tiny_bert()
    fused = FusedBert.build(model)
    assert fused is not None
    ids, mask = batch()
    before = fused_states(fused, ids, mask)
    with torch.no_grad():
        model.encoder.layer[0].intermediate.dense.weight.mul_(1.5)
        model.encoder.layer[1].attention.self.value.bias.add_(0.3)
    keep = mask.bool()
    after = fused_states(fused, ids, mask)
    torch.testing.assert_close(after[keep], reference(model, ids, mask)[keep], atol=2e-5, rtol=1e-4)
    assert not torch.allclose(before[keep], after[keep])


def test_it_applies_only_to_inference() -> None:
    model = tiny_bert()
    fused = FusedBert.build(model)
    assert fused is not None
    with torch.inference_mode():
        assert fused.applies()
    with torch.no_grad():
        assert fused.applies()
    assert not fused.applies()  # gradients on: training goes through the model
    model.train()
    with torch.no_grad():
        assert not fused.applies()  # dropout on


class _LoraLike(torch.nn.Linear):
    """A subclass of Linear with its own forward, as adapters and quantised layers are."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 2


def _with_lora_query() -> torch.nn.Module:
    model = tiny_bert()
    own = model.encoder.layer[0].attention.self
    lora = _LoraLike(own.query.in_features, own.query.out_features)
    lora.load_state_dict(own.query.state_dict())
    own.query = lora
    return model


REFUSED: dict[str, Callable[[], torch.nn.Module]] = {
    "a decoder model": lambda: tiny_llama(),
    "relative position embeddings": lambda: tiny_bert(position_embedding_type="relative_key"),
    "an adapter layer": _with_lora_query,
    "float16": lambda: tiny_bert().to(torch.float16),
    "the meta device": lambda: tiny_bert().to("meta"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_it_refuses_what_it_does_not_reproduce(name: str) -> None:
    assert FusedBert.build(REFUSED[name]()) is None


def test_a_fused_forward_that_disagrees_with_the_model_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first check at build time: a kernel that computes something else is caught there."""
    linear = fused_bert._linear

    def off(
        x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, gelu: str | None = None
    ) -> torch.Tensor:
        return linear(x, weight, bias, gelu) * 1.01

    monkeypatch.setattr(fused_bert, "_linear", off)
    assert FusedBert.build(tiny_bert()) is None


def test_a_missing_onednn_op_leaves_the_model_in_charge(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(weight: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("no mkldnn here")

    monkeypatch.setattr(fused_bert, "_pack", missing)
    assert FusedBert.build(tiny_bert()) is None


# --------------------------------------------------------------------------- through the Encoder
def _encoder(model: Path, **settings: object):  # type: ignore[no-untyped-def]
    from ragidx.embed.config import EncoderConfig, ExtensionConfig
    from ragidx.embed.encoder import Encoder

    extension = settings.pop("extension", None)
    config = EncoderConfig.model_validate({"model": str(model), "device": "cpu", **settings})
    return Encoder(config, extension=None if extension is None else ExtensionConfig(**extension))  # type: ignore[arg-type]


TEXTS = [
    "river stone light window garden " * 3,
    "a short one",
    "the meeting decided to move the budget review to friday " * 4,
]


def embed_documents(encoder, texts: list[str]):  # type: ignore[no-untyped-def]
    """Each text in one window, extended past the model's 64 tokens where the encoder extends."""
    extended = encoder.extension is not None
    windows = []
    for tokens in encoder.tokenize_many(texts, "document"):
        windows.append(encoder.window(tokens, 0, encoder.content_budget(tokens, extended=extended)))
    return encoder.embed_windows(windows)


EXTENSIONS: dict[str, dict[str, object] | None] = {
    "plain": None,
    "pi (attention scaling)": {"method": "pi", "target_length": 128},
    "gp, no attention scaling": {"method": "gp", "target_length": 128, "attention_scaling": False},
    "tempscale": {"method": "none", "tau": 0.5},
    "pi + tempscale": {"method": "pi", "target_length": 128, "tau": 0.7},
}


@pytest.mark.parametrize("label", sorted(EXTENSIONS))
def test_the_encoder_embeds_the_same_with_and_without_it(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch, label: str
) -> None:
    """Plain, extended (past the 64-token window) and TempScale runs: the fused forward runs every
    batch, and the vectors are those of the model's own forward (``RAGIDX_CPU_FUSED=0``)."""
    extension = EXTENSIONS[label]
    long_text = " ".join(f"word{i % 37} stone" for i in range(60))  # past the 64-token window
    texts = [*TEXTS, long_text]
    fused_encoder = _encoder(tiny_model, extension=extension)
    lengths: list[int] = []
    fused = fused_encoder._fused()
    assert fused is not None
    original = FusedBert.__call__

    def counted(self: FusedBert, ids: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        lengths.append(ids.shape[1])
        return original(self, ids, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(FusedBert, "__call__", counted)
    with_it = embed_documents(fused_encoder, texts)
    extended = extension is not None and extension["method"] != "none"
    assert lengths and (max(lengths) > 64) == extended  # extended inputs ran fused too
    monkeypatch.setenv("RAGIDX_CPU_FUSED", "0")
    plain_encoder = _encoder(tiny_model, extension=extension)
    assert plain_encoder._fused() is None
    without = embed_documents(plain_encoder, texts)
    torch.testing.assert_close(torch.from_numpy(with_it), torch.from_numpy(without), atol=1e-5, rtol=1e-4)


def test_selfextend_runs_through_the_model() -> None:
    """SelfExtend regroups positions inside attention: not something the fused forward does."""
    from ragidx.embed.extension.attention import AttentionPlan, SelfExtendSpec, attention_plan

    fused = FusedBert.build(tiny_bert())
    assert fused is not None
    spec = SelfExtendSpec(window=4, group=2, rotate={})
    with torch.inference_mode():
        assert fused.applies()
        with attention_plan(AttentionPlan(tau=0.5)):
            assert fused.applies()
        with attention_plan(AttentionPlan(self_extend=spec)):
            assert not fused.applies()


def test_the_default_model_runs_fused_with_its_own_vectors(
    default_encoder, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """all-MiniLM-L6-v2 on a CPU takes the fused forward (its first check passes on real weights)
    and gives the vectors of its own forward, in float32 and in bfloat16."""
    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import Encoder

    texts = [*TEXTS, "Crème brûlée in Zürich, naïve façade " * 30, "x"]
    assert default_encoder._fused() is not None
    fused32 = default_encoder.embed(texts, "document")[0]
    fused16 = Encoder(EncoderConfig(device="cpu", dtype="bfloat16")).embed(texts, "document")[0]
    monkeypatch.setenv("RAGIDX_CPU_FUSED", "0")
    own32 = Encoder(EncoderConfig(device="cpu")).embed(texts, "document")[0]
    own16 = Encoder(EncoderConfig(device="cpu", dtype="bfloat16")).embed(texts, "document")[0]
    assert (fused32 * own32).sum(axis=1).min() > 0.99999
    assert (fused16 * own16).sum(axis=1).min() > 0.999
    assert (fused16 * own32).sum(axis=1).min() > 0.99  # the CPU default's bar against float32


def test_the_switch_reads_like_the_other_cpu_settings(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragidx.errors import ConfigError

    monkeypatch.setenv("RAGIDX_CPU_FUSED", "off")
    assert _encoder(tiny_model)._fused() is None
    monkeypatch.setenv("RAGIDX_CPU_FUSED", "yes")
    assert _encoder(tiny_model)._fused() is not None
    monkeypatch.setenv("RAGIDX_CPU_FUSED", "maybe")
    with pytest.raises(ConfigError, match="RAGIDX_CPU_FUSED = 'maybe': use 1"):
        _encoder(tiny_model)
