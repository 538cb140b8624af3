"""ragidx.embed.extension.attention against slow, dense, obviously-correct references.

Every fused / blocked path is compared with an explicit ``softmax(QKᵀ·scale + mask)·V`` built from the
full L×L matrix at small sizes. SelfExtend is checked against a reference that rotates *unrotated* keys
by the relative position the LongEmbed §1.2 rule assigns to each (query, key) pair, and the realized
relative positions are read back out of the fused implementation itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import torch
from transformers import (
    BertModel,
    LlamaConfig,
    LlamaModel,
    MistralConfig,
    MistralModel,
    Qwen2Config,
    Qwen2Model,
)
from transformers.integrations.sdpa_attention import repeat_kv
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from ragidx.embed.extension import attention as attn
from ragidx.embed.extension.attention import (
    ATTN_IMPLEMENTATION,
    AttentionPlan,
    Rotate,
    SelfExtendSpec,
    attend,
    attention_plan,
    efficient_bias,
    merge,
    self_extend_attention,
    windowed_attention,
)
from tests.tiny_models import tiny, tiny_bert

F64 = torch.float64
# LongEmbed §1.2 worked example: 10 tokens, w=4, g=2, relative positions seen from x0 and from x4.
EXAMPLE_ROWS = {
    0: [0, 1, 2, 3, 4, 4, 5, 5, 6, 6],
    4: [-4, -3, -2, -1, 0, 1, 2, 3, 4, 4],
}


# --------------------------------------------------------------------------------- dense references
def rope_inv_freq(dim: int, base: float) -> torch.Tensor:
    """θ_j = base^(−2j/d), j = 0..d/2−1 (float64)."""
    return 1.0 / base ** (torch.arange(0, dim, 2, dtype=F64) / dim)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """HF convention: (x1, x2) -> (−x2, x1) on the two halves of the last dim."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def make_rotate(inv_freq: torch.Tensor) -> Rotate:
    """Rotation of x (..., L, D) by ``delta`` (L,) positions, HF rotate_half convention."""

    def rotate(x: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        freqs = delta.to(F64)[:, None] * inv_freq.to(delta.device, F64)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return x * emb.cos().to(x.dtype) + rotate_half(x) * emb.sin().to(x.dtype)

    return rotate


def dense_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, keep: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(QKᵀ·scale + mask)V and logsumexp; rows with no key give 0 and −inf."""
    scores = (q @ k.transpose(-1, -2)) * scale
    return masked_softmax_v(scores, v, keep)


def masked_softmax_v(
    scores: torch.Tensor, v: torch.Tensor, keep: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked softmax of explicit logits times V, with the logsumexp of each row."""
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return probs @ v, lse


def se_rel(i: int, j: int, w: int, g: int) -> int:
    """The SelfExtend rule for query i, key j (LongEmbed §1.2), written literally."""
    if abs(i - j) < w:
        return j - i
    sign = 1 if j > i else -1
    return sign * (abs(j // g - i // g) + w - w // g)


def se_rel_matrix(length: int, w: int, g: int) -> torch.Tensor:
    """(L, L) table of relative positions rel[i, j] under the SelfExtend rule."""
    return torch.tensor([[se_rel(i, j, w, g) for j in range(length)] for i in range(length)])


def dense_self_extend(
    q0: torch.Tensor,
    k0: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    rel: torch.Tensor,
    rotate: Rotate,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """From UNROTATED q0, k0: logit[i, j] = q0_i · R(rel[i, j]) k0_j, then masked softmax times V."""
    rows = []
    for i in range(q0.shape[2]):
        k_rel = rotate(k0, rel[i])  # key j rotated by rel[i, j]
        rows.append((q0[:, :, i : i + 1] * k_rel).sum(-1))
    scores = torch.stack(rows, dim=2) * scale
    return masked_softmax_v(scores, v, keep)[0]


def dense_keep(
    length: int, window: int | None, causal: bool, lengths: list[int] | None = None
) -> torch.Tensor:
    """(B|1, 1, L, L) boolean: |i−j| < window, j ≤ i if causal, key j < real length of the row."""
    i = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    keep = torch.ones(length, length, dtype=torch.bool)
    if window is not None:
        keep &= (i - j).abs() < window
    if causal:
        keep &= j <= i
    keep = keep[None, None]
    if lengths is not None:
        keep = keep & (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]
    return keep


def padding_of(length: int, lengths: list[int]) -> torch.Tensor:
    """(B, L) boolean key-padding mask, True on real tokens."""
    return torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = F64) -> torch.Tensor:
    """Reproducible standard-normal tensor."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# --------------------------------------------------------------------------------- sanity of the helpers
def test_reference_rotate_is_rope() -> None:
    """The test rotate is RoPE: R(m)q · R(n)k depends only on n − m and equals q · R(n − m)k."""
    rotate = make_rotate(rope_inv_freq(8, 10000.0))
    q, k = randn(1, 1, 5, 8, seed=1), randn(1, 1, 5, 8, seed=2)
    m, n = torch.tensor([0, 3, 7, 11, 2]), torch.tensor([5, 1, 7, 30, 2])
    lhs = (rotate(q, m) * rotate(k, n)).sum(-1)
    torch.testing.assert_close(lhs, (q * rotate(k, n - m)).sum(-1), rtol=0, atol=1e-12)
    torch.testing.assert_close(lhs, (rotate(q, m + 9) * rotate(k, n + 9)).sum(-1), rtol=0, atol=1e-12)


def test_rule_reproduces_paper_example() -> None:
    """The literal rule gives the LongEmbed §1.2 example rows for L=10, w=4, g=2."""
    rel = se_rel_matrix(10, 4, 2)
    for row, expected in EXAMPLE_ROWS.items():
        assert rel[row].tolist() == expected


# --------------------------------------------------------------------------------- attend
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 1, 5, 7), (2, 1, 1, 7), (5, 7)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_attend_matches_dense_with_broadcast_masks(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """attend == explicit masked softmax and logsumexp for every broadcastable keep shape."""
    q, k, v = (randn(2, 3, n, 8, seed=s, dtype=dtype) for n, s in ((5, 1), (7, 2), (7, 3)))
    keep = torch.rand(shape, generator=torch.Generator().manual_seed(4)) < 0.6
    keep[..., 0] = True  # every row keeps a key; empty rows are tested separately
    out, lse = attend(q, k, v, 0.37, keep)
    ref, ref_lse = dense_attention(q, k, v, 0.37, keep)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(out, ref, rtol=0, atol=tol)
    assert out.dtype == dtype and out.shape == (2, 3, 5, 8)
    torch.testing.assert_close(lse.to(F64), ref_lse.to(F64), rtol=0, atol=1e-5)


def test_attend_without_mask() -> None:
    """keep=None is plain full attention."""
    q, k, v = randn(1, 2, 4, 8, seed=1), randn(1, 2, 9, 8, seed=2), randn(1, 2, 9, 8, seed=3)
    out, lse = attend(q, k, v, 0.5)
    ref, ref_lse = dense_attention(q, k, v, 0.5)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(lse.to(F64), ref_lse, rtol=0, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 1, 5, 7), (2, 1, 1, 7)])
def test_attend_fully_masked_rows(shape: tuple[int, ...]) -> None:
    """A row with no key to attend to gives output exactly 0 and logsumexp −inf; others unaffected."""
    q, k, v = randn(2, 3, 5, 8, seed=5), randn(2, 3, 7, 8, seed=6), randn(2, 3, 7, 8, seed=7)
    keep = torch.rand(shape, generator=torch.Generator().manual_seed(8)) < 0.6
    keep[..., 0] = True
    if shape[2] == 5:
        keep[..., 2, :] = False  # query row 2 sees nothing (every batch / head)
    else:
        keep[1] = False  # batch element 1 has no key at all
    out, lse = attend(q, k, v, 0.37, keep)
    ref, ref_lse = dense_attention(q, k, v, 0.37, keep)
    empty = ~keep.any(-1).expand(2, 3, 5)
    assert empty.any()
    assert torch.isfinite(out).all()
    assert (out[empty] == 0).all()
    assert torch.isneginf(lse[empty]).all() and torch.isfinite(lse[~empty]).all()
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(lse[~empty].to(F64), ref_lse[~empty], rtol=0, atol=1e-5)


# --------------------------------------------------------------------------------- merge
@pytest.mark.parametrize("n_parts", [2, 3])
@pytest.mark.parametrize("scale", [0.4, 40.0])
def test_merge_of_disjoint_key_sets_is_full_attention(n_parts: int, scale: float) -> None:
    """Attending over disjoint key subsets and merging by log-sum-exp equals full attention (also with
    large logits, rows empty in some parts, a part empty everywhere, and a row empty in all parts)."""
    lq, lk = 6, 13
    q, k, v = randn(2, 2, lq, 8, seed=11), randn(2, 2, lk, 8, seed=12), randn(2, 2, lk, 8, seed=13)
    gen = torch.Generator().manual_seed(14)
    keep = torch.rand(2, 1, lq, lk, generator=gen) < 0.5
    keep[:, :, 0] = False  # row 0 is empty everywhere
    assign = torch.randint(0, n_parts, (lk,), generator=gen)
    assign[:n_parts] = torch.arange(n_parts)  # every part owns at least one key
    parts = []
    for p in range(n_parts):
        idx = (assign == p).nonzero().squeeze(1)
        parts.append(attend(q, k[:, :, idx], v[:, :, idx], scale, keep[..., idx]))
    # a part whose keys are all masked: lse −inf everywhere
    parts.append(attend(q, k[:, :, :2], v[:, :, :2], scale, torch.zeros(1, 1, lq, 2, dtype=torch.bool)))
    assert any(torch.isneginf(lse).any() and not torch.isneginf(lse).all() for _, lse in parts[:-1])
    out = merge(parts)
    ref, _ = dense_attention(q, k, v, scale, keep)
    assert torch.isfinite(out).all()
    assert (out[:, :, 0] == 0).all()
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)


def test_merge_single_part_is_identity() -> None:
    """Merging one part returns that part's output."""
    q, k, v = randn(1, 2, 4, 8, seed=1), randn(1, 2, 6, 8, seed=2), randn(1, 2, 6, 8, seed=3)
    out, lse = attend(q, k, v, 0.3)
    torch.testing.assert_close(merge([(out, lse)]), out, rtol=0, atol=1e-6)


# --------------------------------------------------------------------------------- windowed attention
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block", [3, 7, 512])
@pytest.mark.parametrize("window", [1, 4, 9, 30])
def test_windowed_attention_matches_dense_band(causal: bool, block: int, window: int) -> None:
    """Blocked window attention == dense attention masked to |i−j| < W (and j ≤ i), L=23 not a block
    multiple."""
    length = 23
    q, k, v = (randn(2, 2, length, 8, seed=s) for s in (21, 22, 23))
    out = windowed_attention(q, k, v, 0.35, window, causal, None, block=block)
    ref, _ = dense_attention(q, k, v, 0.35, dense_keep(length, window, causal))
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block", [3, 7, 512])
@pytest.mark.parametrize("window", [4, 30])
def test_windowed_attention_with_key_padding(causal: bool, block: int, window: int) -> None:
    """With the second row padded to 15 real tokens, real rows match the dense padded reference."""
    length, lengths = 23, [23, 15]
    q, k, v = (randn(2, 2, length, 8, seed=s) for s in (31, 32, 33))
    out = windowed_attention(q, k, v, 0.35, window, causal, padding_of(length, lengths), block=block)
    ref, _ = dense_attention(q, k, v, 0.35, dense_keep(length, window, causal, lengths))
    for b, n in enumerate(lengths):
        torch.testing.assert_close(out[b, :, :n], ref[b, :, :n], rtol=0, atol=1e-12)
    assert torch.isfinite(out).all()


# --------------------------------------------------------------------------------- SelfExtend
def self_extend_case(
    length: int, w: int, g: int, dim: int, base: float, batch: int = 1, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Rotate]:
    """(q0, k0) unrotated, (q, k) rotated at positions 0..L−1, v and the rotate for (dim, base)."""
    rotate = make_rotate(rope_inv_freq(dim, base))
    q0, k0, v = (randn(batch, 2, length, dim, seed=seed + s) for s in (1, 2, 3))
    pos = torch.arange(length)
    return q0, k0, rotate(q0, pos), rotate(k0, pos), v, rotate


SE_SHAPES = [(10, 4, 2), (37, 8, 3), (64, 16, 4), (20, 3, 5)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block", [3, 7, 512])
@pytest.mark.parametrize(("dim", "base"), [(8, 10000.0), (16, 1e6)])
@pytest.mark.parametrize(("length", "w", "g"), SE_SHAPES)
def test_self_extend_matches_dense_rule(
    length: int, w: int, g: int, dim: int, base: float, block: int, causal: bool
) -> None:
    """Fused SelfExtend on rotated q,k == dense reference with q0 · R(rel(i,j)) k0 for every pair."""
    q0, k0, q, k, v, rotate = self_extend_case(length, w, g, dim, base)
    scale = dim**-0.5
    out = self_extend_attention(q, k, v, scale, w, g, rotate, causal=causal, block=block)
    keep = dense_keep(length, None, True) if causal else None
    ref = dense_self_extend(q0, k0, v, scale, se_rel_matrix(length, w, g), rotate, keep)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block", [4, 512])
@pytest.mark.parametrize(("length", "w", "g"), [(37, 8, 3), (29, 5, 2)])
def test_self_extend_with_key_padding(length: int, w: int, g: int, block: int, causal: bool) -> None:
    """With the second row padded, real rows match the dense SelfExtend reference over real keys."""
    lengths = [length, length - 11]
    q0, k0, q, k, v, rotate = self_extend_case(length, w, g, 8, 10000.0, batch=2, seed=40)
    padding = padding_of(length, lengths)
    out = self_extend_attention(q, k, v, 0.3, w, g, rotate, causal=causal, padding=padding, block=block)
    keep = dense_keep(length, None, causal, lengths)
    ref = dense_self_extend(q0, k0, v, 0.3, se_rel_matrix(length, w, g), rotate, keep)
    for b, n in enumerate(lengths):
        torch.testing.assert_close(out[b, :, :n], ref[b, :, :n], rtol=0, atol=1e-5)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block", [3, 512])
@pytest.mark.parametrize("w", [1, 2, 5, 64])
def test_self_extend_group_one_is_plain_attention(w: int, block: int, causal: bool) -> None:
    """g=1 keeps every position exact: SelfExtend == plain attention on the rotated q,k, for any w."""
    length = 30
    _, _, q, k, v, rotate = self_extend_case(length, w, 1, 16, 10000.0, seed=50)
    out = self_extend_attention(q, k, v, 0.25, w, 1, rotate, causal=causal, block=block)
    ref, _ = dense_attention(q, k, v, 0.25, dense_keep(length, None, True) if causal else None)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("length", "w", "g"), [(30, 30, 2), (30, 31, 4), (17, 100, 3)])
def test_self_extend_window_covering_sequence_is_plain_attention(
    length: int, w: int, g: int, causal: bool
) -> None:
    """w ≥ L leaves no far key: SelfExtend == plain attention on the rotated q,k."""
    _, _, q, k, v, rotate = self_extend_case(length, w, g, 16, 10000.0, seed=60)
    out = self_extend_attention(q, k, v, 0.25, w, g, rotate, causal=causal, block=7)
    ref, _ = dense_attention(q, k, v, 0.25, dense_keep(length, None, True) if causal else None)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)


def test_self_extend_matches_paper_example_rows() -> None:
    """Rows 0 and 4 of SelfExtend (L=10, w=4, g=2) equal a dense reference built from the paper's table."""
    q0, k0, q, k, v, rotate = self_extend_case(10, 4, 2, 16, 10000.0, seed=70)
    out = self_extend_attention(q, k, v, 0.25, 4, 2, rotate, block=3)
    for row, rel in EXAMPLE_ROWS.items():
        logits = (q0[:, :, row : row + 1] * rotate(k0, torch.tensor(rel))).sum(-1) * 0.25
        ref = torch.softmax(logits, dim=-1)[:, :, None, :] @ v  # (B, H, 1, D)
        torch.testing.assert_close(out[:, :, row : row + 1], ref, rtol=0, atol=1e-5)


def realized_rel(length: int, w: int, g: int, causal: bool, block: int) -> torch.Tensor:
    """Read the relative positions back out of self_extend_attention.

    One frequency θ (the other rotary pairs have frequency 0 and are zero in q0, k0): q0 = e_{D/2},
    k0 = e_0 give logit[i, j] = sin(θ·rel[i, j]); V = identity (padded to D columns) makes the output the
    attention probabilities, so rel[i, j] = asin(log p[i, j] − log p[i, i]) / θ (θ·max|rel| < π/2 keeps
    asin invertible)."""
    max_rel = length // g + w
    theta = 0.5 / max_rel
    half = (length + 1) // 2
    dim = 2 * half
    inv_freq = torch.zeros(half, dtype=F64)
    inv_freq[0] = theta
    rotate = make_rotate(inv_freq)
    pos = torch.arange(length)
    q0 = torch.zeros(1, 1, length, dim, dtype=F64)
    q0[..., half] = 1.0
    k0 = torch.zeros(1, 1, length, dim, dtype=F64)
    k0[..., 0] = 1.0
    v = torch.eye(length, dim, dtype=F64)[None, None]
    probs = self_extend_attention(rotate(q0, pos), rotate(k0, pos), v, 1.0, w, g, rotate, causal, None, block)
    probs = probs[0, 0, :, :length]
    logp = probs.log()
    diff = (logp - logp.diagonal()[:, None]).clamp(-1, 1)
    rel = torch.where(probs > 0, torch.asin(diff) / theta, float("nan"))  # NaN: key never attended
    assert torch.allclose(rel[torch.isfinite(rel)], rel[torch.isfinite(rel)].round(), atol=1e-3)
    return rel.round()


def test_self_extend_realizes_paper_example() -> None:
    """The relative positions realized by the fused kernel for L=10, w=4, g=2 are the paper's."""
    rel = realized_rel(10, 4, 2, causal=False, block=3)
    for row, expected in EXAMPLE_ROWS.items():
        assert rel[row].long().tolist() == expected
    assert torch.equal(rel.long(), se_rel_matrix(10, 4, 2))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("length", "w", "g", "block"), [(37, 8, 3, 5), (64, 16, 4, 512), (20, 3, 5, 7)])
def test_self_extend_realizes_rule(length: int, w: int, g: int, block: int, causal: bool) -> None:
    """Every realized relative position equals the rule (causal: lower triangle realized, upper unused)."""
    rel = realized_rel(length, w, g, causal=causal, block=block)
    expected = se_rel_matrix(length, w, g)
    if causal:
        lower = torch.tril(torch.ones(length, length, dtype=torch.bool))
        assert torch.equal(rel[lower].long(), expected[lower])
        assert torch.isnan(rel[~lower]).all()  # future keys get probability exactly 0
    else:
        assert torch.equal(rel.long(), expected)


# --------------------------------------------------------------------------------- plans
def test_row_factor() -> None:
    """row_factor = max(1, ln n / ln L_o) / τ per row, None when it is 1 everywhere."""
    cpu = torch.device("cpu")
    assert AttentionPlan().row_factor(cpu) is None
    assert AttentionPlan(original_length=16, lengths=torch.tensor([3, 16])).row_factor(cpu) is None
    factor = AttentionPlan(tau=0.5, original_length=16, lengths=torch.tensor([40, 10])).row_factor(cpu)
    assert factor is not None
    torch.testing.assert_close(factor, torch.tensor([2 * math.log(40) / math.log(16), 2.0]))
    windowed = AttentionPlan(tau=0.5, original_length=16, lengths=torch.tensor([40])).row_factor(cpu, False)
    assert windowed is not None
    torch.testing.assert_close(windowed, torch.tensor([2.0]))


def test_attention_plan_context_restores_on_exit_and_error() -> None:
    """attention_plan sets the plan for its block, nests, and restores the previous one even on error."""
    outer, inner = AttentionPlan(tau=2.0), AttentionPlan(tau=3.0)
    assert attn._PLAN.get() is None
    with attention_plan(outer):
        assert attn._PLAN.get() is outer
        with pytest.raises(RuntimeError), attention_plan(inner):
            assert attn._PLAN.get() is inner
            raise RuntimeError
        assert attn._PLAN.get() is outer
        with attention_plan(None):
            assert attn._PLAN.get() is None
    assert attn._PLAN.get() is None


# --------------------------------------------------------------------------------- transformers hooks
DECODER = {"num_key_value_heads": 2, "max_position_embeddings": 128}  # with tiny_models.SIZES


@pytest.fixture(scope="module")
def bert() -> BertModel:
    """Tiny random BERT (2 layers, 4 heads of 8, 64 positions)."""
    return tiny_bert(64)


@pytest.fixture(scope="module")
def llama() -> LlamaModel:
    """Tiny random causal Llama with grouped-query attention (4 heads, 2 kv heads)."""
    return tiny(LlamaModel, LlamaConfig, **DECODER)


def run(
    model: torch.nn.Module,
    impl: str,
    ids: torch.Tensor,
    mask: torch.Tensor | None = None,
    plan: AttentionPlan | None = None,
) -> torch.Tensor:
    """Last hidden state of ``model`` under attention implementation ``impl`` and ``plan``."""
    model.set_attn_implementation(impl)
    with attention_plan(plan), torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state


@contextmanager
def logits_scaled(
    model: torch.nn.Module, factor: float, only: Callable[[torch.nn.Module], bool] = lambda m: True
) -> Iterator[None]:
    """Multiply the ``scaling`` (logit multiplier) of every attention module selected by ``only``."""
    modules = [m for m in model.modules() if isinstance(getattr(m, "scaling", None), float) and only(m)]
    assert modules
    saved = [m.scaling for m in modules]
    for m in modules:
        m.scaling = m.scaling * factor
    try:
        yield
    finally:
        for m, s in zip(modules, saved, strict=True):
            m.scaling = s


def ids_and_mask(length: int, lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids (B, L) and a right-padding attention mask."""
    ids = torch.randint(1, 100, (len(lengths), length), generator=torch.Generator().manual_seed(seed))
    return ids, padding_of(length, lengths).long()


def assert_real_rows_close(out: torch.Tensor, ref: torch.Tensor, lengths: list[int], atol: float) -> None:
    """Compare hidden states on real (non-padding) tokens only."""
    for b, n in enumerate(lengths):
        torch.testing.assert_close(out[b, :n], ref[b, :n], rtol=0, atol=atol)


def test_implementation_is_registered() -> None:
    """The name "ragidx" is registered as an attention function and as a mask function."""
    assert ALL_ATTENTION_FUNCTIONS[ATTN_IMPLEMENTATION] is attn._ragidx_attention
    assert ALL_MASK_ATTENTION_FUNCTIONS[ATTN_IMPLEMENTATION] is attn._ragidx_mask


@pytest.mark.parametrize("lengths", [[40], [40, 23]])
def test_bert_without_plan_is_sdpa(bert: BertModel, lengths: list[int]) -> None:
    """No plan: the ragidx implementation is exactly SDPA, with and without padding."""
    ids, mask = ids_and_mask(40, lengths)
    torch.testing.assert_close(
        run(bert, "ragidx", ids, mask), run(bert, "sdpa", ids, mask), rtol=0, atol=1e-6
    )


@pytest.mark.parametrize("lengths", [[40], [40, 23]])
def test_bert_neutral_plan_is_sdpa(bert: BertModel, lengths: list[int]) -> None:
    """A plan with τ=1 and no scaling runs ragidx's own kernels and still equals SDPA."""
    ids, mask = ids_and_mask(40, lengths, seed=1)
    out = run(bert, "ragidx", ids, mask, AttentionPlan())
    assert_real_rows_close(out, run(bert, "sdpa", ids, mask), lengths, atol=1e-5)


@pytest.mark.parametrize("lengths", [[40], [40, 23]])
def test_bert_tempscale(bert: BertModel, lengths: list[int]) -> None:
    """AttentionPlan(tau=0.5) == SDPA with every layer's logits divided by τ."""
    ids, mask = ids_and_mask(40, lengths, seed=2)
    out = run(bert, "ragidx", ids, mask, AttentionPlan(tau=0.5))
    with logits_scaled(bert, 1 / 0.5):
        ref = run(bert, "sdpa", ids, mask)
    assert_real_rows_close(out, ref, lengths, atol=1e-5)
    assert not torch.allclose(ref[0], run(bert, "sdpa", ids, mask)[0], atol=1e-3)  # τ is not a no-op


def test_bert_attention_scaling(bert: BertModel) -> None:
    """original_length=16, n=40 real tokens: logits multiplied by ln 40 / ln 16."""
    ids, mask = ids_and_mask(40, [40], seed=3)
    out = run(bert, "ragidx", ids, mask, AttentionPlan(original_length=16, lengths=torch.tensor([40])))
    with logits_scaled(bert, math.log(40) / math.log(16)):
        ref = run(bert, "sdpa", ids, mask)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)
    assert not torch.allclose(ref, run(bert, "sdpa", ids, mask), atol=1e-3)


def test_bert_attention_scaling_short_input_is_identity(bert: BertModel) -> None:
    """n ≤ L_o gives factor 1: the plan changes nothing."""
    ids, mask = ids_and_mask(12, [12], seed=4)
    out = run(bert, "ragidx", ids, mask, AttentionPlan(original_length=16, lengths=torch.tensor([12])))
    torch.testing.assert_close(out, run(bert, "sdpa", ids, mask), rtol=0, atol=1e-5)


def test_bert_attention_scaling_per_row(bert: BertModel) -> None:
    """In a padded batch each row gets its own factor (40 tokens: ln 40/ln 16; 10 tokens: 1), times 1/τ."""
    lengths = [40, 10]
    ids, mask = ids_and_mask(40, lengths, seed=5)
    plan = AttentionPlan(tau=0.8, original_length=16, lengths=torch.tensor(lengths))
    out = run(bert, "ragidx", ids, mask, plan)
    for b, n in enumerate(lengths):
        with logits_scaled(bert, max(1.0, math.log(n) / math.log(16)) / 0.8):
            ref = run(bert, "sdpa", ids[b : b + 1, :n], mask[b : b + 1, :n])
        # a padded batch against a lone row: float32 sums in another order (seen 1.02e-5 apart)
        torch.testing.assert_close(out[b, :n], ref[0], rtol=0, atol=5e-5)


def test_mask_hook_builds_no_square_mask(bert: BertModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a plan the mask hook returns None without padding and a (B,1,1,L) mask with it, never L×L."""
    seen: list[torch.Tensor | None] = []

    def spy(*args: object, **kwargs: object) -> torch.Tensor | None:
        result = attn._ragidx_mask(*args, **kwargs)
        seen.append(result)
        return result

    monkeypatch.setitem(ALL_MASK_ATTENTION_FUNCTIONS._global_mapping, ATTN_IMPLEMENTATION, spy)
    ids, mask = ids_and_mask(64, [64, 64], seed=6)
    run(bert, "ragidx", ids, mask, AttentionPlan(tau=0.7))
    assert seen and all(m is None for m in seen)
    seen.clear()
    lengths = [64, 30]
    ids, mask = ids_and_mask(64, lengths, seed=6)
    out = run(bert, "ragidx", ids, mask, AttentionPlan(tau=0.7))
    assert seen and all(m is not None and m.shape == (2, 1, 1, 64) for m in seen)
    with logits_scaled(bert, 1 / 0.7):
        assert_real_rows_close(out, run(bert, "sdpa", ids, mask), lengths, atol=1e-5)


@pytest.mark.parametrize("lengths", [[33], [33, 20]])
def test_llama_neutral_plan_is_sdpa(llama: LlamaModel, lengths: list[int]) -> None:
    """Causal GQA model under a τ=1 plan (ragidx's causal path, repeated kv heads) equals SDPA."""
    ids, mask = ids_and_mask(33, lengths, seed=7)
    out = run(llama, "ragidx", ids, mask, AttentionPlan(tau=1.0))
    assert_real_rows_close(out, run(llama, "sdpa", ids, mask), lengths, atol=1e-5)
    torch.testing.assert_close(run(llama, "ragidx", ids, mask), run(llama, "sdpa", ids, mask), rtol=0, atol=0)


def test_llama_tempscale(llama: LlamaModel) -> None:
    """Causal GQA model: AttentionPlan(tau=0.5) == SDPA with logits divided by τ."""
    lengths = [33, 20]
    ids, mask = ids_and_mask(33, lengths, seed=8)
    out = run(llama, "ragidx", ids, mask, AttentionPlan(tau=0.5))
    with logits_scaled(llama, 2.0):
        assert_real_rows_close(out, run(llama, "sdpa", ids, mask), lengths, atol=1e-5)


def _dense_self_extend_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """A transformers attention function: dense SelfExtend (w=4, g=2) from un-rotated q,k, causal."""
    rotate: Rotate = _DENSE_SE["rotate"]  # type: ignore[assignment]
    length = query.shape[2]
    pos = torch.arange(length)
    key, value = (repeat_kv(x, module.num_key_value_groups) for x in (key, value))
    q0, k0 = rotate(query.double(), -pos), rotate(key.double(), -pos)
    keep = dense_keep(length, None, True)
    if attention_mask is not None:
        keep = keep & attention_mask.bool()
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    rel = se_rel_matrix(length, _DENSE_SE["w"], _DENSE_SE["g"])  # type: ignore[arg-type]
    out = dense_self_extend(q0, k0, value.double(), scale, rel, rotate, keep).to(query.dtype)
    return out.transpose(1, 2).contiguous(), None


_DENSE_SE: dict[str, object] = {}


def test_llama_self_extend_hook_matches_dense(llama: LlamaModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """SelfExtend through the hook on a causal GQA model == a dense SelfExtend attention function."""
    rotate = make_rotate(llama.rotary_emb.inv_freq)
    monkeypatch.setitem(_DENSE_SE, "rotate", rotate)
    monkeypatch.setitem(_DENSE_SE, "w", 4)
    monkeypatch.setitem(_DENSE_SE, "g", 2)
    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS._global_mapping, "dense_se", _dense_self_extend_attention)
    monkeypatch.setitem(ALL_MASK_ATTENTION_FUNCTIONS._global_mapping, "dense_se", sdpa_mask)
    lengths = [30, 19]
    ids, mask = ids_and_mask(30, lengths, seed=9)
    plan = AttentionPlan(self_extend=SelfExtendSpec(window=4, group=2, rotate={None: rotate}))
    out = run(llama, "ragidx", ids, mask, plan)
    ref = run(llama, "dense_se", ids, mask)
    try:
        assert_real_rows_close(out, ref, lengths, atol=1e-5)
        assert not torch.allclose(out[0], run(llama, "sdpa", ids, mask)[0], atol=1e-3)
    finally:
        llama.set_attn_implementation("sdpa")


@pytest.mark.parametrize(("w", "g"), [(3, 1), (40, 2)])
def test_llama_self_extend_trivial_is_sdpa(llama: LlamaModel, w: int, g: int) -> None:
    """Through the hook, SelfExtend with g=1 or w ≥ L equals the plain model."""
    rotate = make_rotate(llama.rotary_emb.inv_freq)
    ids, mask = ids_and_mask(30, [30], seed=10)
    plan = AttentionPlan(self_extend=SelfExtendSpec(window=w, group=g, rotate={None: rotate}))
    torch.testing.assert_close(
        run(llama, "ragidx", ids, mask, plan), run(llama, "sdpa", ids, mask), rtol=0, atol=1e-5
    )


def test_qwen2_sliding_window_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Qwen2 with one full and one sliding-window (W=8) layer: τ applies to both, attention scaling only
    to the full layer (a window's span does not grow), and the window is kept."""
    model = tiny(
        Qwen2Model, Qwen2Config, use_sliding_window=True, sliding_window=8, max_window_layers=1, **DECODER
    )
    assert [layer.self_attn.sliding_window for layer in model.layers] == [None, 8]
    lengths = [30, 21]
    ids, mask = ids_and_mask(30, lengths, seed=11)
    plan = AttentionPlan(tau=0.5, original_length=16, lengths=torch.tensor([30, 30]))
    out = run(model, "ragidx", ids, mask, plan)
    full = math.log(30) / math.log(16)

    def is_full(m: torch.nn.Module) -> bool:
        return getattr(m, "sliding_window", None) is None

    with logits_scaled(model, 2.0), logits_scaled(model, full, only=is_full):
        assert_real_rows_close(out, run(model, "sdpa", ids, mask), lengths, atol=1e-5)


def test_mistral_sliding_window_under_plan() -> None:
    """Mistral (window passed as a kwarg, W=8) under a τ=1 plan equals SDPA with its sliding window."""
    model = tiny(MistralModel, MistralConfig, sliding_window=8, **DECODER)
    ids, mask = ids_and_mask(30, [30], seed=12)
    ref = run(model, "sdpa", ids, mask)
    torch.testing.assert_close(run(model, "ragidx", ids, mask, AttentionPlan()), ref, rtol=0, atol=1e-5)


def test_llama_decode_step_with_cache_under_plan(llama: LlamaModel) -> None:
    """A decode step over a KV cache under a plan is refused with a clear error (never wrong output)."""
    ids = torch.randint(1, 100, (1, 12), generator=torch.Generator().manual_seed(13))

    def decode(impl: str, plan: AttentionPlan | None) -> torch.Tensor:
        llama.set_attn_implementation(impl)
        with attention_plan(plan), torch.no_grad():
            cache = llama(input_ids=ids[:, :11], use_cache=True).past_key_values
            return llama(input_ids=ids[:, 11:], past_key_values=cache, use_cache=True).last_hidden_state

    with pytest.raises(ValueError, match="cached decoding"):
        decode("ragidx", AttentionPlan())
    decode("sdpa", None)  # the same steps run without a plan


def test_bert_caller_4d_mask_under_plan(bert: BertModel) -> None:
    """A caller-built 4D boolean padding mask under a τ=1 plan gives the same states as under SDPA."""
    lengths = [10, 6]
    ids, mask = ids_and_mask(10, lengths, seed=14)
    mask4d = mask.bool()[:, None, None, :].expand(2, 1, 10, 10)
    out = run(bert, "ragidx", ids, mask4d, AttentionPlan())
    assert_real_rows_close(out, run(bert, "sdpa", ids, mask4d), lengths, atol=1e-5)


@pytest.mark.parametrize("width", [13, 16, 21])
def test_efficient_bias_is_the_same_mask_aligned_and_expanded(width: int) -> None:
    """CUDA's memory-efficient kernel wants (B, H, Lq, Lk) with 8-aligned rows: the bias handed to
    it keeps every value, whatever slice of a larger mask it was."""
    q = torch.zeros(2, 3, 5, 4)
    k = torch.zeros(2, 3, width, 4)
    full = torch.randn(1, 1, 9, width + 11)
    full[full > 1] = float("-inf")
    bias = full[:, :, 2:7, 3 : 3 + width]  # a non-contiguous slice, as the blocked passes make
    prepared = efficient_bias(bias, q, k)
    assert prepared.shape == (2, 3, 5, width)
    assert all(stride % 8 == 0 for stride in prepared.stride()[:-1])
    assert prepared.storage_offset() % 8 == 0
    assert torch.equal(prepared, bias.expand(2, 3, 5, width))


# --------------------------------------------------------------------------------- whole-sequence kernels
@pytest.mark.parametrize(("lq", "lk"), [(12, 12), (12, 7), (7, 12)])
@pytest.mark.parametrize(("left", "right"), [(-1, -1), (2, 3), (-1, 0), (4, 0), (0, -1)])
def test_reference_local_is_flash_rule(lq: int, lk: int, left: int, right: int) -> None:
    """reference_local keeps j for query i exactly when i + Lk - Lq - left <= j <= i + Lk - Lq + right."""
    q, k, v = randn(1, 2, lq, 8, seed=81), randn(1, 2, lk, 8, seed=82), randn(1, 2, lk, 8, seed=83)
    out, lse = attn.reference_local(q, k, v, 0.3, left, right)
    keep = torch.zeros(lq, lk, dtype=torch.bool)
    for i in range(lq):
        for j in range(lk):
            lo = i + lk - lq - left if left >= 0 else -(10**9)
            hi = i + lk - lq + right if right >= 0 else 10**9
            keep[i, j] = lo <= j <= hi
    ref, _ = dense_attention(q, k, v, 0.3, keep)
    rows = keep.any(dim=-1)
    torch.testing.assert_close(out[:, :, rows], ref[:, :, rows], rtol=0, atol=1e-12)
    assert torch.isneginf(lse[:, :, ~rows]).all()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [1, 4, 9, 30])
def test_windowed_local_matches_dense_band(causal: bool, window: int) -> None:
    """The whole-sequence window pass == dense attention masked to |i−j| < W (and j ≤ i)."""
    length = 23
    q, k, v = (randn(2, 2, length, 8, seed=s) for s in (21, 22, 23))
    out = attn.windowed_local(q, k, v, 0.35, window, causal, attn.reference_local)
    ref, _ = dense_attention(q, k, v, 0.35, dense_keep(length, window, causal))
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("dim", "base"), [(8, 10000.0), (16, 1e6)])
@pytest.mark.parametrize(("length", "w", "g"), [*SE_SHAPES, (30, 30, 2), (17, 100, 3), (30, 5, 1)])
def test_self_extend_local_matches_dense_rule(
    length: int, w: int, g: int, dim: int, base: float, causal: bool
) -> None:
    """SelfExtend as three whole-sequence passes (band, far left, far right reversed) == the dense
    rule and == the blocked implementation."""
    q0, k0, q, k, v, rotate = self_extend_case(length, w, g, dim, base)
    scale = dim**-0.5
    out = attn.self_extend_local(q, k, v, scale, w, g, rotate, causal, attn.reference_local)
    keep = dense_keep(length, None, True) if causal else None
    ref = dense_self_extend(q0, k0, v, scale, se_rel_matrix(length, w, g), rotate, keep)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)
    blocked = self_extend_attention(q, k, v, scale, w, g, rotate, causal=causal, block=7)
    torch.testing.assert_close(out, blocked, rtol=0, atol=1e-6)


def test_local_kernel_only_for_cuda_half() -> None:
    """On the CPU (and for float32 anywhere) the blocked paths run: no flash kernel is offered."""
    assert attn.local_kernel(torch.zeros(1, 1, 4, 8)) is None
    assert attn.local_kernel(torch.zeros(1, 1, 4, 8, dtype=torch.bfloat16)) is None
    assert attn.local_kernel(torch.zeros(1, 1, 4, 8, device="meta", dtype=torch.bfloat16)) is None


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (benchmarks/gpu/)")


@CUDA
@pytest.mark.parametrize(("lq", "lk"), [(300, 300), (300, 200), (64, 1000)])
@pytest.mark.parametrize(("left", "right"), [(-1, -1), (16, 40), (-1, 0), (128, 0), (255, 255)])
@pytest.mark.parametrize("head", [64, 256])
def test_flash_local_matches_reference_on_cuda(lq: int, lk: int, left: int, right: int, head: int) -> None:
    """FlashAttention-2's window bounds are the rule reference_local spells out (rows with keys); the
    one bound it cannot express is refused."""
    g = torch.Generator().manual_seed(lq + lk + head)
    q, k, v = (torch.randn(2, 3, n, head, generator=g).cuda().bfloat16() for n in (lq, lk, lk))
    if lk <= right < lq - 1:  # the kernel would read the bound as none (see flash_local)
        with pytest.raises(ValueError, match="right bound"):
            attn.flash_local(q, k, v, head**-0.5, left, right)
        return
    out, lse = attn.flash_local(q, k, v, head**-0.5, left, right)
    ref, ref_lse = attn.reference_local(q.float(), k.float(), v.float(), head**-0.5, left, right)
    rows = torch.isfinite(ref_lse)
    torch.testing.assert_close(out[rows].float(), ref[rows], rtol=0, atol=3e-2)
    torch.testing.assert_close(lse[rows], ref_lse[rows], rtol=0, atol=3e-2)
    assert attn.local_kernel(q) is attn.flash_local


@CUDA
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("length", "w", "g"), [(4096, 512, 8), (3000, 1000, 4), (700, 64, 16)])
def test_self_extend_flash_matches_blocked_on_cuda(length: int, w: int, g: int, causal: bool) -> None:
    """On the GPU in bfloat16 the three flash passes agree with the blocked SelfExtend."""
    _, _, q, k, v, rotate = self_extend_case(length, w, g, 128, 1e6, seed=90)
    q, k, v = (t.cuda().bfloat16() for t in (q, k, v))
    fast = attn.self_extend_local(q, k, v, 128**-0.5, w, g, rotate, causal, attn.flash_local)
    blocked = self_extend_attention(q, k, v, 128**-0.5, w, g, rotate, causal=causal)
    torch.testing.assert_close(fast.float(), blocked.float(), rtol=0, atol=3e-2)


def test_flash_local_refuses_the_bound_it_would_misread() -> None:
    """More queries than keys and a right bound past the keys but short of Lq - 1: refused before
    any kernel runs (checked here on the CPU; the kernel itself needs CUDA)."""
    q, k = torch.zeros(1, 1, 300, 8), torch.zeros(1, 1, 200, 8)
    with pytest.raises(ValueError, match="right bound 255"):
        attn.flash_local(q, k, k, 0.3, 255, 255)
