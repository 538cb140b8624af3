"""Tests for ragidx.index.torch_search: the torch exact search returns FAISS Flat's ids and scores.

Everything runs on the CPU device through the code CUDA runs (rows and queries split into several
blocks by a small ``block_bytes`` and ``row_block``). References: FAISS's own ``IndexFlatIP`` /
``IndexFlatL2`` behind ``IndexIDMap2``; for ``k >= 100``, where FAISS collects candidates in a
reservoir whose choice among exactly tied rows is arbitrary, a plain simulation of FAISS's heap.
"""

from __future__ import annotations

import heapq

import faiss
import numpy as np
import pytest
import torch

from ragidx.index.torch_search import (
    BYTES_PER_CELL,
    MIN_K_RESERVOIR,
    TorchFlatSearch,
    plan_blocks,
)

MiB = 1 << 20
FLT_MAX = float(np.finfo(np.float32).max)


def _unit(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _ids(n: int) -> np.ndarray:
    """Large, non-contiguous, descending int64 ids: rows and ids never coincide."""
    return 10**12 + 7 * np.arange(n, dtype=np.int64)[::-1]


def _faiss(vectors: np.ndarray, ids: np.ndarray, metric: str) -> faiss.Index:
    dim = vectors.shape[1]
    index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim) if metric == "ip" else faiss.IndexFlatL2(dim))
    index.add_with_ids(vectors, ids)
    return index


def _torch(vectors: np.ndarray, ids: np.ndarray, metric: str, row_block: int = 300) -> TorchFlatSearch:
    return TorchFlatSearch(vectors, ids, metric=metric, device="cpu", block_bytes=MiB, row_block=row_block)  # type: ignore[arg-type]


def _tied(n: int, dim: int, nq: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Small integers: every product is exact in float32, whatever the summation order, and most
    scores are shared by many rows."""
    rng = np.random.default_rng(seed)
    levels = int(rng.integers(1, 4))
    vectors = rng.integers(-levels, levels + 1, (n, dim)).astype(np.float32)
    queries = rng.integers(-1, 2, (nq, dim)).astype(np.float32)
    return vectors, queries


def _heap_reference(vectors: np.ndarray, queries: np.ndarray, k: int, metric: str) -> np.ndarray:
    """FAISS's heap, simulated one row at a time: a row enters only when it beats the worst kept
    strictly; the worst, among equal scores, is the lowest row (inner product) or the highest (L2);
    results best first, equal scores by descending row (inner product) or ascending (L2)."""
    out = []
    for q in queries:
        heap: list[tuple[float, int]] = []  # min-heap on (goodness, tiebreak): heap[0] is the worst
        for row, x in enumerate(vectors):
            item = (float(x @ q), row) if metric == "ip" else (-float(((x - q) ** 2).sum()), -row)
            if len(heap) < k:
                heapq.heappush(heap, item)
            elif item[0] > heap[0][0]:
                heapq.heapreplace(heap, item)
        best = sorted(heap, reverse=True)
        out.append([row if metric == "ip" else -row for _, row in best])
    return np.asarray(out, dtype=np.int64)


def _assert_same_ids_up_to_rounding(found: np.ndarray, want: np.ndarray, want_scores: np.ndarray) -> None:
    """Equal ids, but for the order of rows whose scores differ by less than the last bits that
    BLAS's summation order changes (FAISS and torch each use their own): within a run of such
    scores, the same set."""
    for row in range(len(want)):
        gap = np.abs(np.diff(want_scores[row])) > 1e-5
        runs = np.concatenate([[0], np.cumsum(gap)])
        for run in np.unique(runs):
            inside = runs == run
            assert set(found[row, inside]) == set(want[row, inside]), f"query {row}: {want[row, inside]}"
    assert (found == want).mean() > 0.99


@pytest.mark.parametrize("metric", ["ip", "l2"])
@pytest.mark.parametrize(("nq", "k"), [(1, 1), (7, 10), (25, 10), (3, 99), (30, 1000)])
def test_random_vectors_give_faiss_flat_ids_and_scores(metric: str, nq: int, k: int) -> None:
    vectors, ids = _unit(3000, 48, seed=0), _ids(3000)
    queries = _unit(nq, 48, seed=1)
    want_scores, want_ids = _faiss(vectors, ids, metric).search(queries, k)
    scores, found = _torch(vectors, ids, metric).search(queries, k)
    assert found.dtype == np.int64 and scores.dtype == np.float32
    np.testing.assert_allclose(scores, want_scores, rtol=0, atol=2e-6)
    _assert_same_ids_up_to_rounding(found, want_ids, want_scores)


@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_tied_scores_give_faiss_flat_ids_exactly(metric: str) -> None:
    """Ties everywhere (inner product: which tied rows FAISS keeps depends on the order rows arrive
    in), several blocks of rows and queries, k below FAISS's reservoir threshold."""
    for seed in range(24):
        rng = np.random.default_rng(100 + seed)
        n, dim = int(rng.integers(1, 2500)), int(rng.integers(1, 5))
        nq, k = int(rng.choice([1, 5, 21])), int(rng.choice([1, 2, 10, 37, MIN_K_RESERVOIR - 1]))
        vectors, queries = _tied(n, dim, nq, seed)
        ids = _ids(n)
        want_scores, want_ids = _faiss(vectors, ids, metric).search(queries, k)
        row_block = int(rng.choice([7, 64, 1000]))
        scores, found = _torch(vectors, ids, metric, row_block).search(queries, k)
        np.testing.assert_array_equal(found, want_ids, err_msg=f"seed {seed}: n {n} k {k}")
        np.testing.assert_array_equal(scores, want_scores, err_msg=f"seed {seed}")


@pytest.mark.parametrize("metric", ["ip", "l2"])
@pytest.mark.parametrize("k", [MIN_K_RESERVOIR, 257, 1000])
def test_large_k_keeps_the_heap_rule_and_faiss_scores(metric: str, k: int) -> None:
    vectors, queries = _tied(2400, 3, 3, seed=k)
    ids = _ids(len(vectors))
    scores, found = _torch(vectors, ids, metric).search(queries, k)
    np.testing.assert_array_equal(found, ids[_heap_reference(vectors, queries, k, metric)])
    want_scores, want_ids = _faiss(vectors, ids, metric).search(queries, k)
    np.testing.assert_array_equal(scores, want_scores)  # the same scores, in the same places
    for row in range(len(queries)):  # the same ids, but for which of the rows tied at the k-th score
        inside = scores[row] != scores[row, -1]
        np.testing.assert_array_equal(found[row, inside], want_ids[row, inside])


def test_fewer_rows_than_k_pad_as_faiss_does() -> None:
    vectors, queries = _unit(5, 8, seed=2), _unit(3, 8, seed=3)
    ids = _ids(5)
    for metric in ("ip", "l2"):
        want_scores, want_ids = _faiss(vectors, ids, metric).search(queries, 9)
        scores, found = _torch(vectors, ids, metric).search(queries, 9)
        np.testing.assert_array_equal(found, want_ids)
        np.testing.assert_allclose(scores, want_scores, rtol=1e-6, atol=1e-6)
    scores, found = _torch(np.zeros((0, 8), np.float32), np.zeros(0, np.int64), "ip").search(queries, 2)
    assert (found == -1).all() and (scores == -FLT_MAX).all()


def test_float16_is_close_to_float32() -> None:
    vectors, ids, queries = _unit(20000, 64, seed=4), _ids(20000), _unit(50, 64, seed=5)
    exact_scores, exact = _torch(vectors, ids, "ip", row_block=4096).search(queries, 10)
    half = TorchFlatSearch(vectors, ids, device="cpu", dtype="float16", block_bytes=MiB, row_block=4096)
    assert half.vectors.dtype == torch.float16 and half.nbytes == 20000 * 64 * 2
    scores, found = half.search(queries, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, exact, strict=True)])
    assert recall >= 0.97
    np.testing.assert_allclose(scores, exact_scores, atol=2e-3)


