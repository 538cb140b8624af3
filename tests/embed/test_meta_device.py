"""No GPU-only bugs: every module and attention path ragidx builds keeps its tensors on the device of
the model it is given.

A tensor made on the default device (the CPU) and then mixed with the model's crashes only on a GPU
("Expected all tensors to be on the same device"), so a CPU-only CI never sees it. Here every model
and input lives on the ``meta`` device instead, a device that is not the CPU but needs no hardware:
construction and a forward pass run under :class:`DeviceAudit`, which fails on any operation whose
tensors sit on more than one device (a 0-dim CPU scalar aside, as CUDA allows; explicit moves aside),
naming the line of ragidx that ran it, and each test then checks that every parameter and buffer
built (PI tables and saved frequencies included) is on ``meta``. Tensors made on the CPU on purpose
(token ids, PoSE starts drawn from a CPU generator) pass as long as they are moved before use.

Meta tensors have no values: a scalar read (``bool(mask.all())``, ``int(lengths[0])``) is answered
by the audit with a stand-in (False for booleans, :attr:`DeviceAudit.length` for integers, 1.0 for
floats), which only steers which branch runs.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ragidx.embed.config import ExtensionConfig, PoolingConfig
from ragidx.embed.extension import Extension
from ragidx.embed.extension.ape import ApePositions
from ragidx.embed.extension.attention import self_extend_attention, windowed_attention
from ragidx.embed.extension.rope import RopePositions, rotation
from ragidx.embed.pooling import pool
from ragidx.train.positions import InterleavedTable, attach, export_table, pose_starts, shifted_ids
from tests import tiny_models

META = torch.device("meta")
L_O = 64  # the tiny models' window
LONG = 200  # an input past it (extended passes)
RAGIDX = str(Path(__file__).resolve().parents[2] / "ragidx")
# explicit moves between devices are what code should do with a tensor made elsewhere
TRANSFERS = {"aten._to_copy.default", "aten.copy_.default", "aten.lift_fresh.default"}
# reading a value (``item``, ``bool``); inference mode dispatches is_nonzero / item undecomposed
SCALAR_READS = {"aten._local_scalar_dense.default", "aten.is_nonzero.default", "aten.item.default"}


class DeviceAudit(TorchDispatchMode):
    """Records every operation that mixes devices (see the module docstring)."""

    def __init__(self, length: int = LONG) -> None:
        super().__init__()
        self.length = length
        self.mixed: list[str] = []
        self.scalar_reads = 0

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        name = str(func)
        if name in SCALAR_READS and inputs[0].device == META:
            self.scalar_reads += 1
            dtype = inputs[0].dtype
            if dtype == torch.bool or name == "aten.is_nonzero.default":
                return False
            return self.length if not dtype.is_floating_point else 1.0
        devices = {t.device for t in inputs if not (t.dim() == 0 and t.device.type == "cpu")}
        if len(devices) > 1 and name not in TRANSFERS:
            self.mixed.append(f"{name} on {sorted(map(str, devices))} at {_ragidx_frame()}")
        return func(*args, **kwargs)

    def check(self) -> None:
        assert not self.mixed, "operations mixing devices:\n" + "\n".join(self.mixed)


def _ragidx_frame() -> str | None:
    """The innermost frame of ragidx's own code on the stack (None: none, the caller is a test)."""
    for frame in reversed(traceback.extract_stack()):
        if frame.filename.startswith(RAGIDX):
            return f"{Path(frame.filename).relative_to(Path(RAGIDX).parent)}:{frame.lineno}"
    return None


@pytest.fixture
def audit() -> Iterator[DeviceAudit]:
    mode = DeviceAudit()
    yield mode
    mode.check()


def all_on_meta(*modules: torch.nn.Module, tensors: dict[str, torch.Tensor] | None = None) -> None:
    """Every parameter and buffer of ``modules`` (and every one of ``tensors``) is on ``meta``."""
    named = dict(tensors or {})
    for i, module in enumerate(modules):
        named.update({f"{i}.{n}": t for n, t in module.named_parameters()})
        named.update({f"{i}.{n}": t for n, t in module.named_buffers()})
    elsewhere = {n: str(t.device) for n, t in named.items() if t.device != META}
    assert not elsewhere, f"not on meta: {elsewhere}"


# ------------------------------------------------------------------------------ the audit itself
def test_the_audit_catches_a_cpu_index_on_a_meta_table() -> None:
    """The check can fail: an index made on the default device is reported, where on CUDA it crashes."""
    audit = DeviceAudit()
    with audit, pytest.raises(RuntimeError, match="same device"):
        table = torch.zeros(8, 4, device=META)
        table.index_copy(0, torch.arange(2), torch.zeros(2, 4, device=META))
    assert audit.mixed == ["aten.index_copy.default on ['cpu', 'meta'] at None"]


