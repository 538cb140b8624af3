"""Attention for extended runs: TempScale, attention scaling, sliding windows and SelfExtend.

ragidx registers one attention function and one mask function with transformers' attention
interfaces under the name ``"ragidx"`` (no model code is copied). While no :class:`AttentionPlan`
is active they hand over to transformers' own SDPA path unchanged, so a model loaded this way
behaves exactly like ``attn_implementation="sdpa"``. Inside ``with attention_plan(plan):``:

* **TempScale** — logits divided by ``tau`` in every layer;
* **attention scaling** — logits multiplied by ``max(1, ln n / ln L_o)`` (``n`` = real length of
  each row) in layers that attend to the whole sequence;
* **sliding-window layers** (Gemma-style) run block by block over their window only;
* **SelfExtend** — exact relative positions inside a neighbour window ``w``, grouped positions
  (``floor(pos / g)``, shifted to continue from the window edge) beyond it. Computed as fused
  attention passes over query blocks — the neighbour band and the grouped far keys — merged by their
  log-sum-exp, never as a dense L×L matrix.

Every path keeps memory linear in the sequence length: fused SDPA kernels, and masks no larger than
``block × L``. Masks built by transformers are replaced by a compact key-padding mask.

On a CUDA GPU (half precision, no key padding) the same rules run as a few whole-sequence passes of
FlashAttention-2 with its window bounds (:func:`flash_local`, checked against a dense reference once
per device before first use): a sliding-window layer is one pass, SelfExtend three (the neighbour
band; the far keys left of each query; the far keys to its right, as the left ones of the reversed
sequence), merged by log-sum-exp (:func:`self_extend_local`). No mask tensor and no per-block loop.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

ATTN_IMPLEMENTATION = "ragidx"
BLOCK = 512  # query rows per block in blocked attention (masks are at most BLOCK × L)

Rotate = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x, delta positions) -> rotated x


@dataclass
class SelfExtendSpec:
    """SelfExtend for RoPE layers: neighbour window ``w``, group size ``g``, and how to re-rotate."""

    window: int
    group: int
    rotate: dict[str | None, Rotate]  # layer type (None: every layer) -> rotation by delta positions


@dataclass
class AttentionPlan:
    """What one forward pass does differently from the plain model."""

    tau: float = 1.0
    original_length: int | None = None  # L_o for attention scaling; None: no attention scaling
    lengths: torch.Tensor | None = None  # (batch,) real lengths, for attention scaling
    self_extend: SelfExtendSpec | None = None

    def row_factor(self, device: torch.device, length_scaling: bool = True) -> torch.Tensor | None:
        """Per-row logit multiplier: attention scaling / tau (None when it is 1 everywhere).
        ``length_scaling=False`` for layers whose attention span does not grow with the input."""
        factor = torch.full((1,), 1.0 / self.tau, device=device)
        if length_scaling and self.original_length and self.lengths is not None:
            n = self.lengths.to(device=device, dtype=torch.float32).clamp(min=1)
            factor = factor * torch.clamp(torch.log(n) / math.log(self.original_length), min=1.0)
        return None if bool((factor == 1.0).all()) else factor


_PLAN: ContextVar[AttentionPlan | None] = ContextVar("ragidx_attention_plan", default=None)


def active_plan() -> AttentionPlan | None:
    """The plan in force (None: the model's plain attention)."""
    return _PLAN.get()


@contextlib.contextmanager
def attention_plan(plan: AttentionPlan | None) -> Iterator[None]:
    """Run the model's forward passes under ``plan`` (``None``: the plain model)."""
    token = _PLAN.set(plan)
    try:
        yield
    finally:
        _PLAN.reset(token)


# --------------------------------------------------------------------------------- primitives
def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, keep: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused attention returning ``(output, logsumexp)``; ``keep`` is a boolean mask broadcastable
    to (B, H, Lq, Lk). Rows with no key to attend to give output 0 and logsumexp -inf."""
    if keep is None:
        return attend_biased(q, k, v, scale)
    bias = torch.zeros(keep.shape, dtype=q.dtype, device=q.device).masked_fill(~keep, float("-inf"))
    return attend_biased(q, k, v, scale, bias, ~keep.any(dim=-1))


def attend_biased(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    bias: torch.Tensor | None = None,
    empty: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`attend` with the additive mask (0 / -inf, broadcastable to (B, H, Lq, Lk)) already
    built; ``empty`` marks the rows it leaves no key (broadcastable to (B, H, Lq); None: no such row)."""
    if q.device.type == "cpu":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, False, attn_mask=bias, scale=scale
        )
    elif q.device.type == "cuda":
        out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, None if bias is None else efficient_bias(bias, q, k), True, 0.0, False, scale=scale
        )[:2]
        lse = lse[..., : q.shape[2]]
    else:  # pragma: no cover - other devices: exact math on the (bounded) block
        scores = (q.float() @ k.float().transpose(-1, -2)) * scale
        if bias is not None:
            scores = scores + bias.float()
        lse = torch.logsumexp(scores, dim=-1)
        out = (torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v.float()).to(q.dtype)
    lse = lse.float()
    if empty is not None and bool(empty.any()):
        empty = empty.expand(lse.shape)
        lse = lse.masked_fill(empty, float("-inf"))
        out = out.masked_fill(empty.unsqueeze(-1), 0.0)
    return out, lse