def test_working_memory_per_step_stays_within_block_bytes() -> None:
    for nq, keep, n in [(1, 2, 10), (1000, 20, 10**6), (10**5, 2000, 10**7), (3, 2 * 10**6, 10**7)]:
        for budget in (MiB, 256 * MiB):
            batch, rows = plan_blocks(nq, keep, n, budget, 65536)
            assert 1 <= batch <= nq and 1 <= rows <= min(n, 65536)
            assert BYTES_PER_CELL * batch * (rows + keep) <= max(budget, BYTES_PER_CELL * (1024 + keep))


def test_the_device_code_runs_on_meta_without_host_copies() -> None:
    """The blocked search of one batch of queries touches no data: shapes only (as on CUDA, where
    a host round trip per block would serialise the GPU)."""
    search = TorchFlatSearch(_unit(300, 16, seed=6), _ids(300), device="meta", row_block=64)
    assert search.vectors.device.type == "meta"
    keys = search._best_keys(torch.empty((5, 16), device="meta"), keep=20, rows_per_block=64)
    assert keys.shape == (5, 20) and keys.dtype == torch.int64


def test_bad_input_is_refused_with_one_line() -> None:
    search = _torch(_unit(4, 8, seed=7), _ids(4), "ip")
    with pytest.raises(ValueError, match=r"queries of shape \(n, 8\) expected"):
        search.search(np.zeros((2, 5), np.float32), 1)
    with pytest.raises(ValueError, match="k must be at least 1"):
        search.search(np.zeros((2, 8), np.float32), 0)
    with pytest.raises(ValueError, match="vectors \\(n, d\\) and ids \\(n,\\) expected"):
        TorchFlatSearch(np.zeros((3, 2), np.float32), np.zeros(2, np.int64), device="cpu")
