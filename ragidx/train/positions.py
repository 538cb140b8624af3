"""Position tuning (LongEmbed "further tuning on PI"): learn only the position rows PI interleaves.

An APE model's table ``E_o`` (``L_o`` rows) becomes the PI table ``E_t`` of ``L_t = L_o · s`` rows
(:func:`ragidx.embed.extension.ape.interpolated_table`): row ``i·s`` is ``E_o[i]`` exactly and stays
**frozen**; the ``s − 1`` rows between two originals start as their linear interpolation and are the
**only** parameters that learn (every other weight of the model is frozen too). The frozen rows are a
buffer, not a parameter, so no optimiser step (weight decay included) can move them.

Training inputs are short (at most ``L_o`` tokens), so each one is placed at a random start
(PoSE-style skip at the beginning, spec §1.1): ids ``u … u + n − 1`` with ``u ~ U{0 … L_t − n}``
drawn per example, covering the whole target window.

After training, :func:`export_table` puts the full table into the model (``max_position_embeddings
= L_t``) and :func:`write_marker` records ``L_o`` and ``s`` in ``ragidx_positions.json``: an input
of at most ``L_o`` tokens is then fed ids ``0, s, 2s, …`` (ragidx does this when it reads the
marker), which index exactly the frozen original rows, so short inputs embed exactly as the
untuned model's (the convention of the public ``dwzhu/e5-base-4k``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ragidx.embed.extension.ape import interpolated_table, position_table
from ragidx.embed.models import TUNED_POSITIONS_FILE
from ragidx.errors import ConfigError


class InterleavedTable(torch.nn.Module):
    """``E_t``: frozen original rows at multiples of ``scale``, learnable rows between them."""

    frozen_rows: torch.Tensor
    frozen_index: torch.Tensor
    learned_index: torch.Tensor

    def __init__(self, original: torch.Tensor, scale: int, offset: int = 0):
        super().__init__()
        rows = original.shape[0] - offset
        self.scale, self.offset, self.original_length = scale, offset, rows
        content = interpolated_table(original[offset:].detach(), scale)
        table = torch.cat([original[:offset].detach(), content])
        # every index on the table's device (a CPU index crashed training on CUDA), made from the
        # shape alone: no boolean mask, whose nonzero() reads data (a meta table has none)
        device = original.device
        leading = torch.arange(offset, device=device)
        originals = torch.arange(offset, table.shape[0], scale, device=device)
        frozen_index = torch.cat([leading, originals])
        starts = torch.arange(rows, device=device).unsqueeze(1) * scale + offset
        learned_index = (starts + torch.arange(1, scale, device=device).unsqueeze(0)).flatten()
        self.register_buffer("frozen_rows", table.index_select(0, frozen_index), persistent=False)
        self.register_buffer("frozen_index", frozen_index, persistent=False)
        self.register_buffer("learned_index", learned_index, persistent=False)
        self.learned = torch.nn.Parameter(table.index_select(0, learned_index))

    @property
    def target_length(self) -> int:
        return self.original_length * self.scale

    def table(self) -> torch.Tensor:
        """The full ``(offset + L_t, d)`` table, differentiable in the learned rows only."""
        rows = self.frozen_rows.shape[0] + self.learned.shape[0]
        out = self.learned.new_empty((rows, self.learned.shape[1]))
        out = out.index_copy(0, self.frozen_index, self.frozen_rows.to(out.dtype))
        return out.index_copy(0, self.learned_index, self.learned)

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.embedding(position_ids, self.table())


def attach(model: torch.nn.Module, target_length: int, offset: int = 0) -> InterleavedTable:
    """Swap ``model``'s position table for a trainable :class:`InterleavedTable` reaching
    ``target_length`` tokens, and freeze every other weight. Returns the table."""
    embeddings, table = position_table(model)
    original_length = table.weight.shape[0] - offset
    if target_length <= original_length:
        raise ConfigError(
            f"position tuning: target_length {target_length} must exceed the model's "
            f"{original_length} learned positions"
        )
    if target_length % original_length:
        raise ConfigError(
            f"position tuning: target_length {target_length} must be a multiple of the model's "
            f"{original_length} positions (PI keeps every original row at a multiple of s)"
        )
    interleaved = InterleavedTable(table.weight, target_length // original_length, offset)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    embeddings.position_embeddings = interleaved
    return interleaved


def pose_starts(lengths: torch.Tensor, table: InterleavedTable, generator: torch.Generator) -> torch.Tensor:
    """PoSE: a start ``u ~ U{0 … L_t − n}`` per row, so its ``n = lengths[r]`` tokens fit in ``L_t``."""
    room = (table.target_length - lengths.cpu()).clamp(min=0) + 1
    return (torch.rand(lengths.shape[0], generator=generator) * room).long()


def shifted_ids(starts: torch.Tensor, width: int, table: InterleavedTable) -> torch.Tensor:
    """Position ids (batch, width): ``u_r … u_r + width − 1`` plus the table's offset."""
    steps = torch.arange(width, device=starts.device).unsqueeze(0)
    return (starts.unsqueeze(1) + steps).clamp(max=table.target_length - 1) + table.offset


def export_table(model: torch.nn.Module, interleaved: InterleavedTable) -> None:
    """Replace the trainable table by a plain ``nn.Embedding`` holding it (what gets saved), and set
    ``max_position_embeddings`` so transformers loads the full table."""
    embeddings = model.get_submodule("embeddings")
    full = interleaved.table().detach().clone()
    width = int(full.shape[0])
    table = torch.nn.Embedding(width, int(full.shape[1]), device=full.device, dtype=full.dtype)
    table.weight = torch.nn.Parameter(full, requires_grad=False)
    embeddings.position_embeddings = table
    config = getattr(model, "config", None)
    if config is not None:
        config.max_position_embeddings = width
    for name in ("position_ids", "token_type_ids"):  # transformers sizes these buffers by the table
        buffer = getattr(embeddings, name, None)
        if isinstance(buffer, torch.Tensor) and buffer.dim() == 2:
            fresh = torch.arange(width) if name == "position_ids" else torch.zeros(width, dtype=buffer.dtype)
            embeddings.register_buffer(name, fresh.unsqueeze(0).to(buffer.device), persistent=False)


def write_marker(folder: Path, table: InterleavedTable) -> None:
    """Record ``L_o``, ``s`` and the offset beside the saved weights (see the module docstring)."""
    marker = {
        "method": "pi",
        "original_length": table.original_length,
        "scale": table.scale,
        "offset": table.offset,
        "short_inputs": "inputs of at most original_length tokens use ids 0, s, 2s, …",
    }
    (folder / TUNED_POSITIONS_FILE).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
