"""Tests for ragidx.index.faiss_index: FaissConfig validation and FaissIndex add/search/remove/serialise."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from ragidx.errors import ConfigError, IndexFormatError
from ragidx.index.config import FaissConfig
from ragidx.index.faiss_index import FaissIndex

DIM = 16
BASE_ID = 10**12


def _unit(n: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    """``n`` random L2-normalised float32 vectors."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _ids(n: int) -> np.ndarray:
    """Large, non-contiguous int64 ids (beyond int32, not positions)."""
    return BASE_ID + 7 * np.arange(n, dtype=np.int64)[::-1]


def _numpy_topk(
    base: np.ndarray, ids: np.ndarray, queries: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k; asserts there is no near-tie at the cut or inside the ranking."""
    scores = queries @ base.T
    order = np.argsort(-scores, axis=1)
    top = np.take_along_axis(scores, order, axis=1)
    gaps = -np.diff(top[:, : k + 1], axis=1)
    assert gaps.min() > 1e-5, "test data has near-ties; pick another seed"
    return top[:, :k], ids[order[:, :k]]


def _flat(n: int = 200, seed: int = 0) -> tuple[FaissIndex, np.ndarray, np.ndarray]:
    base, ids = _unit(n, seed=seed), _ids(n)
    index = FaissIndex.create(DIM, FaissConfig())
    index.add(base, ids)
    return index, base, ids


def test_flat_search_matches_numpy_topk() -> None:
    index, base, ids = _flat()
    queries = _unit(5, seed=1)
    scores, found = index.search(queries, 10)
    want_scores, want_ids = _numpy_topk(base, ids, queries, 10)
    assert found.dtype == np.int64
    np.testing.assert_array_equal(found, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=0, atol=1e-5)


def test_ids_are_the_given_large_ids() -> None:
    index, base, ids = _flat(50)
    assert index.ntotal == 50
    assert index.dim == DIM
    np.testing.assert_array_equal(index.ids(), ids)
    assert index.ids().dtype == np.int64
    _, found = index.search(base[[3, 17]], 1)
    assert found[:, 0].tolist() == [int(ids[3]), int(ids[17])]
    assert found[0, 0] > 2**31


def test_to_bytes_from_bytes_round_trip_gives_identical_results() -> None:
    index, _, ids = _flat()
    queries = _unit(4, seed=2)
    before = index.search(queries, 7)
    data = index.to_bytes()
    assert isinstance(data, bytes)
    restored = FaissIndex.from_bytes(data, FaissConfig(), "idx/vectors.faiss")
    assert restored.ntotal == 200
    np.testing.assert_array_equal(restored.ids(), ids)
    after = restored.search(queries, 7)
    np.testing.assert_array_equal(after[1], before[1])
    np.testing.assert_array_equal(after[0], before[0])
    assert restored.to_bytes() == data


@pytest.mark.parametrize("data", [b"garbage", b""])
def test_from_bytes_garbage_raises_index_format_error_naming_source(data: bytes) -> None:
    with pytest.raises(IndexFormatError, match=r"^some/index\.faiss: corrupt FAISS index"):
        FaissIndex.from_bytes(data, FaissConfig(), "some/index.faiss")


def test_from_bytes_truncated_raises_index_format_error() -> None:
    index, _, _ = _flat(20)
    data = index.to_bytes()
    with pytest.raises(IndexFormatError, match=r"^cut\.faiss: corrupt FAISS index"):
        FaissIndex.from_bytes(data[: len(data) // 2], FaissConfig(), "cut.faiss")


def test_from_bytes_rejects_index_without_id_map() -> None:
    plain = faiss.IndexFlatIP(DIM)
    plain.add(_unit(5))
    data = faiss.serialize_index(plain).tobytes()
    with pytest.raises(IndexFormatError, match=r"plain\.faiss"):
        FaissIndex.from_bytes(data, FaissConfig(), "plain.faiss").ids()


def test_invalid_factory_raises_config_error() -> None:
    with pytest.raises(ConfigError, match=r"FAISS factory 'NotAFactory' is not valid for 16-d vectors"):
        FaissIndex.create(DIM, FaissConfig(factory="NotAFactory"))


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("IDMap,Flat", "Flat"),
        ("IDMap2,HNSW32", "HNSW32"),
        ("  IDMap2,IVF4,Flat ", "IVF4,Flat"),
        ("Flat", "Flat"),
    ],
)
def test_factory_validator_strips_idmap_prefix(given: str, stored: str) -> None:
    assert FaissConfig(factory=given).factory == stored


@pytest.mark.parametrize("factory", ["", "   ", "IDMap2,"])
def test_factory_validator_rejects_empty(factory: str) -> None:
    with pytest.raises(ValueError, match="empty FAISS factory string"):
        FaissConfig(factory=factory)


def test_config_defaults_and_extra_forbidden() -> None:
    config = FaissConfig()
    assert (config.factory, config.gpu, config.search_params) == ("Flat", "auto", "")
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        FaissConfig(nprobe=4)  # type: ignore[call-arg]


def test_stripped_idmap_factory_builds_a_working_index() -> None:
    index = FaissIndex.create(DIM, FaissConfig(factory="IDMap,Flat"))
    base = _unit(10)
    index.add(base, _ids(10))
    _, found = index.search(base[:1], 1)
    assert found[0, 0] == _ids(10)[0]


def test_hnsw_remove_rebuilds_without_removed_ids() -> None:
    n = 120
    base, ids = _unit(n, seed=3), _ids(n)
    index = FaissIndex.create(DIM, FaissConfig(factory="HNSW32"))
    index.add(base, ids)
    with pytest.raises(RuntimeError):  # the rebuild path is the one under test
        faiss.downcast_index(index.index.index).remove_ids(np.array([ids[0]], dtype=np.int64))
    gone = ids[::3]
    index.remove(gone)
    keep_mask = ~np.isin(ids, gone)
    assert index.ntotal == n - len(gone) == int(keep_mask.sum())
    assert sorted(index.ids().tolist()) == sorted(ids[keep_mask].tolist())
    _, found = index.search(base, index.ntotal)
    assert not set(found.ravel().tolist()) & set(gone.tolist())
    _, top1 = index.search(base[keep_mask], 1)
    np.testing.assert_array_equal(top1[:, 0], ids[keep_mask])
    # a later add still works and removed ids stay gone
    index.add(_unit(3, seed=9), np.array([1, 2, 3], dtype=np.int64))
    assert index.ntotal == n - len(gone) + 3
    assert not set(index.ids().tolist()) & set(gone.tolist())


def test_hnsw_remove_everything_leaves_empty_index() -> None:
    base, ids = _unit(10), _ids(10)
    index = FaissIndex.create(DIM, FaissConfig(factory="HNSW32"))
    index.add(base, ids)
    index.remove(ids)
    assert index.ntotal == 0
    assert index.ids().tolist() == []
    _, found = index.search(base[:2], 5)
    assert found.tolist() == [[-1], [-1]]


def test_flat_remove_and_missing_ids() -> None:
    index, base, ids = _flat(30)
    index.remove(np.array([ids[0], ids[5], 42], dtype=np.int64))  # 42 is not present
    assert index.ntotal == 28
    assert set(index.ids().tolist()) == set(ids.tolist()) - {int(ids[0]), int(ids[5])}
    _, found = index.search(base, 28)
    assert int(ids[0]) not in found and int(ids[5]) not in found
    index.remove(np.zeros(0, dtype=np.int64))
    assert index.ntotal == 28


def count_removal_passes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets one item each time a FAISS index applies its queued removals."""
    passes: list[int] = []
    real = FaissIndex._remove_queued

    def counted(self: FaissIndex) -> None:
        passes.append(1)
        real(self)

    monkeypatch.setattr(FaissIndex, "_remove_queued", counted)
    return passes


@pytest.mark.parametrize("factory", ["Flat", "HNSW32", "IVF4,Flat"])
def test_removals_are_queued_and_done_in_one_pass(factory: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replacing n documents removes their vectors one document at a time: FAISS removes (or
    rebuilds) once, at the next read, not n times (each O(index size))."""
    n = 300
    base, ids = _unit(n, seed=5), _ids(n)
    index = FaissIndex.create(DIM, FaissConfig(factory=factory))
    index.add(base, ids)
    passes = count_removal_passes(monkeypatch)
    for k in range(0, 60, 2):
        index.remove(ids[k : k + 2])
        index.add(base[k : k + 2], ids[k : k + 2] + 1)  # the new versions, under new ids
    assert passes == []
    kept = np.concatenate([ids[60:], ids[:60] + 1])
    assert index.ntotal == n and sorted(index.ids().tolist()) == sorted(kept.tolist())
    assert passes == [1]
    index.remove(ids[60:62])
    index.add(base[60:61], ids[60:61])  # an id queued for removal comes back: removed first
    assert passes == [1, 1] and index.ntotal == n - 1
    _, top1 = index.search(base[60:61], 1)
    assert top1[0, 0] == ids[60]


def test_ivf_trains_on_first_add_and_searches_exactly() -> None:
    n = 400
    base, ids = _unit(n, seed=4), _ids(n)
    index = FaissIndex.create(DIM, FaissConfig(factory="IVF4,Flat"))
    assert not index.index.is_trained
    index.add(base, ids)
    assert index.index.is_trained
    assert index.ntotal == n
    queries = _unit(3, seed=5)
    scores, found = index.search(queries, 5)
    # default nprobe = min(nlist, 32) = 4 = every list, so IVF4 search is exhaustive
    assert faiss.extract_index_ivf(index.searcher().index).nprobe == 4
    want_scores, want_ids = _numpy_topk(base, ids, queries, 5)
    np.testing.assert_array_equal(found, want_ids)
    np.testing.assert_allclose(scores, want_scores, atol=1e-5)


@pytest.mark.parametrize("factory", ["IVF4,Flat", "IVF4,PQ4x4"])
def test_ivf_removal_keeps_every_other_vector_under_its_id(factory: str) -> None:
    """IDMap2's own removal renumbers ids the IVF lists still hold: later searches returned the
    wrong ids. Removal rebuilds the IVF from the kept vectors without retraining."""
    n = 400
    base, ids = _unit(n, seed=4), _ids(n)
    index = FaissIndex.create(DIM, FaissConfig(factory=factory))
    index.add(base, ids)
    centroids = faiss.extract_index_ivf(index.index.index).quantizer.reconstruct_n(0, 4)
    index.remove(ids[::5])
    keep = np.ones(n, dtype=bool)
    keep[::5] = False
    quantizer = faiss.extract_index_ivf(index.index.index).quantizer
    np.testing.assert_array_equal(quantizer.reconstruct_n(0, 4), centroids)  # not retrained
    assert index.ntotal == keep.sum() and set(index.ids()) == set(ids[keep])
    approx = index.reconstruct(ids[keep][:20])
    assert np.abs(approx - base[keep][:20]).max() < (1e-6 if factory.endswith("Flat") else 0.8)
    if factory.endswith("Flat"):
        queries = _unit(3, seed=5)
        scores, found = index.search(queries, 5)
        want_scores, want_ids = _numpy_topk(base[keep], ids[keep], queries, 5)
        np.testing.assert_array_equal(found, want_ids)
        np.testing.assert_allclose(scores, want_scores, atol=1e-5)


def test_ivf_too_few_training_vectors_raises_config_error() -> None:
    index = FaissIndex.create(DIM, FaissConfig(factory="IVF256,Flat"))
    with pytest.raises(ConfigError, match=r"'IVF256,Flat' could not be trained on 10 vectors") as info:
        index.add(_unit(10), _ids(10))
    assert "Number of training points (10)" in str(info.value)
    assert index.ntotal == 0


def test_search_with_k_larger_than_ntotal() -> None:
    index, base, ids = _flat(6)
    queries = _unit(2, seed=6)
    scores, found = index.search(queries, 100)
    assert found.shape == scores.shape == (2, 6)
    _, want_ids = _numpy_topk(base, ids, queries, 5)
    np.testing.assert_array_equal(found[:, :5], want_ids)
    assert [sorted(row) for row in found.tolist()] == [sorted(ids.tolist())] * 2


def test_search_on_empty_index_returns_minus_one() -> None:
    index = FaissIndex.create(DIM, FaissConfig())
    _, found = index.search(_unit(3), 10)
    assert found.tolist() == [[-1], [-1], [-1]]


def test_add_empty_is_a_no_op() -> None:
    index = FaissIndex.create(DIM, FaissConfig(factory="IVF4,Flat"))
    index.add(np.zeros((0, DIM), dtype=np.float32), np.zeros(0, dtype=np.int64))
    assert index.ntotal == 0
    assert not index.index.is_trained


@pytest.mark.parametrize(
    ("factory", "params"), [("Flat", "nprobe=4"), ("Flat", "efSearch=16"), ("HNSW32", "nprobe=4")]
)
def test_search_params_wrong_for_factory_raise_config_error(factory: str, params: str) -> None:
    # faiss's ParameterSpace refuses ("could not set parameter ..."), it does not silently accept
    index = FaissIndex.create(DIM, FaissConfig(factory=factory, search_params=params))
    index.add(_unit(20), _ids(20))
    with pytest.raises(ConfigError, match=rf"search parameters '{params}' do not apply to '{factory}'"):
        index.search(_unit(1), 3)


def test_search_params_are_applied_and_default_ef_search() -> None:
    base = _unit(50)
    explicit = FaissIndex.create(DIM, FaissConfig(factory="HNSW32", search_params="efSearch=40"))
    explicit.add(base, _ids(50))
    explicit.search(base[:1], 1)
    assert faiss.downcast_index(explicit.searcher().index).hnsw.efSearch == 40
    default = FaissIndex.create(DIM, FaissConfig(factory="HNSW32"))
    default.add(base, _ids(50))
    default.search(base[:1], 1)
    assert faiss.downcast_index(default.searcher().index).hnsw.efSearch == 128


@pytest.mark.skipif(faiss.get_num_gpus() > 0 and hasattr(faiss, "StandardGpuResources"), reason="has a GPU")
def test_gpu_always_without_gpu_raises_config_error_at_search() -> None:
    index = FaissIndex.create(DIM, FaissConfig(gpu="always"))
    index.add(_unit(5), _ids(5))  # creating and adding are fine
    with pytest.raises(ConfigError, match="gpu = 'always' but faiss has no GPU support or no GPU is visible"):
        index.search(_unit(1), 1)
    assert index.on_gpu is False