# ------------------------------------------------------------------------------ ragidx train
@pytest.mark.parametrize("offset", [0, 2])
def test_interleaved_table_built_from_a_meta_table_stays_on_it(audit: DeviceAudit, offset: int) -> None:
    with audit:
        table = InterleavedTable(torch.zeros(512 + offset, 8, device=META), 4, offset)
        rows = table(torch.arange(10, device=META).unsqueeze(0))
    all_on_meta(table)
    assert rows.device == META and table.table().shape == (offset + 2048, 8)


def test_position_tuning_attach_forward_and_export_on_meta(audit: DeviceAudit) -> None:
    model = tiny_models.tiny_bert(positions=L_O).to(META)
    with audit:
        table = attach(model, target_length=4 * L_O)
        starts = pose_starts(torch.tensor([10, 30]), table, torch.Generator().manual_seed(0)).to(META)
        ids = torch.zeros(2, 30, dtype=torch.long, device=META)
        positions = shifted_ids(starts, 30, table)
        out = model(input_ids=ids, position_ids=positions, token_type_ids=torch.zeros_like(ids))
        out.last_hidden_state.float().pow(2).mean().backward()
        export_table(model, table)
    assert table.learned.grad is not None and table.learned.grad.device == META
    all_on_meta(model)


def test_trainable_encoder_with_pi_positions_on_meta(audit: DeviceAudit, tiny_model: Path) -> None:
    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import Encoder
    from ragidx.train.config import TrainConfig
    from ragidx.train.model import TrainableEncoder

    encoder = Encoder(EncoderConfig(model=str(tiny_model), device="meta"))
    config = TrainConfig(model=str(tiny_model), device="cpu", positions="pi", target_length=4 * L_O)
    with audit:
        trainable = TrainableEncoder(encoder, config)
        features = trainable.tokenize(["river stone light", "garden paper music winter"])
        vectors = trainable(features)["sentence_embedding"]
    assert vectors.device == META and vectors.shape == (2, 32)
    all_on_meta(trainable)


# ------------------------------------------------------------------------------ context extension
def _rope_llama() -> torch.nn.Module:
    rope = {"rope_type": "default", "rope_theta": 10_000.0}
    return tiny_models.tiny_llama(vocab_size=200, max_position_embeddings=L_O, rope_parameters=rope)


def _rope_gemma() -> torch.nn.Module:
    return tiny_models.tiny_gemma(
        vocab_size=200,
        max_position_embeddings=L_O,
        sliding_window=8,
        layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
        },
        use_bidirectional_attention=True,
        attn_implementation="sdpa",
    )


MODELS: dict[str, tuple[Callable[[], torch.nn.Module], int, tuple[str, ...]]] = {
    # name: (builder, position offset, methods)
    "bert": (lambda: tiny_models.tiny_bert(positions=L_O), 0, ("pi", "gp", "rp")),
    "xlmr": (lambda: tiny_models.tiny_xlmr(positions=L_O), 2, ("pi", "gp", "rp")),
    "llama": (_rope_llama, 0, ("pi", "gp", "ntk", "selfextend")),
    "gemma": (_rope_gemma, 0, ("pi", "gp", "ntk", "selfextend")),
}
CASES = [
    (name, method, scale_from)
    for name, (_, _, methods) in MODELS.items()
    for method in methods
    for scale_from in ("target", "document")
]


def _extended_pass(
    model: torch.nn.Module, extension: Extension, length: int, role: str = "document"
) -> torch.Tensor:
    ids = torch.zeros(1, length, dtype=torch.long, device=META)
    mask = torch.ones(1, length, dtype=torch.long, device=META)
    with torch.no_grad(), extension.forward_kwargs(ids, mask.sum(dim=1), role) as kwargs:
        hidden: torch.Tensor = model(input_ids=ids, attention_mask=mask, **kwargs).last_hidden_state
    return hidden


def _positions_tensors(extension: Extension) -> dict[str, torch.Tensor]:
    """Every tensor an extension's positions hold (PI tables, saved and extended frequencies)."""
    tensors: dict[str, torch.Tensor] = {}
    for scale, positions in extension._positions.items():
        if isinstance(positions, ApePositions) and positions.extended is not None:
            tensors[f"s{scale}.extended"] = positions.extended.weight
        if isinstance(positions, RopePositions):
            for (_, name), tensor in positions.original.items():
                tensors[f"s{scale}.original.{name}"] = tensor
            for (_, name), tensor in positions.extended.items():
                tensors[f"s{scale}.extended.{name}"] = tensor
    return tensors


