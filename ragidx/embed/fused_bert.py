"""A fused inference forward for BERT-family encoders on the CPU (issue 38, item 6).

transformers' ``BertModel`` runs each layer as seven matrix products through ``aten::addmm``
(query, key, value, attention output, feed-forward up and down; the GELU a pass of its own) and
gives SDPA a full ``(batch, 1, L, L)`` boolean mask. On a CPU, :class:`FusedBert` runs the same
layers with the same weights as:

* **one query-key-value product** (the three weight matrices stacked: one wider GEMM, not three);
* **weights packed once for oneDNN** (``torch.ops.mkldnn._reorder_linear_weight``, the layout the
  matmul kernels read; aten repacks on every call), 8–12 % faster products here;
* **the GELU fused into the up-projection** (oneDNN's post-op: erf or tanh, as the model's
  activation says), so the (tokens, 4·d) activations are written once;
* **a compact key-padding mask** ``(batch, 1, 1, L)``, or none when no row is padded.

Everything else is the model's own modules: the embeddings (so extended or tuned position tables
and ids apply unchanged) and the LayerNorms; an attention plan's TempScale and attention scaling
multiply the queries as ``ragidx.embed.extension.attention`` does. It is used only where it is
exact by construction: inference (no gradient, eval mode), no SelfExtend (a RoPE method: these
models have learned position tables), a model whose class and layers are the stock BERT / RoBERTa
/ XLM-R ones (:func:`FusedBert.build` refuses anything else, e.g. a LoRA-wrapped layer or relative
position embeddings), and a CPU whose oneDNN takes the packed weights in the model's dtype.
:func:`FusedBert.build` checks one tiny random input against the model's own forward before use;
any failure leaves the model's forward in charge.

The packed weights are copies (the layers' matrices once more in memory, e.g. 21 MB for
all-MiniLM-L6-v2 in bfloat16); when the model's weights change (``ragidx train`` in the same
process), they are packed again before the next call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ragidx.embed.extension.attention import active_plan

log = logging.getLogger(__name__)

MODEL_CLASSES = frozenset({"BertModel", "RobertaModel", "XLMRobertaModel", "CamembertModel"})
_GELU = {"GELUActivation": "none", "NewGELUActivation": "tanh", "GELUTanh": "tanh", "PytorchGELUTanh": "tanh"}
_DTYPES = (torch.float32, torch.bfloat16)


@dataclass
class _Layer:
    """One encoder layer: its linear modules and the packed weights made from them."""

    qkv: tuple[torch.nn.Linear, torch.nn.Linear, torch.nn.Linear]
    out: torch.nn.Linear
    norm1: torch.nn.LayerNorm
    up: torch.nn.Linear
    act: torch.nn.Module
    gelu: str | None  # oneDNN's GELU algorithm ("none": erf, "tanh"), None: the activation module
    down: torch.nn.Linear
    norm2: torch.nn.LayerNorm
    heads: int
    scale: float
    packed: tuple[torch.Tensor, ...] = ()  # qkv weight, qkv bias, out, up, down weights (packed)


def _pack(weight: torch.Tensor) -> torch.Tensor:
    # torch leaves its mkldnn ops unannotated: a weight -> the same in oneDNN's blocked layout
    packed: torch.Tensor = torch.ops.mkldnn._reorder_linear_weight(weight.detach())
    return packed


def _linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, gelu: str | None = None
) -> torch.Tensor:
    """``x @ weight.T + bias`` on a packed weight (with a fused GELU of algorithm ``gelu``)."""
    out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(
        x, weight, bias, "gelu" if gelu else "none", [], gelu or ""
    )
    return out


class FusedBert:
    """The fused forward of one loaded model (see the module docstring); ``build`` makes it."""

    def __init__(self, model: torch.nn.Module, layers: list[_Layer]):
        self.model = model
        self.layers = layers
        self._versions: tuple[tuple[int, int], ...] = ()

    @classmethod
    def build(cls, model: torch.nn.Module) -> FusedBert | None:
        """The fused forward of ``model``, or None where it does not apply (see the module
        docstring): another architecture or layer type, a GPU, another dtype, no oneDNN, or a
        first check against the model's own forward that fails."""
        layers = _layers(model)
        if layers is None:
            return None
        fused = cls(model, layers)
        try:
            fused._repack()
            agrees = fused._agrees_with_model()
        except (RuntimeError, AttributeError, NotImplementedError) as exc:  # no such op or layout here
            log.debug("fused forward unavailable: %s", exc)
            return None
        return fused if agrees else None

    def applies(self) -> bool:
        """Whether a call now would be exact: inference (no gradient), the model in eval mode, and
        no SelfExtend in the attention plan (TempScale and attention scaling are applied here as
        ``ragidx.embed.extension.attention`` applies them: the queries times the plan's row factor)."""
        plan = active_plan()
        return (
            not torch.is_grad_enabled()
            and not self.model.training
            and (plan is None or plan.self_extend is None)
        )

    def __call__(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **extra: torch.Tensor
    ) -> torch.Tensor:
        """The last hidden states (batch, seq, dim) of right-padded ``input_ids`` (``extra``:
        ``position_ids`` / ``token_type_ids`` for the embeddings, as the model takes them)."""
        self._repack_if_changed()
        embeddings: Any = self.model.embeddings
        hidden: torch.Tensor = embeddings(input_ids=input_ids, **extra)
        batch, length, dim = hidden.shape
        keep = None if bool(attention_mask.all()) else attention_mask.bool()[:, None, None, :]
        plan = active_plan()
        factor = None if plan is None else plan.row_factor(hidden.device)
        for layer in self.layers:
            qkv_w, qkv_b, out_w, up_w, down_w = layer.packed
            heads = layer.heads
            qkv = _linear(hidden, qkv_w, qkv_b).view(batch, length, 3, heads, dim // heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            if factor is not None:  # TempScale / attention scaling: each row's logits times its factor
                q = q * factor.to(q.dtype).view(-1, 1, 1, 1)
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=layer.scale)
            attended = attended.transpose(1, 2).reshape(batch, length, dim)
            hidden = layer.norm1(_linear(attended, out_w, layer.out.bias) + hidden)
            if layer.gelu is not None:
                inner = _linear(hidden, up_w, layer.up.bias, layer.gelu)
            else:
                inner = layer.act(_linear(hidden, up_w, layer.up.bias))
            hidden = layer.norm2(_linear(inner, down_w, layer.down.bias) + hidden)
        return hidden

    # ----------------------------------------------------------------------------- internals
    def _params(self) -> list[torch.Tensor]:
        return [
            p
            for layer in self.layers
            for module in (*layer.qkv, layer.out, layer.up, layer.down)
            for p in (module.weight, module.bias)
            if p is not None
        ]

    def _signature(self) -> tuple[tuple[int, int], ...]:
        return tuple((p.data_ptr(), p._version) for p in self._params())

    def _repack_if_changed(self) -> None:
        if self._signature() != self._versions:
            self._repack()

    def _repack(self) -> None:
        with torch.no_grad():
            for layer in self.layers:
                weight = torch.cat([m.weight for m in layer.qkv])
                biases: list[torch.Tensor] = [
                    m.weight.new_zeros(m.out_features) if m.bias is None else m.bias for m in layer.qkv
                ]
                layer.packed = (
                    _pack(weight),
                    torch.cat(biases),
                    _pack(layer.out.weight),
                    _pack(layer.up.weight),
                    _pack(layer.down.weight),
                )
        self._versions = self._signature()

    def _agrees_with_model(self) -> bool:
        """One tiny random input (two rows, one padded) through this and the model's forward."""
        config: Any = self.model.config
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(5, min(int(config.vocab_size), 1000), (2, 12), generator=generator)
        mask = torch.ones_like(ids)
        mask[1, 8:] = 0
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                mine = self(ids, mask)
                theirs = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        finally:
            self.model.train(was_training)
        keep = mask.bool()
        mine, theirs = mine[keep].float(), theirs[keep].float()
        cosine = F.cosine_similarity(mine, theirs, dim=-1).min().item()
        bar = 0.9999 if self.layers[0].up.weight.dtype == torch.float32 else 0.999
        agrees = bool(torch.isfinite(mine).all()) and cosine >= bar
        if not agrees:
            log.debug("fused forward disagrees with the model (min cosine %.6f); not used", cosine)
        return agrees


