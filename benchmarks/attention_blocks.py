"""Time of ragidx's blocked attention paths against the dense masked attention they replace.

Two attention shapes that are not plain full attention run in every extended EmbeddingGemma pass:
its sliding-window layers (20 of 24, ±256 tokens) and SelfExtend on its global layers. ragidx runs
both block by block with fused kernels (``ragidx.embed.extension.attention``); the peer is what a dense
implementation does: one SDPA call with an L×L mask (transformers' SDPA path for a sliding
window), or, for SelfExtend, two full score matrices (neighbour and grouped positions) picked per
pair by an L×L mask and soft-maxed (LongEmbed's reference code). Both peers hold L×L tensors; the
plain fused full attention (no mask) is printed as the floor a one-pass layer costs.

Shapes are EmbeddingGemma's: batch 1, 3 query heads of 256 dims (its one KV head repeated), float32,
random q, k, v (timing does not depend on values). Sliding window 257 (±256), SelfExtend with the
``gemma-selfextend-4k`` preset's parameters for s = 2: group 3, neighbour window 1,024. Each cell is
the median of ``--repeats`` timed calls after one warm-up. Outputs are checked against each other
(max abs difference printed) before timing.

    python benchmarks/attention_blocks.py                     # L = 2048, 4096 (CPU: about 1 minute)
    python benchmarks/attention_blocks.py --lengths 2048,4096,8192 --device cuda --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ragidx.embed.extension.attention import attend, self_extend_attention, windowed_attention
from ragidx.embed.extension.rope import rotation

HEADS, DIM, SLIDING, SE_WINDOW, SE_GROUP = 3, 256, 257, 1024, 3


def _time(fn: Callable[[], torch.Tensor], repeats: int, device: str) -> tuple[float, torch.Tensor]:
    out = fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000, out


def dense_sliding(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, window: int
) -> torch.Tensor:
    pos = torch.arange(q.shape[2], device=q.device)
    keep = (pos[:, None] - pos[None, :]).abs() < window
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=scale)


def dense_self_extend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, rotate: Callable, window: int, group: int
) -> torch.Tensor:
    """The reference: neighbour scores from q, k at their own positions; far scores from q at its
    grouped position ± shift and k at its grouped position; picked per pair, one softmax."""
    pos = torch.arange(q.shape[2], device=q.device)
    shift = window - window // group
    k_far = rotate(k, pos // group - pos)
    near = (q @ k.transpose(-1, -2)) * scale
    left = (rotate(q, pos // group + shift - pos) @ k_far.transpose(-1, -2)) * scale
    right = (rotate(q, pos // group - shift - pos) @ k_far.transpose(-1, -2)) * scale
    dist = pos[:, None] - pos[None, :]
    scores = torch.where(dist.abs() < window, near, torch.where(dist > 0, left, right))
    return torch.softmax(scores, dim=-1) @ v


def _row(length: int, scale: float, rotate: Callable, repeats: int, device: str) -> dict[str, float]:
    q, k, v = (torch.randn(1, HEADS, length, DIM, device=device) for _ in range(3))
    full, _ = _time(lambda: attend(q, k, v, scale)[0], repeats, device)
    ours_w, out_w = _time(lambda: windowed_attention(q, k, v, scale, SLIDING, False, None), repeats, device)
    peer_w, ref_w = _time(lambda: dense_sliding(q, k, v, scale, SLIDING), repeats, device)
    ours_se, out_se = _time(
        lambda: self_extend_attention(q, k, v, scale, SE_WINDOW, SE_GROUP, rotate), repeats, device
    )
    peer_se, ref_se = _time(
        lambda: dense_self_extend(q, k, v, scale, rotate, SE_WINDOW, SE_GROUP), repeats, device
    )
    return {
        "length": length,
        "full_ms": full,
        "sliding_ms": ours_w,
        "sliding_dense_ms": peer_w,
        "sliding_speedup": peer_w / ours_w,
        "sliding_max_abs_diff": (out_w - ref_w).abs().max().item(),
        "selfextend_ms": ours_se,
        "selfextend_dense_ms": peer_se,
        "selfextend_speedup": peer_se / ours_se,
        "selfextend_max_abs_diff": (out_se - ref_se).abs().max().item(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="2048,4096", help="sequence lengths, comma-separated")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    torch.manual_seed(0)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, DIM, 2, device=args.device).float() / DIM))
    rotate = rotation(inv_freq)
    scale = DIM**-0.5
    rows = [_row(int(n), scale, rotate, args.repeats, args.device) for n in args.lengths.split(",")]
    meta = {"device": args.device, "threads": torch.get_num_threads(), "torch": torch.__version__}
    if args.json:
        print(json.dumps({**meta, "rows": rows}, indent=1))
        return
    print(
        f"device {args.device}, {meta['threads']} threads, torch {meta['torch']}; median ms of {args.repeats}"
    )
    print(
        "| L | full (floor) | sliding: ragidx | dense | ratio | SelfExtend: ragidx | dense | ratio | diff |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        diff = max(r["sliding_max_abs_diff"], r["selfextend_max_abs_diff"])
        print(
            f"| {r['length']} | {r['full_ms']:.0f} | {r['sliding_ms']:.0f} | {r['sliding_dense_ms']:.0f} | "
            f"{r['sliding_speedup']:.2f}× | {r['selfextend_ms']:.0f} | {r['selfextend_dense_ms']:.0f} | "
            f"{r['selfextend_speedup']:.2f}× | {diff:.1e} |"
        )


if __name__ == "__main__":
    main()