@pytest.mark.parametrize(("name", "method", "scale_from"), CASES)
def test_extension_on_a_meta_model_keeps_every_tensor_on_meta(
    audit: DeviceAudit, name: str, method: str, scale_from: str
) -> None:
    build, offset, _ = MODELS[name]
    model = build().to(META)
    config = ExtensionConfig.model_validate(
        {"method": method, "target_length": 4 * L_O, "scale_from": scale_from, "tau": 0.9}
    )
    with audit:
        extension = Extension(model, config, L_O, offset)
        hidden = _extended_pass(model, extension, LONG)
        short = _extended_pass(model, extension, L_O // 2, role="query")  # TempScale only
    assert hidden.shape == (1, LONG, 32) and hidden.device == META and short.device == META
    assert audit.scalar_reads > 0  # the forward really ran its data-dependent branches
    all_on_meta(model, tensors=_positions_tensors(extension))


@pytest.mark.parametrize("causal", [False, True])
def test_blocked_attention_paths_on_meta(audit: DeviceAudit, causal: bool) -> None:
    q, k, v = (torch.zeros(1, 2, 300, 8, device=META) for _ in range(3))
    padding = torch.ones(1, 300, dtype=torch.bool, device=META)
    rotate = rotation(torch.ones(4, device=META))
    with audit:
        windowed = windowed_attention(q, k, v, 0.35, 40, causal, padding, block=64)
        extended = self_extend_attention(q, k, v, 0.35, 32, 4, rotate, causal, padding, block=64)
    assert windowed.device == META and extended.device == META


# ------------------------------------------------------------------------------ pooling and encoder
MODES = ["cls", "mean", "max", "mean_sqrt_len_tokens", "lasttoken", "lmk", "multicls", "mean_every"]


@pytest.mark.parametrize("mode", MODES)
def test_pooling_on_meta(audit: DeviceAudit, mode: str) -> None:
    hidden = torch.zeros(2, 20, 32, device=META)
    mask = torch.ones(2, 20, dtype=torch.long, device=META)
    starts = torch.ones(2, dtype=torch.long, device=META)
    selected = torch.zeros(2, 20, dtype=torch.bool, device=META)
    config = PoolingConfig(modes=(mode,), include_prompt=False)  # type: ignore[arg-type]
    with audit:
        pooled = pool(hidden, mask, config, content_starts=starts, selected=selected)
    assert pooled.device == META and pooled.shape == (2, 32)


ENCODERS: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = [
    ("mean", {}, None),
    ("lmk", {"pooling": ("lmk",), "landmark_every": 8}, None),
    ("multicls", {"pooling": ("multicls",), "multicls_every": 8}, None),
    ("mean_every_content", {"pooling": ("mean_every_content",), "mean_every": 4}, None),
    *[(f"extend:{m}", {}, {"method": m, "target_length": 4 * L_O}) for m in ("pi", "gp", "rp")],
]


@pytest.mark.parametrize(("label", "settings", "extension"), ENCODERS, ids=[e[0] for e in ENCODERS])
def test_encoder_on_meta(
    audit: DeviceAudit,
    tiny_model: Path,
    label: str,
    settings: dict[str, Any],
    extension: dict[str, Any] | None,
) -> None:
    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import Encoder

    config = EncoderConfig.model_validate({"model": str(tiny_model), "device": "meta", **settings})
    text = " ".join(["river stone light window garden"] * 30)  # about 150 tokens
    with audit:
        encoder = Encoder(config, extension=None if extension is None else ExtensionConfig(**extension))
        tokens = encoder.tokenize(text)
        end = encoder.content_budget(tokens, extended=extension is not None)
        windows = [encoder.window(tokens, 0, min(end, len(tokens))), encoder.window(tokens, 0, 5)]
        for batch in (windows[:1], windows[1:]):  # extended inputs run one at a time
            with torch.inference_mode():
                hidden, ids, mask, starts = encoder._hidden(batch)
                vectors = encoder.pool_states(hidden, ids, mask, starts, normalize=True)
            assert vectors.device == META
    all_on_meta(encoder.model, encoder.dense)


def test_decoder_encoder_with_rope_extension_on_meta(audit: DeviceAudit, tiny_decoder: Path) -> None:
    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import Encoder

    config = EncoderConfig(model=str(tiny_decoder), device="meta")
    text = " ".join(["river stone light window garden"] * 60)
    for method in ("ntk", "selfextend"):
        with audit:
            encoder = Encoder(config, extension=ExtensionConfig(method=method, target_length=512))  # type: ignore[arg-type]
            tokens = encoder.tokenize(text)
            window = encoder.window(
                tokens, 0, min(encoder.content_budget(tokens, extended=True), len(tokens))
            )
            with torch.inference_mode():
                hidden, ids, mask, starts = encoder._hidden([window])
                vectors = encoder.pool_states(hidden, ids, mask, starts, normalize=True)
        assert vectors.device == META and len(window.input_ids) > 128
        all_on_meta(encoder.model)
