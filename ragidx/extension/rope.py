"""Context extension for rotary position embeddings (Llama, Mistral, Gemma, E5-RoPE …).

* **PI**: positions ``m → m / s``, done as every frequency divided by ``s``;
* **NTK**-aware: base ``b → b·λ``, i.e. ``θ_j → θ_j · λ^(−2j/d)`` (high frequencies barely move);
* **GP**: position ids ``floor(m / s)``;
* **SelfExtend**: attention-level (see :mod:`ragidx.extension.attention`); this module supplies
  the rotation by a position difference, with the layer's *original* frequencies.

transformers keeps frequencies in ``inv_freq`` buffers: one per model, or one per layer type
(``full_attention_inv_freq``, ``sliding_attention_inv_freq`` in Gemma 3). Sliding-window layers
never see a distance beyond their window, so only the other layer types are extended. Buffers are
swapped only while an extended input runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from ragidx.errors import ModelError
from ragidx.extension.attention import Rotate
from ragidx.extension.config import ExtensionConfig


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotation(inv_freq: torch.Tensor) -> Rotate:
    """``rotate(x, delta)``: rotate vectors already at some position by ``delta`` more positions
    (transformers' rotate-half convention; rotations compose, so R(a)·R(b) = R(a + b))."""
    frequencies = inv_freq.detach().float().clone()

    def rotate(x: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        angles = delta.to(x.device, torch.float32)[:, None] * frequencies.to(x.device)[None, :]
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        return x * cos + rotate_half(x) * sin

    return rotate


def ntk_frequencies(inv_freq: torch.Tensor, factor: float) -> torch.Tensor:
    """θ_j = b^(−2j/d) → (b·λ)^(−2j/d) = θ_j · λ^(−2j/d)."""
    dim = 2 * inv_freq.shape[0]
    exponents = torch.arange(0, dim, 2, dtype=torch.float64, device=inv_freq.device) / dim
    return (inv_freq.double() * factor ** (-exponents)).to(inv_freq.dtype)


class RopePositions:
    """PI / NTK / GP / SelfExtend rotations for one model's rotary embeddings."""

    def __init__(self, model: torch.nn.Module, config: ExtensionConfig, original_length: int, scale: int):
        if config.method not in ("pi", "gp", "ntk", "selfextend"):
            raise ModelError(
                f"{config.method!r} is not an extension for rotary positions (pi, gp, ntk, selfextend)"
            )
        self.method = config.method
        self.scale = scale
        # (module, buffer name, layer type or None) for every frequency buffer that is extended
        self.buffers: list[tuple[torch.nn.Module, str, str | None]] = []
        for module in model.modules():
            for name, _ in list(module.named_buffers(recurse=False)):
                if not name.endswith("inv_freq") or name.endswith("original_inv_freq"):
                    continue
                layer_type = None if name == "inv_freq" else name.removesuffix("_inv_freq")
                if layer_type is not None and "sliding" in layer_type:
                    continue
                self.buffers.append((module, name, layer_type))
        if not self.buffers:
            raise ModelError(f"{type(model).__name__}: no rotary position embeddings found to extend")
        self.original = {(id(m), n): getattr(m, n).detach().clone() for m, n, _ in self.buffers}
        self.extended: dict[tuple[int, str], torch.Tensor] = {}
        for module, name, _ in self.buffers:
            inv = self.original[(id(module), name)]
            if self.method == "pi":
                self.extended[(id(module), name)] = inv / scale
            elif self.method == "ntk":
                self.extended[(id(module), name)] = ntk_frequencies(inv, config.ntk_factor(original_length))

    def position_ids(self, length: int, device: torch.device) -> torch.Tensor:
        pid = torch.arange(length, device=device)
        if self.method == "gp":
            pid = torch.div(pid, self.scale, rounding_mode="floor")
        return pid.unsqueeze(0)

    def rotations(self) -> dict[str | None, Rotate]:
        """SelfExtend's re-rotation per extended layer type, with the original frequencies."""
        return {layer_type: rotation(self.original[(id(m), n)]) for m, n, layer_type in self.buffers}

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        if not self.extended:
            yield
            return
        for module, name, _ in self.buffers:
            getattr(module, name).copy_(self.extended[(id(module), name)])
        try:
            yield
        finally:
            for module, name, _ in self.buffers:
                getattr(module, name).copy_(self.original[(id(module), name)])
