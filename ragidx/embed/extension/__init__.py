"""Training-free context extension (LongEmbed): embed inputs longer than the model was trained on.

* :mod:`ragidx.embed.config` — :class:`ExtensionConfig`: method, target length and the
  Table 6 hyper-parameters, saved in the index manifest;
* :mod:`ragidx.embed.extension.ape` — learned absolute position tables (BERT, XLM-R): GP, RP, PI;
* :mod:`ragidx.embed.extension.rope` — rotary positions (Llama, Gemma…): PI, NTK, GP, SelfExtend's rotations;
* :mod:`ragidx.embed.extension.attention` — TempScale, attention scaling, sliding windows, SelfExtend,
  as a transformers attention function with memory linear in length.

:class:`Extension` binds a config to a loaded model. It is applied per forward pass and only to
inputs longer than the original window: shorter inputs run the unmodified model (TempScale, when
set, applies to every input). Weights on disk are never modified.

The scale s is the index's ``ceil(L_t / L_o)`` (or the explicit ``scale``), or, with
``scale_from = "document"``, ``ceil(n / L_o)`` for an input of n real tokens: extended inputs run one
at a time, so it comes from that one input, never from its batch. Positions are built once per s
and kept (:meth:`Extension.positions_for`), so PI tables and frequencies are computed once per s.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections import OrderedDict
from collections.abc import Iterator

import torch
from transformers import PreTrainedModel

from ragidx.embed.config import ExtensionConfig
from ragidx.embed.extension.ape import ApePositions, has_position_table, position_table
from ragidx.embed.extension.ape import check_method as check_ape_method
from ragidx.embed.extension.attention import (
    ATTN_IMPLEMENTATION,
    AttentionPlan,
    SelfExtendSpec,
    attention_plan,
)
from ragidx.embed.extension.rope import RopePositions, frequency_buffers
from ragidx.errors import ModelError

__all__ = ["Extension", "ExtensionConfig"]

KEPT_SCALES = 4  # positions kept for this many scales (scale_from = "document"), the last used


class Extension:
    """An :class:`ExtensionConfig` applied to one loaded model with original window ``L_o``."""

    def __init__(self, model: torch.nn.Module, config: ExtensionConfig, native_window: int, offset: int = 0):
        self.config = config
        self.model = model
        self.original_length = config.original_length or native_window
        # the index's s; with scale_from = "document" the largest one, for an input of L_t tokens
        self.scale = config.scale_for(self.original_length)
        self.offset = offset
        self.ape = config.method != "none" and has_position_table(model)
        self._positions: OrderedDict[int, ApePositions | RopePositions] = OrderedDict()
        if config.method != "none":
            if self.ape:
                check_ape_method(config.method)
                _check_table(model, config, self.original_length, self.scale, offset)
            else:
                frequency_buffers(model, config.method)  # refuse a model or method that cannot serve
            if not config.per_document:
                self.positions_for(self.scale)
        needs_attention = config.method == "selfextend" or config.attention_scaling or config.uses_tau
        if needs_attention and (config.method != "none" or config.uses_tau):
            try:
                _set_attn_implementation(model, ATTN_IMPLEMENTATION)
            except (ValueError, AttributeError) as exc:
                raise ModelError(
                    f"{type(model).__name__} does not use transformers' attention interface, which "
                    "TempScale, attention scaling and SelfExtend need; set attention_scaling = false "
                    "and tau = 1, or use another method"
                ) from exc
        self._takes_token_types = "token_type_ids" in inspect.signature(model.forward).parameters

    @property
    def target_length(self) -> int:
        """The longest input (tokens, special tokens included) this extension embeds in one pass."""
        return self.config.target_length if self.config.method != "none" else self.original_length

    def scale_of(self, length: int) -> int:
        """s for an input of ``length`` real tokens: the index's, or with ``scale_from =
        "document"`` ``ceil(length / L_o)``."""
        return self.config.scale_for(self.original_length, length)

    def positions_for(self, scale: int) -> ApePositions | RopePositions:
        """The positions (APE table / ids, RoPE frequencies) at ``scale``, built at first use and
        kept for the :data:`KEPT_SCALES` scales used last: a PI table has L_o · s rows, so keeping
        every s of MiniLM to 32k (2 … 64) would hold 1.6 GB; rebuilding one takes about 0.1 s,
        against seconds for the extended pass that needs it."""
        positions = self._positions.get(scale)
        if positions is None:
            if self.ape:
                positions = ApePositions(
                    self.model, self.config.method, self.original_length, scale, self.offset
                )
            else:
                positions = RopePositions(self.model, self.config, self.original_length, scale)
            self._positions[scale] = positions
            while len(self._positions) > KEPT_SCALES:
                self._positions.popitem(last=False)
        self._positions.move_to_end(scale)
        return positions

    @property
    def scales(self) -> tuple[int, ...]:
        """The scales whose positions are built so far."""
        return tuple(sorted(self._positions))

    @contextlib.contextmanager
    def forward_kwargs(
        self, input_ids: torch.Tensor, lengths: torch.Tensor, role: str
    ) -> Iterator[dict[str, torch.Tensor]]:
        """Extra forward arguments and the model state for one batch (see the module docstring)."""
        tau = self.config.tau_for(role)
        longest = int(input_ids.shape[1])
        per_document = self.config.per_document
        if longest <= self.original_length or self.config.method == "none":
            plan = AttentionPlan(tau=tau) if tau != 1.0 else None
            with attention_plan(plan):
                yield {}
            return
        if input_ids.shape[0] != 1:
            raise ValueError("extended inputs are embedded one at a time")
        # the input's real length (a batch of one is never padded by the Encoder; it would be here)
        length = int(lengths[0]) if per_document else longest
        if length <= self.original_length:
            plan = AttentionPlan(tau=tau) if tau != 1.0 else None
            with attention_plan(plan):
                yield {}
            return
        scale = self.scale_of(length)
        positions = self.positions_for(scale)
        position_ids = positions.position_ids(length, input_ids.device)
        if length < longest:  # a padded tail, masked: any id the table holds will do
            position_ids = torch.cat([position_ids, position_ids[:, -1:].expand(1, longest - length)], 1)
        kwargs: dict[str, torch.Tensor] = {"position_ids": position_ids}
        if self._takes_token_types:
            kwargs["token_type_ids"] = torch.zeros_like(input_ids)
        self_extend = None
        if self.config.method == "selfextend":
            assert isinstance(positions, RopePositions)
            window, group = self.config.selfextend_params(self.original_length, scale)
            self_extend = SelfExtendSpec(window=window, group=group, rotate=positions.rotations())
        plan = AttentionPlan(
            tau=tau,
            original_length=self.original_length if self.config.attention_scaling else None,
            lengths=lengths,
            self_extend=self_extend,
        )
        with positions.applied(), attention_plan(plan):
            yield kwargs


def _check_table(
    model: torch.nn.Module, config: ExtensionConfig, original_length: int, scale: int, offset: int
) -> None:
    """Refuse, as one line, the settings a learned position table cannot serve (an IndexError in
    the embedding lookup otherwise): ``original_length`` past the table's rows, and for PI and GP a
    ``scale`` whose ``original_length · scale`` positions fall short of ``target_length`` (PI's
    table has that many rows; GP reads row ``floor(n / s)`` for position n)."""
    rows = position_table(model)[1].num_embeddings - offset
    name = getattr(getattr(model, "config", None), "name_or_path", "") or type(model).__name__
    if original_length > rows:
        raise ModelError(
            f"extension.original_length = {original_length} exceeds the {rows} learned positions of "
            f"{name}; leave original_length unset (the model's window) or set it to at most {rows}"
        )
    if config.method in ("pi", "gp") and original_length * scale < config.target_length:
        least = math.ceil(config.target_length / original_length)
        raise ModelError(
            f"extension.scale = {scale} is too small for {config.method} on {name}: "
            f"{original_length} positions × {scale} reach {original_length * scale} tokens, short of "
            f"extension.target_length = {config.target_length}; leave scale unset (ceil(target_length"
            f" / {original_length}) = {least}), set it to at least {least}, or lower target_length "
            f"to {original_length * scale}"
        )


def _set_attn_implementation(model: torch.nn.Module, name: str) -> None:
    """``model.set_attn_implementation(name)``: only transformers' models have it (``AttributeError``
    otherwise, as the plain attribute access raised)."""
    if not isinstance(model, PreTrainedModel):
        raise AttributeError(f"{type(model).__name__} has no set_attn_implementation")
    model.set_attn_implementation(name)