def efficient_bias(bias: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``bias`` as CUDA's memory-efficient attention kernel takes it, prepared the way
    ``F.scaled_dot_product_attention`` prepares it (``preprocess_mask`` in ATen): its start and its
    rows aligned to 8 elements (padded, then sliced back, when they are not), and the full
    (B, H, Lq, Lk) shape (a broadcast head or batch dimension is expanded without copying)."""
    if bias.storage_offset() % 8 or any(stride % 8 for stride in bias.stride()[:-1]):
        width = bias.shape[-1]
        bias = torch.nn.functional.pad(bias, (0, 8 - width % 8))[..., :width]
    return bias.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])


def merge(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Combine partial attentions over disjoint key sets by their log-sum-exp."""
    if len(parts) == 1:
        return parts[0][0]
    lses = torch.stack([lse for _, lse in parts])  # (P, B, H, L)
    top = lses.max(dim=0).values
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    weights = torch.exp(lses - top)  # exp(-inf) = 0 for empty parts
    total = weights.sum(dim=0).clamp(min=1e-30)
    out = weights[0].unsqueeze(-1) * parts[0][0].float()
    for w, (o, _) in zip(weights[1:], parts[1:], strict=True):
        out = out + w.unsqueeze(-1) * o.float()
    return (out / total.unsqueeze(-1)).to(parts[0][0].dtype)


Keep = Callable[[torch.Tensor], torch.Tensor]  # relative distances d = i - j -> boolean keep


class _Blocks:
    """Blocked attention of query rows ``[start, stop)`` against key columns ``[lo, hi)``, with a mask
    that is a function of the distance ``d = i - j`` alone. The mask of a block depends only on its
    shape and offset ``lo - start``, so every interior block shares one (built once per call, at most
    block × (block + 2w) entries); key padding is added per block as a (B, 1, 1, cols) row."""

    def __init__(self, q: torch.Tensor, padding: torch.Tensor | None):
        self.dtype, self.device = q.dtype, q.device
        self.pad = None
        if padding is not None:
            self.pad = torch.zeros(padding.shape, dtype=q.dtype, device=q.device).masked_fill(
                ~padding, float("-inf")
            )
        self._masks: dict[tuple[str, int, int, int], tuple[torch.Tensor, torch.Tensor | None]] = {}

    def _mask(
        self, name: str, keep: Keep, rows: int, offset: int, cols: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        key = (name, rows, offset, cols)
        if key not in self._masks:
            d = (
                torch.arange(rows, device=self.device)[:, None]
                - torch.arange(cols, device=self.device)[None, :]
            )
            kept = keep(d - offset)
            bias = torch.zeros(kept.shape, dtype=self.dtype, device=self.device).masked_fill(
                ~kept, float("-inf")
            )
            empty = ~kept.any(dim=-1)
            self._masks[key] = (bias[None, None], empty if bool(empty.any()) else None)
        return self._masks[key]

    def attend(
        self,
        q_block: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        scale: float,
        start: int,
        lo: int,
        hi: int,
        keep: tuple[str, Keep] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Rows ``start … start + len(q_block)`` against keys ``[lo, hi)`` (None when empty);
        ``keep=None``: every key in the range is kept."""
        if hi <= lo:
            return None
        bias: torch.Tensor | None = None
        empty: torch.Tensor | None = None
        if keep is not None:
            bias, empty = self._mask(keep[0], keep[1], q_block.shape[2], lo - start, hi - lo)
        return self.attend_biased(q_block, k, v, scale, lo, hi, bias, empty)

    def attend_biased(
        self,
        q_block: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        scale: float,
        lo: int,
        hi: int,
        bias: torch.Tensor | None,
        empty: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys ``[lo, hi)`` under ``bias`` (rows ``empty`` see none of them), key padding added."""
        if self.pad is not None:
            pad = self.pad[:, None, None, lo:hi]
            bias = pad if bias is None else bias + pad
            empty = torch.isneginf(bias).all(dim=-1)
        return attend_biased(q_block, k[:, :, lo:hi], v[:, :, lo:hi], scale, bias, empty)


def _near(window: int, causal: bool) -> tuple[str, Keep]:
    if causal:
        return "near-causal", lambda d: (d.abs() < window) & (d >= 0)
    return "near", lambda d: d.abs() < window


def windowed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    window: int,
    causal: bool,
    padding: torch.Tensor | None,
    block: int = BLOCK,
) -> torch.Tensor:
    """Attention restricted to ``|i - j| < window`` (and ``j <= i`` if causal), block by block.
    Blocks are at most ``window`` rows (not below 64): a block sees ``block + 2 · window`` keys, so a
    block much wider than the window mostly computes masked-out scores."""
    length = q.shape[2]
    block = min(block, max(window, 64))
    blocks, near = _Blocks(q, padding), _near(window, causal)
    outs = []
    for start in range(0, length, block):
        stop = min(start + block, length)
        lo, hi = max(0, start - window + 1), min(length, stop + window - 1)
        part = blocks.attend(q[:, :, start:stop], k, v, scale, start, lo, hi, near)
        assert part is not None  # every row sees itself
        outs.append(part[0])
    return torch.cat(outs, dim=2)


def self_extend_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    window: int,
    group: int,
    rotate: Rotate,
    causal: bool = False,
    padding: torch.Tensor | None = None,
    block: int = BLOCK,
) -> torch.Tensor:
    """Bidirectional SelfExtend over queries/keys already rotated at positions ``0..L-1``.

    Neighbours (``|i-j| < w``) keep exact relative positions; for the rest, queries are re-rotated to
    ``i // g + w - w // g`` and keys to ``j // g``, so ``rel = sign · (|j//g - i//g| + w - w//g)``
    (LongEmbed §1.2). Per query block: one fused pass over the neighbour band and one over the far
    keys on each side, merged by log-sum-exp.
    """
    length = q.shape[2]
    pos = torch.arange(length, device=q.device)
    shift = window - window // group
    k_far = rotate(k, pos // group - pos)
    blocks, near = _Blocks(q, padding), _near(window, causal)
    # The far keys of a block: to the left j <= i - w, to the right j >= i + w. Against the keys
    # [0, stop - w + 1) (left) or [start + w, L) (right) the masks are fixed triangles at the inner
    # edge: built once, (block, L) each, and sliced per block (rows and columns).
    rows_cap = min(block, length)
    a = torch.arange(rows_cap, device=q.device)[:, None]
    c = torch.arange(length, device=q.device)[None, :]
    left_mask = _additive(
        (length - 1 - c) >= (rows_cap - a), q.dtype
    )  # column = distance from the right edge
    right_mask = _additive(c >= a, q.dtype)
    outs = []
    for start in range(0, length, block):
        stop = min(start + block, length)
        n, rows = stop - start, pos[start:stop]
        q_block = q[:, :, start:stop]
        parts = [
            blocks.attend(
                q_block, k, v, scale, start, max(0, start - window + 1), min(length, stop + window - 1), near
            )
        ]
        # keys to the left see the query at its grouped position + shift; keys to the right at
        # -shift, which mirrors the rule for the upper triangle.
        hi = stop - window + 1
        if hi > 0:
            q_far = rotate(q_block, rows // group + shift - rows)
            bias = left_mask[:, :, rows_cap - n :, length - hi :]
            parts.append(blocks.attend_biased(q_far, k_far, v, scale, 0, hi, bias, rows < window))
        lo = start + window
        if not causal and lo < length:
            q_far_mirror = rotate(q_block, rows // group - shift - rows)
            bias = right_mask[:, :, :n, : length - lo]
            parts.append(
                blocks.attend_biased(q_far_mirror, k_far, v, scale, lo, length, bias, rows + window >= length)
            )
        outs.append(merge([p for p in parts if p is not None]))
    return torch.cat(outs, dim=2)


def _additive(keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean keep-mask (Lq, Lk) as an additive (1, 1, Lq, Lk) one: 0 kept, -inf dropped."""
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, float("-inf"))[
        None, None
    ]


# --------------------------------------------------------------------------------- whole-sequence kernels
# (q, k, v, scale, left, right) -> (output, logsumexp as float32). Query i keeps key j when
# i + Lk - Lq - left <= j <= i + Lk - Lq + right (a bound of -1 is no bound): FlashAttention-2's rule,
# the window aligned to the bottom-right corner. Rows that keep no key must be blanked by the caller.
LocalKernel = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, float, int, int], tuple[torch.Tensor, torch.Tensor]
]


def flash_local(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, left: int, right: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention-2 (PyTorch's own build, CUDA) over whole sequences with window bounds.

    PyTorch reads a bound at or beyond ``Lk`` as no bound, which is the rule only when the right
    bound also reaches the last key from the first query (``right >= Lq - 1``); the bounds it would
    misread (``Lk <= right < Lq - 1``, more queries than keys) are refused. ragidx's passes never
    ask for them (equal lengths, or ``right = 0``)."""
    if k.shape[2] <= right < q.shape[2] - 1:
        raise ValueError(
            f"flash_local: right bound {right} with {q.shape[2]} queries and {k.shape[2]} keys is read "
            "as no bound by the kernel"
        )
    out, lse = torch.ops.aten._flash_attention_forward(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        None,
        None,
        q.shape[2],
        k.shape[2],
        0.0,
        False,
        False,
        scale=scale,
        window_size_left=left,
        window_size_right=right,
    )[:2]
    return out.transpose(1, 2), lse.float()


def reference_local(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, left: int, right: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """:data:`LocalKernel`'s rule with an explicit (Lq, Lk) mask: the slow, obviously correct twin
    of :func:`flash_local` (tests, and the check before a device first uses flash)."""
    rows = torch.arange(q.shape[2], device=q.device)[:, None] + (k.shape[2] - q.shape[2])
    cols = torch.arange(k.shape[2], device=q.device)[None, :]
    keep = torch.ones(rows.shape[0], cols.shape[1], dtype=torch.bool, device=q.device)
    if left >= 0:
        keep &= cols >= rows - left
    if right >= 0:
        keep &= cols <= rows + right
    return attend(q, k, v, scale, keep)


_FLASH_CHECKED: dict[tuple[str, int | None, torch.dtype, int], bool] = {}


def local_kernel(q: torch.Tensor) -> LocalKernel | None:
    """:func:`flash_local` where it runs and agrees with :func:`reference_local` on a small input
    (checked once per device, dtype and head size), else None (the blocked paths run instead)."""
    head = q.shape[-1]
    if q.device.type != "cuda" or q.dtype not in (torch.float16, torch.bfloat16) or head % 8 or head > 256:
        return None
    key = (q.device.type, q.device.index, q.dtype, head)
    if key not in _FLASH_CHECKED:
        _FLASH_CHECKED[key] = _flash_agrees(q.device, q.dtype, head)
    return flash_local if _FLASH_CHECKED[key] else None


def _flash_agrees(device: torch.device, dtype: torch.dtype, head: int) -> bool:
    if not torch.backends.cuda.flash_sdp_enabled():  # type: ignore[no-untyped-call]
        return False
    generator = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, head, generator=generator).to(device, dtype) for n in (96, 128, 128))
    try:
        for left, right in ((-1, -1), (5, 7), (-1, 0), (9, 0)):
            out, lse = flash_local(q, k, v, head**-0.5, left, right)
            ref, ref_lse = reference_local(q, k, v, head**-0.5, left, right)
            kept = torch.isfinite(ref_lse)
            if not kept.any() or not torch.allclose(out[kept].float(), ref[kept].float(), atol=2e-2, rtol=0):
                return False
            if not torch.allclose(lse[kept], ref_lse[kept], atol=2e-2, rtol=0):
                return False
    except (RuntimeError, TypeError, NotImplementedError):  # an older build without window bounds
        return False
    return True


def _blank_first_rows(
    part: tuple[torch.Tensor, torch.Tensor], rows: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``rows`` query rows kept no key: output 0 and logsumexp -inf (FlashAttention-2
    leaves +inf there), so :func:`merge` gives them no weight."""
    out, lse = part
    blank = torch.arange(out.shape[2], device=out.device) < rows  # out of place: autograd keeps both
    return out.masked_fill(blank[:, None], 0.0), lse.masked_fill(blank, float("-inf"))


def windowed_local(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    window: int,
    causal: bool,
    kernel: LocalKernel,
) -> torch.Tensor:
    """:func:`windowed_attention` (no key padding) as one whole-sequence pass of ``kernel``."""
    return kernel(q, k, v, scale, window - 1, 0 if causal else window - 1)[0]


def self_extend_local(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    window: int,
    group: int,
    rotate: Rotate,
    causal: bool,
    kernel: LocalKernel,
) -> torch.Tensor:
    """:func:`self_extend_attention` (no key padding) as whole-sequence passes of ``kernel``: the
    neighbour band ``|i - j| < w``; the far keys ``j <= i - w`` (keys ``[0, L - w)``, bottom-right
    causal: ``Lk - Lq = -w``); and, unless causal, the far keys ``j >= i + w``, which are the far-left
    keys of the reversed sequence. Merged by log-sum-exp."""
    length = q.shape[2]
    parts = [kernel(q, k, v, scale, window - 1, 0 if causal else window - 1)]
    if length > window:
        pos = torch.arange(length, device=q.device)
        shift = window - window // group
        k_far = rotate(k, pos // group - pos)
        cut = length - window
        q_far = rotate(q, pos // group + shift - pos)
        parts.append(_blank_first_rows(kernel(q_far, k_far[:, :, :cut], v[:, :, :cut], scale, -1, 0), window))
        if not causal:
            q_mirror = rotate(q, pos // group - shift - pos).flip(2)
            k_rev, v_rev = k_far.flip(2)[:, :, :cut], v.flip(2)[:, :, :cut]
            out, lse = _blank_first_rows(kernel(q_mirror, k_rev, v_rev, scale, -1, 0), window)
            parts.append((out.flip(2), lse.flip(2)))
    return merge(parts)


# --------------------------------------------------------------------------------- transformers hooks
def _ragidx_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,  # per-architecture extras, passed on unchanged to transformers' (untyped) **kwargs
) -> tuple[torch.Tensor, None]:
    plan = _PLAN.get()
    if plan is None:
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    if query.shape[2] != key.shape[2]:
        raise ValueError(
            "ragidx attention plans embed whole inputs; cached decoding (fewer queries than keys) "
            "is not supported under a plan"
        )
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", False))
    padding, full_mask = _keep_masks(attention_mask)
    window: int | None = getattr(module, "sliding_window", None) or kwargs.get("sliding_window")  # Mistral
    factor = plan.row_factor(query.device, length_scaling=not window)  # a sliding window never grows
    if factor is not None:
        query = query * factor.to(query.dtype).view(-1, 1, 1, 1)
    se = plan.self_extend
    layer_type = getattr(module, "layer_type", None)
    banded = bool(window) or causal or (se is not None and (layer_type in se.rotate or None in se.rotate))
    if full_mask is not None and banded:
        raise ValueError(
            "a caller-built (B, 1, Lq, Lk) mask cannot be combined with sliding windows, "
            "causal attention or SelfExtend under a plan; pass a 2D padding mask"
        )
    kernel = local_kernel(query) if padding is None and full_mask is None else None
    if window:
        if kernel is not None:
            out = windowed_local(query, key, value, scale, int(window), causal, kernel)
        else:
            out = windowed_attention(query, key, value, scale, int(window), causal, padding)
    elif se is not None and (layer_type in se.rotate or None in se.rotate):
        rotate = se.rotate.get(layer_type) or se.rotate[None]
        if kernel is not None:
            out = self_extend_local(query, key, value, scale, se.window, se.group, rotate, causal, kernel)
        else:
            out = self_extend_attention(
                query, key, value, scale, se.window, se.group, rotate, causal, padding
            )
    elif causal:
        length = query.shape[2]
        if kernel is not None:
            out = windowed_local(query, key, value, scale, length + 1, True, kernel)
        else:
            out = windowed_attention(query, key, value, scale, length + 1, True, padding)
    elif kernel is not None:
        out = kernel(query, key, value, scale, -1, -1)[0]
    else:
        keep = full_mask if full_mask is not None else None if padding is None else padding[:, None, None, :]
        out = attend(query, key, value, scale, keep)[0]
    return out.transpose(1, 2).contiguous(), None


def _keep_masks(mask: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(key padding (B, Lk), full keep-mask (B, 1, Lq, Lk)) from whatever mask the model passed:
    boolean keep-masks or float additive ones, compact (B, 1, 1, Lk) or full."""
    if mask is None:
        return None, None
    keep = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    if keep.ndim == 2:
        return keep, None
    if keep.ndim == 4 and keep.shape[-2] == 1:
        return keep[:, 0, 0, :], None
    return None, keep


def _ragidx_mask(*args: Any, **kwargs: Any) -> torch.Tensor | None:
    """Under a plan: a compact (B, 1, 1, L) key-padding mask (or None), never an L×L one. Takes
    whatever a mask function is called with, passed on unchanged to ``sdpa_mask``."""
    if _PLAN.get() is None:
        return sdpa_mask(*args, **kwargs)
    attention_mask = kwargs.get("attention_mask")
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.ndim != 2 or bool(attention_mask.all()):
        return None
    return attention_mask.bool()[:, None, None, :]


AttentionInterface.register(ATTN_IMPLEMENTATION, _ragidx_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_IMPLEMENTATION, _ragidx_mask)
