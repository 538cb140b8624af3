"""Context extension for rotary position embeddings (Llama, Mistral, Gemma, E5-RoPE …).

* **PI**: positions ``m → m / s``, done as every frequency divided by ``s``;
* **NTK**-aware: base ``b → b·λ``, i.e. ``θ_j → θ_j · λ^(−2j/d)`` (high frequencies barely move);
* **GP**: position ids ``floor(m / s)``, given to the rotary embedding of the extended layer types
  only (a forward pre-hook on the rotary module), so sliding-window layers keep their positions;
* **SelfExtend**: attention-level (see :mod:`ragidx.embed.extension.attention`); this module supplies
  the rotation by a position difference, with the layer's *original* frequencies.

transformers keeps frequencies in ``inv_freq`` buffers: one per model, or one per layer type
(``full_attention_inv_freq``, ``sliding_attention_inv_freq`` in Gemma 3). Sliding-window layers
never see a distance beyond their window, so only the other layer types are extended. Buffers are
swapped only while an extended input runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from ragidx.embed.config import ROPE_METHODS, ExtensionConfig
from ragidx.embed.extension.attention import Rotate
from ragidx.errors import ModelError


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


def frequency_buffers(model: torch.nn.Module, method: str) -> list[tuple[torch.nn.Module, str, str | None]]:
    """(module, buffer name, layer type or None) for every frequency buffer ``method`` extends
    (sliding-window layer types are left alone); a one-line ModelError for a method that is not one
    for rotary positions, or a model without rotary buffers."""
    if method not in ROPE_METHODS:
        raise ModelError(f"{method!r} is not an extension for rotary positions (pi, gp, ntk, selfextend)")
    buffers: list[tuple[torch.nn.Module, str, str | None]] = []
    for module in model.modules():
        for name, _ in list(module.named_buffers(recurse=False)):
            if not name.endswith("inv_freq") or name.endswith("original_inv_freq"):
                continue
            layer_type = None if name == "inv_freq" else name.removesuffix("_inv_freq")
            if layer_type is not None and "sliding" in layer_type:
                continue
            buffers.append((module, name, layer_type))
    if not buffers:
        raise ModelError(f"{type(model).__name__}: no rotary position embeddings found to extend")
    return buffers


class RopePositions:
    """PI / NTK / GP / SelfExtend rotations at one scale ``s`` for one model's rotary embeddings
    (a per-document scale keeps one per distinct s, see :class:`ragidx.embed.extension.Extension`).
    NTK's λ is ``config.ntk_factor`` for this s."""

    def __init__(self, model: torch.nn.Module, config: ExtensionConfig, original_length: int, scale: int):
        self.method = config.method
        self.scale = scale
        self.buffers = frequency_buffers(model, config.method)
        self.original = {(id(m), n): getattr(m, n).detach().clone() for m, n, _ in self.buffers}
        self.rotary_modules = list({id(m): m for m, _, _ in self.buffers}.values())
        self.extended_types = {layer_type for _, _, layer_type in self.buffers}
        self.extended: dict[tuple[int, str], torch.Tensor] = {}
        factor = config.ntk_factor(original_length, scale)  # λ for this s (or the explicit one)
        for module, name, _ in self.buffers:
            inv = self.original[(id(module), name)]
            if self.method == "pi":
                self.extended[(id(module), name)] = inv / scale
            elif self.method == "ntk":
                self.extended[(id(module), name)] = ntk_frequencies(inv, factor)

    def position_ids(self, length: int, device: torch.device) -> torch.Tensor:
        """The model's position ids: always ``0 … n−1`` (GP groups them inside the rotary module,
        for the extended layer types only; see :meth:`_group_positions`)."""
        return torch.arange(length, device=device).unsqueeze(0)

    def _group_positions(
        self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """Forward pre-hook of a rotary module, ``forward(x, position_ids[, layer_type])``: GP's
        ``floor(m / s)`` for extended layer types (every call when the model has one frequency set).
        ``args`` / ``kwargs`` are the rotary module's arguments, typed as torch types a hook's."""
        layer_type = kwargs.get("layer_type", args[2] if len(args) > 2 else None)
        if layer_type not in self.extended_types:
            return None
        if "position_ids" in kwargs:
            return args, {**kwargs, "position_ids": self._grouped(kwargs["position_ids"])}
        return (args[0], self._grouped(args[1]), *args[2:]), kwargs

    def _grouped(self, position_ids: torch.Tensor) -> torch.Tensor:
        return torch.div(position_ids, self.scale, rounding_mode="floor")

    def rotations(self) -> dict[str | None, Rotate]:
        """SelfExtend's re-rotation per extended layer type, with the original frequencies."""
        return {layer_type: rotation(self.original[(id(m), n)]) for m, n, layer_type in self.buffers}

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The extended frequencies (PI, NTK) or grouped positions (GP) for one forward pass."""
        hooks = []
        if self.method == "gp":
            hooks = [
                module.register_forward_pre_hook(self._group_positions, with_kwargs=True)
                for module in self.rotary_modules
            ]
        for module, name, _ in self.buffers:
            if (id(module), name) in self.extended:
                getattr(module, name).copy_(self.extended[(id(module), name)])
        try:
            yield
        finally:
            for hook in hooks:
                hook.remove()
            for module, name, _ in self.buffers:
                if (id(module), name) in self.extended:
                    getattr(module, name).copy_(self.original[(id(module), name)])
