"""Context extension for learned absolute position tables (BERT, XLM-R, E5, GTE …).

* **GP** (grouped): ``pid → floor(pid / s)``; **RP** (recurrent): ``pid → pid mod L_o``;
* **PI** (linear interpolation): a table ``E_t`` of ``L_o · s`` rows with ``E_t[i·s] = E_o[i]`` and
  linear interpolation between neighbours, fed ordinary ids ``0 … n−1``. Edge rule (spec §8.2):
  the last ``s − 1`` rows, past ``(L_o − 1)·s``, have no right neighbour and **repeat**
  ``E_o[L_o − 1]`` (extrapolating from the last two rows would leave the trained range).

Models whose ids start at ``padding_idx + 1`` (RoBERTa, XLM-R) keep that offset: methods act on
the content rows only. The model's own table is swapped for the extended one only while an
extended input runs; the weights on disk are never touched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from ragidx.embed.config import APE_METHODS


def has_position_table(model: torch.nn.Module) -> bool:
    embeddings = getattr(model, "embeddings", None)
    return isinstance(getattr(embeddings, "position_embeddings", None), torch.nn.Embedding)


def position_table(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Embedding]:
    """``model.embeddings`` and its learned table ``position_embeddings`` (see
    :func:`has_position_table`)."""
    embeddings = getattr(model, "embeddings", None)
    table = getattr(embeddings, "position_embeddings", None)
    if not isinstance(embeddings, torch.nn.Module) or not isinstance(table, torch.nn.Embedding):
        raise ValueError(
            f"{type(model).__name__} has no learned position table (embeddings.position_embeddings)"
        )
    return embeddings, table


# torch leaves Embedding.from_pretrained unannotated; it returns an Embedding
_frozen_embedding: Callable[..., torch.nn.Embedding] = torch.nn.Embedding.from_pretrained


def interpolated_table(table: torch.Tensor, scale: int) -> torch.Tensor:
    """PI: ``(L_o, d)`` → ``(L_o · scale, d)``; row ``j`` is the table read at ``j / scale``:
    ``lerp(E_o[i], E_o[i + 1], k / scale)`` for ``j = i · scale + k`` (exactly ``E_o[i]`` at
    ``k = 0``), in float32 or float64 (half-precision tables are mixed in float32), one broadcast
    product (a 512 × 384 table to 8,192 rows in milliseconds: it is built when an ingest starts)."""
    dim = table.shape[1]
    work = table if table.dtype in (torch.float32, torch.float64) else table.float()
    fractions = torch.arange(scale, dtype=work.dtype, device=table.device) / scale
    mixed = torch.lerp(work[:-1, None, :], work[1:, None, :], fractions[None, :, None])
    last = work[-1:].expand(scale, dim)  # edge rule: repeat the last row
    return torch.cat([mixed.reshape(-1, dim), last]).to(table.dtype)


def position_ids(
    method: str, length: int, original_length: int, scale: int, device: torch.device | None = None
) -> torch.Tensor:
    """Content position ids ``0 … length−1`` remapped by GP or RP (PI and others: unchanged), made
    on ``device`` (default: the CPU)."""
    pid = torch.arange(length, device=device)
    if method == "gp":
        return torch.div(pid, scale, rounding_mode="floor")
    if method == "rp":
        return pid % original_length
    return pid


def check_method(method: str) -> None:
    """Refuse (ValueError) a method that is not one for absolute position tables."""
    if method not in APE_METHODS:
        raise ValueError(f"{method!r} is not an extension for absolute position tables (use pi, gp or rp)")


class ApePositions:
    """GP / RP / PI at one scale ``s`` for one model's ``embeddings.position_embeddings`` (a
    per-document scale keeps one per distinct s, see :class:`ragidx.embed.extension.Extension`)."""

    def __init__(self, model: torch.nn.Module, method: str, original_length: int, scale: int, offset: int):
        check_method(method)
        self.method = method
        self.original_length = original_length
        self.scale = scale
        self.offset = offset
        self.embeddings, self.original = position_table(model)
        self.extended: torch.nn.Embedding | None = None
        if method == "pi":
            weight = self.original.weight.detach()
            content = weight[offset : offset + original_length]
            table = torch.cat([weight[:offset], interpolated_table(content, scale)])
            self.extended = _frozen_embedding(table, freeze=True).to(weight.device)

    def position_ids(self, length: int, device: torch.device) -> torch.Tensor:
        ids = position_ids(self.method, length, self.original_length, self.scale, device) + self.offset
        return ids.unsqueeze(0)

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        if self.extended is None:
            yield
            return
        self.embeddings.position_embeddings = self.extended
        try:
            yield
        finally:
            self.embeddings.position_embeddings = self.original