def _onednn() -> bool:
    available: Callable[[], bool] = torch.backends.mkldnn.is_available  # unannotated in torch
    return available()


def _layers(model: torch.nn.Module) -> list[_Layer] | None:
    """The stock layers of a BERT-family model on the CPU in float32 / bfloat16, else None."""
    if type(model).__name__ not in MODEL_CLASSES or not _onednn():
        return None
    config: Any = getattr(model, "config", None)
    if (
        config is None
        or getattr(config, "is_decoder", False)
        or getattr(config, "add_cross_attention", False)
        or getattr(config, "position_embedding_type", "absolute") not in (None, "absolute")
        or getattr(config, "chunk_size_feed_forward", 0)
    ):
        return None
    encoder = getattr(model, "encoder", None)
    blocks = getattr(encoder, "layer", None)
    if not isinstance(blocks, torch.nn.ModuleList) or not hasattr(model, "embeddings"):
        return None
    layers: list[_Layer] = []
    for block in blocks:
        layer = _layer(block)
        if layer is None:
            return None
        layers.append(layer)
    first = layers[0].up.weight if layers else None
    if first is None or first.device.type != "cpu" or first.dtype not in _DTYPES:
        return None
    return layers


def _layer(block: Any) -> _Layer | None:
    try:
        own = block.attention.self
        qkv = (own.query, own.key, own.value)
        out, norm1 = block.attention.output.dense, block.attention.output.LayerNorm
        up, act = block.intermediate.dense, block.intermediate.intermediate_act_fn
        down, norm2 = block.output.dense, block.output.LayerNorm
        heads = int(own.num_attention_heads)
        head_size = int(own.attention_head_size)
    except AttributeError:
        return None
    linears = (*qkv, out, up, down)
    if any(type(m) is not torch.nn.Linear for m in linears) or any(
        type(n) is not torch.nn.LayerNorm for n in (norm1, norm2)
    ):
        return None  # e.g. LoRA or quantised layers: the model's forward runs them
    if heads * head_size != out.in_features or getattr(block, "add_cross_attention", False):
        return None
    scale = float(getattr(own, "scaling", head_size**-0.5))
    gelu = _GELU.get(type(act).__name__)
    if gelu == "none" and getattr(act, "act", F.gelu) is not F.gelu:  # GELUActivation's python gelu
        gelu = None
    return _Layer(qkv, out, norm1, up, act, gelu, down, norm2, heads, scale)
