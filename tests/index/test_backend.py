"""Tests for ragidx.index.backend: which code searches, and that the torch backend, wired into
FaissIndex, ShardedFaissIndex, Index, ``ragidx info``/``query --json`` and the server's ``/info``,
returns what FAISS on the CPU returns. No GPU here: the machine is stubbed as one whose torch
device is the CPU, so the torch backend runs through the same code as on CUDA."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.errors import ConfigError
from ragidx.index import backend
from ragidx.index.backend import Machine, SearchBackend, choose, expected
from ragidx.index.config import FaissConfig
from ragidx.index.faiss_index import FaissIndex
from ragidx.index.shards import ShardedFaissIndex
from ragidx.ingestion.pipeline import add_embedded, ingest
from ragidx.read.document import Document
from tests.conftest import tiny_config, write_docs

ROOT = Path(__file__).resolve().parent.parent.parent
runner = CliRunner()
NO_GPU = Machine(faiss_gpus=0, cuda_devices=0)
TORCH_ON_CPU = Machine(faiss_gpus=0, cuda_devices=1, device_type="cpu")


@pytest.fixture()
def torch_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine, seen as one whose torch device (the CPU here) takes Flat searches."""
    monkeypatch.setattr(backend, "machine", lambda: TORCH_ON_CPU)


def _halves(n: int, dim: int = 8, seed: int = 0) -> np.ndarray:
    """Unit vectors of four ±0.5 entries: norms exactly 1, every inner product an exact multiple of
    0.25, so nine scores in all and ties everywhere."""
    rng = np.random.default_rng(seed)
    out = np.zeros((n, dim), dtype=np.float32)
    for row in out:
        row[rng.choice(dim, 4, replace=False)] = rng.choice([-0.5, 0.5], 4)
    return out


def test_the_rule() -> None:
    flat, hnsw = FaissConfig(), FaissConfig(factory="HNSW32")
    everything = Machine(faiss_gpus=2, cuda_devices=2)
    cuda = Machine(faiss_gpus=0, cuda_devices=1)
    assert choose(flat, True, everything) == SearchBackend("faiss-gpu")  # faiss-gpu stays first
    assert choose(hnsw, False, everything) == SearchBackend("faiss-gpu")
    assert choose(flat, True, cuda) == SearchBackend("torch", "float32", 1)
    assert choose(flat, True, cuda).label == "torch-cuda float32"
    half = FaissConfig(gpu_dtype="float16")
    assert choose(half, True, cuda).label == "torch-cuda float16"
    assert choose(hnsw, False, cuda) == SearchBackend("faiss-cpu")  # approximate: faiss on the CPU
    assert choose(flat, True, NO_GPU) == SearchBackend("faiss-cpu")
    never = FaissConfig(gpu="never")
    assert choose(never, True, everything) == choose(never, True, cuda) == SearchBackend("faiss-cpu")
    assert choose(FaissConfig(gpu="always"), True, cuda).torch
    assert SearchBackend("torch", cuda_devices=3).device(4) == "cuda:1"
    assert SearchBackend("torch", cuda_devices=1).device(4) == "cuda"


def test_always_without_a_gpu_path_is_one_clear_line() -> None:
    with pytest.raises(ConfigError, match="faiss has no GPU support .* and torch sees no CUDA device") as e:
        choose(FaissConfig(gpu="always"), True, NO_GPU)
    assert "\n" not in str(e.value) and "README: GPU search" in str(e.value)
    cuda = Machine(faiss_gpus=0, cuda_devices=1)
    with pytest.raises(ConfigError, match=r"torch searches only Flat indexes .* \(this one is HNSW32\)"):
        choose(FaissConfig(factory="HNSW32", gpu="always"), False, cuda)


@pytest.mark.usefixtures("torch_machine")
@pytest.mark.parametrize("k", [1, 10, 40, 99])
def test_a_flat_index_on_torch_returns_what_faiss_on_the_cpu_returns(k: int) -> None:
    vectors, queries = _halves(700), _halves(23, seed=1)
    ids = np.arange(700, dtype=np.int64) * 3 + 5
    on_torch = FaissIndex.create(8, FaissConfig())
    on_cpu = FaissIndex.create(8, FaissConfig(gpu="never"))
    for index in (on_torch, on_cpu):
        index.add(vectors, ids)
        index.remove(ids[::7])  # removals and additions after them change the rows' order
        index.add(_halves(50, seed=2), np.arange(50, dtype=np.int64) * 3 + 10_000)
    got, want = on_torch.search(queries, k), on_cpu.search(queries, k)
    assert on_torch.backend is not None and on_torch.backend.label == "torch-cpu float32"
    assert on_cpu.backend == SearchBackend("faiss-cpu")
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])
    on_torch.remove(ids[:3])  # a change drops the device copy; the next search sees it
    on_cpu.remove(ids[:3])
    np.testing.assert_array_equal(on_torch.search(queries, k)[1], on_cpu.search(queries, k)[1])


