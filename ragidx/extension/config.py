"""Extension settings and the LongEmbed Table 6 hyper-parameters.

``s = ceil(L_t / L_o)`` (the paper's fixed scale; the reference code's per-batch ``ceil(n / L_o)``
is not used, so one document's positions do not depend on its batch). Defaults when a parameter is
not given, reproducing Table 6 exactly for s = 2, 4, 8 and extending it by the same rule:

* NTK: ``λ = ceil(1.25 · s)`` → 3, 5, 10 for s = 2, 4, 8 (base 10,000 → 30,000 / 50,000 / 100,000);
* SelfExtend: ``g = s + 1``, ``w = L_o / s`` → (3, 256), (5, 128), (9, 64) for L_o = 512 and
  (3, 2048), (5, 1024), (9, 512) for L_o = 4,096. These satisfy ``w + (L_t − w)/g = L_o`` exactly:
  the largest relative distance maps onto the trained window.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Method = Literal["none", "pi", "gp", "rp", "ntk", "selfextend"]
METHODS: tuple[str, ...] = ("pi", "gp", "rp", "ntk", "selfextend")
APE_METHODS = ("pi", "gp", "rp")
ROPE_METHODS = ("pi", "gp", "ntk", "selfextend")


class ExtensionConfig(BaseModel):
    """How to run an encoder past its trained window; saved in the index manifest."""

    model_config = ConfigDict(extra="forbid")

    method: Method = Field("none", description="pi | gp | rp (APE) ; pi | gp | ntk | selfextend (RoPE)")
    target_length: int = Field(4096, ge=16, description="L_t: longest input in tokens, specials included")
    original_length: int | None = Field(None, ge=8, description="L_o (default: the model's window)")
    scale: int | None = Field(None, ge=1, description="s (default: ceil(L_t / L_o))")
    ntk_lambda: float | None = Field(None, gt=0, description="NTK base multiplier λ (default ceil(1.25 s))")
    se_group: int | None = Field(None, ge=1, description="SelfExtend group size g (default s + 1)")
    se_window: int | None = Field(None, ge=1, description="SelfExtend neighbour window w (default L_o / s)")
    attention_scaling: bool = Field(True, description="logits × max(1, ln n / ln L_o) past L_o")
    tau: float = Field(1.0, gt=0, le=1, description="TempScale τ for documents (1 = off)")
    query_tau: float | None = Field(None, gt=0, le=1, description="TempScale τ for queries (default τ)")

    @property
    def uses_tau(self) -> bool:
        return self.tau != 1.0 or (self.query_tau is not None and self.query_tau != 1.0)

    def tau_for(self, role: str) -> float:
        return self.query_tau if role == "query" and self.query_tau is not None else self.tau

    def scale_for(self, original_length: int) -> int:
        return self.scale or max(1, math.ceil(self.target_length / original_length))

    def ntk_factor(self, original_length: int) -> float:
        return self.ntk_lambda or float(math.ceil(1.25 * self.scale_for(original_length)))

    def selfextend_params(self, original_length: int) -> tuple[int, int]:
        """(w, g) for SelfExtend."""
        s = self.scale_for(original_length)
        return self.se_window or max(1, original_length // s), self.se_group or s + 1

    def label(self) -> str:
        """How documents embedded with this extension are recorded, e.g. ``extend:ntk``."""
        return f"extend:{self.method}"
