"""Pooling: token hidden states of one window → one vector.

Owns :func:`pool` (the settings, :class:`~ragidx.embed.config.PoolingConfig`, are what the index
manifest records about pooling) and :func:`l2_normalize`. Torch is imported when :func:`pool` runs.
Modes follow sentence-transformers' names so a ``1_Pooling/config.json`` maps one to one:
``cls``, ``mean``, ``max``, ``mean_sqrt_len_tokens``, ``lasttoken`` (decoder embedders: the last
non-padding token, with EOS appended by the encoder). Several modes concatenate, as in
sentence-transformers.

Four more modes pool a selection of tokens (the encoder marks them):

* ``lmk`` — landmark pooling (LMK paper, Algorithms 1–2): the tokenizer's SEP (EOS if it has none)
  is inserted after every ``landmark_every`` content tokens (``placement = "fixed"``, the default),
  after every sentence (``"sentence"``, the paper's sentence chunking: the authors' heuristic English
  splitter, :mod:`ragidx.embed.sentences`), or at the last sentence end past g/2
  (``"sentence_grouped"``, ragidx's "sentence" before issue 28); the window's last one in place of
  the closing SEP, all inside the token budget; the vector is the mean of the landmark states.
  **LMK is meant for encoders fine-tuned with LMK pooling**; on off-the-shelf encoders it is an
  experiment (see docs/extension.md for what it measured);
* ``multicls`` — the paper's training-free analogue: a [CLS] before every ``multicls_every`` tokens,
  mean of the [CLS] states;
* ``mean_every`` — Mean@k as the LMK authors compute it: the mean of the states at input positions
  0, k, 2k, … of the whole window ([CLS] and the prompt included, padding not);
* ``mean_every_content`` — ragidx's Mean@k before issue 28: the k-th, 2k-th, … content token (the
  last content token for inputs shorter than k).

Before issue 28 ragidx called ``sentence_grouped`` "sentence" and ``mean_every_content``
"mean_every"; an index manifest written then reads as the rule its documents were embedded with
(``rules`` in :class:`~ragidx.embed.config.PoolingConfig`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from ragidx.embed.config import SELECTION_MODES, PoolingConfig
from ragidx.errors import ModelError

if TYPE_CHECKING:
    import torch


def pool(
    hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    config: PoolingConfig,
    content_starts: torch.Tensor | None = None,
    selected: torch.Tensor | None = None,
) -> torch.Tensor:
    """Pool ``hidden`` (batch, seq, dim) over real tokens into (batch, dim × len(modes)).

    ``attention_mask`` is 1 for real tokens (right padding). ``content_starts`` (batch,) is the
    position of the first content token (after leading special tokens and the prompt); when
    ``include_prompt`` is false everything before it is left out of mean/max pooling, as
    sentence-transformers does. ``selected`` (batch, seq) marks the tokens the selection modes
    (lmk, multicls, mean_every) average.
    """
    import torch

    mask = attention_mask.to(hidden.dtype)
    if content_starts is not None and not config.include_prompt:
        positions = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0)
        mask = mask * (positions >= content_starts.unsqueeze(1)).to(mask.dtype)
    outputs: list[torch.Tensor] = []
    for mode in config.modes:
        if mode == "cls":
            outputs.append(hidden[:, 0])
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            summed = _weighted_sum(hidden, mask)
            counts = mask.sum(dim=1, keepdim=True).clamp(min=1e-9)
            outputs.append(summed / (counts.sqrt() if mode == "mean_sqrt_len_tokens" else counts))
        elif mode == "max":
            masked = hidden.masked_fill(mask.unsqueeze(-1) == 0, torch.finfo(hidden.dtype).min)
            outputs.append(masked.max(dim=1).values)
        elif mode in SELECTION_MODES:
            if selected is None:
                raise ModelError(f"{mode} pooling needs the selected token positions")
            weights = selected.to(hidden.dtype) * attention_mask.to(hidden.dtype)
            outputs.append(_weighted_sum(hidden, weights) / weights.sum(dim=1, keepdim=True).clamp(min=1e-9))
        elif mode == "lasttoken":
            last = attention_mask.sum(dim=1).long() - 1
            outputs.append(hidden[torch.arange(hidden.shape[0], device=hidden.device), last])
        else:  # pragma: no cover - guarded by the Literal type
            raise ModelError(f"unknown pooling mode {mode!r}")
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-1)


def _weighted_sum(hidden: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``(hidden * weights[..., None]).sum(dim=1)`` as one batched matrix product: it reads
    ``hidden`` once and writes no (batch, seq, dim) product (a third of the pooling time on a
    CPU, a tenth when ``hidden`` is a broadcast view; sums equal up to float rounding)."""
    import torch

    return torch.bmm(weights.unsqueeze(1), hidden).squeeze(1)


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (an all-zero row stays zero), for vectors combined or supplied
    outside :func:`pool`: PCW means, caller-embedded queries, vectors made outside ragidx."""
    norms = np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return cast(np.ndarray, vectors / norms)  # numpy's stubs type norm (axis=...) as Any
