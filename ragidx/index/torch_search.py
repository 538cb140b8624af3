"""Exact top-k search with torch: a Flat index's vectors held on a torch device (a CUDA GPU where
faiss has no GPU support), searched in blocks; ``ragidx.index.backend`` decides when it is used.

Owns :class:`TorchFlatSearch`: inner product (``IndexFlatIP``) or squared L2 (``IndexFlatL2``) over
the rows of a Flat index, each row's id looked up as FAISS's ``IndexIDMap`` does. In float32 it
returns FAISS Flat's results: the same scores (up to the last bit of the summation order, which
BLAS libraries choose) and the same ids, ties included. FAISS keeps each query's best ``k`` in a
heap that admits a row only when it beats the heap's worst strictly, and whose worst, among equal
scores, is the lowest row (inner product) or the highest (L2). So for L2 the rows kept are the
first ``k`` by (distance, row). For inner product they depend on the order rows arrive in: where
``v`` is the k-th best score, ``a`` rows score above it and row ``t`` is the k-th row, in row
order, scoring at least ``v``, the rows kept at score ``v`` are those of rank ``b`` to
``b + k - a - 1`` (in row order) where ``b`` rows above ``v`` come after ``t``: each of those
evicted the lowest row at ``v`` still kept. Results come sorted as FAISS sorts them: best first,
equal scores by descending row (inner product) or ascending row (L2). FAISS itself follows this
rule for ``k`` below ``faiss.cvar.distance_compute_min_k_reservoir`` (100); from there on it
collects candidates in a reservoir whose choice among rows tied exactly at the k-th score is
arbitrary; this class keeps the heap's rule for every ``k`` (the tests compare with FAISS for
``k < 100`` and with a simulation of its heap above).

How: each block of queries meets each block of rows in one matrix product; every score is
packed with its row into one int64 key (the float's bits mapped to an order-preserving integer,
then the row), so ``torch.topk`` over keys is exact and deterministic whatever its tie handling.
Each query keeps its ``2k`` best keys (inner product; ``k`` for L2), the most the rule above can
need; the rule is applied to them on the host.

Memory: on the device, the vectors (``n × d × 4`` bytes in float32, ``× 2`` in float16; L2 adds
``4n`` for the rows' norms), plus at most ``block_bytes`` (default 256 MiB) of working memory per
step (``bq`` queries × ``br`` rows of scores and keys, and each query's ``2k`` candidates: about
``32 · bq · (br + 2k)`` bytes; one query's alone when ``2k`` rows exceed the budget), whatever
``n`` and the number of queries; on the host, the results. Uploading converts one block of rows
at a time, so float16 never holds a float32 copy on the device.

float16 (``[index] gpu_dtype = "float16"``, opt-in): vectors and queries rounded to float16,
products summed in float32 (``torch.mm(..., out_dtype=float32)`` on CUDA, float32 arithmetic on
float16-rounded values elsewhere), so scores are float32 of float16 inputs and the ranking can
differ from FAISS's where scores are within float16's rounding; benchmarks/README.md gives the
measured recall. Full-precision float32 products even where the process enabled TF32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

import numpy as np
import torch

__all__ = ["MIN_K_RESERVOIR", "TorchFlatSearch", "faiss_order_ip", "ieee_float32", "plan_blocks"]

Metric = Literal["ip", "l2"]
Dtype = Literal["float32", "float16"]
MiB = 1 << 20
BLOCK_BYTES = 256 * MiB
BYTES_PER_CELL = 32  # a score (4), its int32 view and int64 key (16), the concatenated keys (8), spare
ROW_BLOCK = 65536  # rows per matrix product, at most
LOW = (1 << 32) - 1  # the low 32 bits of a key: the row, inverted (a smaller row is a larger key)
MAX_ROWS = 1 << 32
FLT_MAX = float(np.finfo(np.float32).max)
MIN_K_RESERVOIR = 100  # FAISS's distance_compute_min_k_reservoir: from this k on it uses a reservoir


class TorchFlatSearch:
    """Exact top-k over ``vectors`` (row ``i`` has id ``ids[i]``) on ``device``; see the module
    docstring for the results (FAISS Flat's) and the memory bound."""

    def __init__(
        self,
        vectors: np.ndarray,
        ids: np.ndarray,
        *,
        metric: Metric = "ip",
        device: str | torch.device = "cuda",
        dtype: Dtype = "float32",
        block_bytes: int = BLOCK_BYTES,
        row_block: int = ROW_BLOCK,
    ):
        if vectors.ndim != 2 or ids.shape != (len(vectors),):
            raise ValueError(f"vectors (n, d) and ids (n,) expected, got {vectors.shape} and {ids.shape}")
        if len(vectors) >= MAX_ROWS:
            raise ValueError(f"{len(vectors):,} vectors: the torch search holds fewer than 2**32 per index")
        if metric not in ("ip", "l2") or dtype not in ("float32", "float16"):
            raise ValueError(f"metric ip or l2 and dtype float32 or float16, not {metric!r} and {dtype!r}")
        if block_bytes < MiB or row_block < 1:
            raise ValueError(f"block_bytes {block_bytes} is below 1 MiB or row_block {row_block} below 1")
        self.metric: Metric = metric
        self.dtype: Dtype = dtype
        self.device = torch.device(device)
        self.block_bytes, self.row_block = block_bytes, row_block
        self.ids = np.ascontiguousarray(ids, dtype=np.int64)
        self.n, self.dim = vectors.shape
        self._torch_dtype = torch.float16 if dtype == "float16" else torch.float32
        self.vectors = torch.empty((self.n, self.dim), dtype=self._torch_dtype, device=self.device)
        self.norms = torch.empty(self.n if metric == "l2" else 0, dtype=torch.float32, device=self.device)
        for start in range(0, self.n, row_block):  # one block of float32 rows on the device at a time
            block = torch.as_tensor(np.ascontiguousarray(vectors[start : start + row_block], np.float32))
            block = block.to(self.device)
            self.vectors[start : start + len(block)] = block
            if metric == "l2":
                self.norms[start : start + len(block)] = (block * block).sum(dim=1)
        self._out_dtype = self.device.type == "cuda" and dtype == "float16" and _mm_out_dtype(self.device)

    @property
    def nbytes(self) -> int:
        """Device memory the vectors (and L2 norms) hold."""
        return self.vectors.numel() * self.vectors.element_size() + self.norms.numel() * 4

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, ids) per query, float32 and int64 (len(queries), k), as FAISS Flat
        returns them; past the last row, id -1 and score -FLT_MAX (inner product) or FLT_MAX (L2)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"queries of shape (n, {self.dim}) expected, got {queries.shape}")
        if k < 1:
            raise ValueError(f"k must be at least 1, not {k}")
        nq, found = len(queries), min(k, self.n)
        scores = np.full((nq, k), -FLT_MAX if self.metric == "ip" else FLT_MAX, dtype=np.float32)
        ids = np.full((nq, k), -1, dtype=np.int64)
        if nq == 0 or found == 0:
            return scores, ids
        keep = min(2 * found, self.n) if self.metric == "ip" else found
        batch, rows_per_block = plan_blocks(nq, keep, self.n, self.block_bytes, self.row_block)
        with ieee_float32(self.device), torch.inference_mode():
            for start in range(0, nq, batch):
                part = torch.as_tensor(queries[start : start + batch]).to(self.device)
                keys = self._best_keys(part, keep, rows_per_block).cpu().numpy()
                block_scores, rows = _decode(keys)
                if self.metric == "ip":
                    block_scores, rows = faiss_order_ip(block_scores, rows, found)
                else:
                    # keys hold -distance (best first, then the lowest row); 0.0 - x: no -0.0
                    block_scores = 0.0 - block_scores
                scores[start : start + batch, :found] = block_scores
                ids[start : start + batch, :found] = self.ids[rows]
        return scores, ids

    def _best_keys(self, queries: torch.Tensor, keep: int, rows_per_block: int) -> torch.Tensor:
        """Each query's ``keep`` largest keys (score, then lower row), sorted descending."""
        q = queries.to(self._torch_dtype)
        q_norms = (queries * queries).sum(dim=1, keepdim=True) if self.metric == "l2" else None
        best: torch.Tensor | None = None
        for start in range(0, self.n, rows_per_block):
            block = self.vectors[start : start + rows_per_block]
            scores = self._products(q, block)
            if q_norms is not None:  # FAISS: |x|² + |y|² - 2 x·y, negative round-off clamped to 0
                norms = self.norms[start : start + len(block)]
                scores = -torch.clamp(q_norms + norms - 2 * scores, min=0)
            keys = _keys(scores, start)
            if best is not None:
                keys = torch.cat([best, keys], dim=1)
            best = keys if keys.shape[1] <= keep else torch.topk(keys, keep, dim=1, sorted=False).values
        assert best is not None
        return torch.sort(best, dim=1, descending=True).values

    def _products(self, q: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
        """float32 (len(q), len(block)) inner products; float16 inputs summed in float32."""
        if self.dtype == "float32":
            return q @ block.T
        if self._out_dtype:
            return torch.mm(q, block.T, out_dtype=torch.float32)
        return q.float() @ block.float().T


def plan_blocks(nq: int, keep: int, n: int, block_bytes: int, row_block: int) -> tuple[int, int]:
    """(queries, rows) per step so that a step's working memory, about ``BYTES_PER_CELL`` per
    (query, row or candidate), stays within ``block_bytes``: as many queries as fit beside
    ``row_block`` rows and ``keep`` candidates each; where one query's candidates alone leave no
    room, one query at a time over fewer rows (at least 1,024: then ``BYTES_PER_CELL · (1,024 +
    keep)`` is the bound)."""
    rows = max(1, min(n, row_block))
    per_query = BYTES_PER_CELL * (rows + keep)
    batch = max(1, min(nq, block_bytes // per_query))
    if per_query > block_bytes:
        rows = max(1, min(rows, max(1024, block_bytes // BYTES_PER_CELL - keep)))
    return batch, rows


def faiss_order_ip(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """FAISS Flat's top-``k`` by inner product from each query's best candidates: ``scores`` and
    ``rows`` (nq, m), sorted by score descending then row ascending, holding every row above the
    k-th score and the lowest ``min(k, all)`` rows at it (``m = min(2k, n)`` does); the rule is in
    the module docstring. Returns (scores, rows) (nq, k) in FAISS's order: score descending, equal
    scores by descending row."""
    nq, m = scores.shape
    v = scores[:, k - 1 : k]
    above, at = scores > v, scores == v
    a = above.sum(axis=1, keepdims=True)
    reaching = np.sort(np.where(above | at, rows, np.iinfo(np.int64).max), axis=1)
    t = reaching[:, k - 1 : k]  # the k-th row, in row order, scoring at least v
    b = (above & (rows > t)).sum(axis=1, keepdims=True)  # rows above v after t: each evicted one at v
    rank = (
        np.arange(m)[None, :] - a
    )  # rank among the rows at v (contiguous after those above, rows ascending)
    kept = above | (at & (rank >= b) & (rank < b + k - a))
    picked_scores = scores[kept].reshape(nq, k)
    picked_rows = rows[kept].reshape(nq, k)
    order = np.lexsort((-picked_rows, -picked_scores), axis=1)
    return np.take_along_axis(picked_scores, order, axis=1), np.take_along_axis(picked_rows, order, axis=1)


def _keys(scores: torch.Tensor, first_row: int) -> torch.Tensor:
    """int64 keys ordered as (score, then lower row): the float's bits mapped to an integer of the
    same order in the high half (-0.0 counted as 0.0, as comparisons do), ``LOW - row`` in the low.
    Overwrites ``scores``."""
    bits = scores.add_(0.0).view(torch.int32)  # in place: ``scores`` is this step's own block
    flip = bits >> 31
    flip &= 0x7FFFFFFF
    bits ^= flip  # negative floats: every bit but the sign flipped
    del flip
    keys = bits.to(torch.int64)
    keys <<= 32
    keys |= LOW - torch.arange(
        first_row, first_row + scores.shape[1], device=scores.device, dtype=torch.int64
    )
    return keys


def _decode(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(scores float32, rows int64) of keys made by :func:`_keys`."""
    ordered = (keys >> 32).astype(np.int32)
    bits = ordered ^ ((ordered >> 31) & 0x7FFFFFFF)
    return bits.view(np.float32), LOW - (keys & LOW)


def _mm_out_dtype(device: torch.device) -> bool:
    """Whether this torch multiplies float16 matrices into float32 on ``device`` (CUDA, torch 2.8+)."""
    try:
        a = torch.ones((2, 2), dtype=torch.float16, device=device)
        return bool(torch.mm(a, a, out_dtype=torch.float32).dtype == torch.float32)
    except (TypeError, RuntimeError, NotImplementedError):
        return False


@contextlib.contextmanager
def ieee_float32(device: torch.device) -> Iterator[None]:
    """Full float32 matrix products on CUDA for the duration, where the process allowed TF32."""
    matmul = torch.backends.cuda.matmul
    if device.type != "cuda" or not matmul.allow_tf32:
        yield
        return
    matmul.allow_tf32 = False
    try:
        yield
    finally:
        matmul.allow_tf32 = True