@pytest.mark.usefixtures("torch_machine")
@pytest.mark.parametrize("k", [1, 10, 60])
def test_a_sharded_flat_index_merges_as_faiss_index_shards_does(k: int) -> None:
    vectors, queries = _halves(900, seed=3), _halves(9, seed=4)
    ids = np.arange(900, dtype=np.int64) * 5 + 1
    on_torch = ShardedFaissIndex.create(8, FaissConfig(shards=3))
    on_cpu = ShardedFaissIndex.create(8, FaissConfig(shards=3, gpu="never"))
    for index in (on_torch, on_cpu):
        index.add(vectors, ids)
    got, want = on_torch.search(queries, k), on_cpu.search(queries, k)
    assert on_torch.search_backend().label == "torch-cpu float32"
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.usefixtures("torch_machine")
def test_approximate_factories_keep_faiss_on_the_cpu() -> None:
    index = FaissIndex.create(8, FaissConfig(factory="HNSW32"))
    index.add(_halves(40), np.arange(40, dtype=np.int64))
    index.search(_halves(2, seed=5), 3)
    assert index.backend == SearchBackend("faiss-cpu")
    refused = FaissIndex.create(8, FaissConfig(factory="HNSW32", gpu="always"))
    refused.add(_halves(40), np.arange(40, dtype=np.int64))
    with pytest.raises(ConfigError, match="torch searches only Flat indexes"):
        refused.search(_halves(2, seed=5), 3)


def test_an_index_searches_through_torch_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragidx.index.directory import Index
    from ragidx.index.manifest import ExternalEncoderInfo

    vectors = _halves(300, seed=6)
    documents = [Document(f"d{i:03d}", f"text {i}", "api") for i in range(300)]
    queries = _halves(4, seed=7)
    results = {}
    for name, here in (("faiss", NO_GPU), ("torch", TORCH_ON_CPU)):
        monkeypatch.setattr(backend, "machine", lambda here=here: here)
        index = Index.create(None, ExternalEncoderInfo(name="outside", dim=8))
        add_embedded(index, documents, vectors)
        assert index.search_backend is None  # nothing searched yet
        hits = index.search_by_vectors(["q"] * 4, queries, k=25, mode="dense")
        results[name] = [[(h.doc_id, h.score) for h in row] for row in hits]
        assert index.search_backend == {"faiss": "faiss-cpu", "torch": "torch-cpu float32"}[name]
    assert results["torch"] == results["faiss"]


def test_float16_is_recorded_only_where_chosen() -> None:
    assert "gpu_dtype" not in FaissConfig().model_dump(mode="json")  # manifests as before
    assert FaissConfig(gpu_dtype="float16").model_dump(mode="json")["gpu_dtype"] == "float16"
    with pytest.raises(ValueError, match="gpu_dtype"):
        FaissConfig(gpu_dtype="bfloat16")  # type: ignore[arg-type]


def test_expected_predicts_without_importing_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch")  # as in ragidx info, which starts without it
    monkeypatch.setattr(backend, "_nvidia_visible", lambda: True)
    monkeypatch.setattr(backend, "_torch_cuda_build", lambda: True)
    monkeypatch.setattr(backend, "_faiss_gpus", lambda: 0)
    assert expected(FaissConfig()) == "torch-cuda float32"
    assert expected(FaissConfig(factory="IVF256,Flat")) == "faiss-cpu"
    assert expected(FaissConfig(gpu="never")) == "faiss-cpu"
    monkeypatch.setattr(backend, "_torch_cuda_build", lambda: False)
    assert expected(FaissConfig(gpu="always")).startswith("none (gpu = 'always'")
    assert "torch" not in sys.modules


def test_info_and_query_json_and_the_server_report_the_backend(tmp_path: Path, tiny_model: Path) -> None:
    copy = Path(shutil.copytree(ROOT / "tests" / "fixtures" / "index-0.1" / "chunk", tmp_path / "old"))
    info = runner.invoke(app, ["info", str(copy), "--json"])
    assert info.exit_code == 0, info.output
    assert json.loads(info.stdout)["search_backend"] == expected(FaissConfig())
    table = runner.invoke(app, ["info", str(copy)])
    assert "search backend" in table.stdout and "expected on this machine" in table.stdout

    ingest(write_docs(tmp_path / "docs", 3), tmp_path / "ix", tiny_config(tiny_model))
    query = runner.invoke(app, ["query", "Document", "-i", str(tmp_path / "ix"), "--json", "--mode", "dense"])
    assert query.exit_code == 0, query.output
    hits = json.loads(query.stdout)
    assert hits and {h["search_backend"] for h in hits} == {"faiss-cpu"}

    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from ragidx.integrations.server import LiveIndex, create_app

    with TestClient(create_app(LiveIndex(tmp_path / "ix", reload_interval=0), threads=1)) as client:
        assert client.get("/info").json()["search_backend"] == "faiss-cpu"  # the warm-up searched
