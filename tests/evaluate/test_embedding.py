"""Tests for ragidx.evaluate.embedding, on a tiny random model: cache keys, windows shared between
strategies, one embedding run for late variants, resuming from flushed embeddings."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from ragidx.evaluate import embedding
from ragidx.evaluate.report import read_results
from ragidx.evaluate.runner import run_grid
from ragidx.search.trec import read_run_file
from tests.conftest import write_qmsum
from tests.evaluate.grids import tiny_grid

pytestmark = pytest.mark.slow  # every test runs embedding grids (seconds each)


def test_dtype_is_recorded_and_keys_the_cache(tiny_model: Path, tmp_path: Path) -> None:
    """bfloat16 vectors never serve a float32 run; float32 keeps the keys ``auto`` had on CPU."""
    auto = run_grid(tiny_grid(tiny_model, tmp_path, ["chunk"]), command="a").records[0]
    assert auto.hardware.dtype == "float32"
    same = tiny_grid(tiny_model, tmp_path, ["chunk"], dtype="float32", out=str(tmp_path / "f32"))
    assert run_grid(same, command="b").records[0].timing.docs_cached == 100
    half = tiny_grid(tiny_model, tmp_path, ["chunk"], dtype="bfloat16", out=str(tmp_path / "bf16"))
    record = run_grid(half, command="c").records[0]
    assert record.hardware.dtype == "bfloat16"
    assert record.timing.docs_embedded == 100 and record.timing.queries_cached == 0
    again = run_grid(half.model_copy(update={"force": True}), command="d").records[0]
    assert again.timing.docs_cached == 100 and again.metrics == pytest.approx(record.metrics)


def test_strategies_share_the_windows_they_have_in_common(tiny_model: Path, tmp_path: Path) -> None:
    """Plain windows are cached one by one: truncate's window is chunk's first, pcw embeds only the
    windows chunk did not; and vectors put together from the cache equal a fresh run's."""
    chunk = run_grid(tiny_grid(tiny_model, tmp_path, ["chunk"]), command="a").records[0]
    three = tiny_grid(tiny_model, tmp_path, ["chunk", "truncate", "pcw"])
    truncate, pcw = run_grid(three, command="b").records[1:]
    assert truncate.timing.docs_cached == 100 and truncate.timing.tokens_embedded == 0
    fresh = tiny_grid(tiny_model, tmp_path, ["pcw"], cache_dir=None, out=str(tmp_path / "fresh"))
    alone = run_grid(fresh, command="c").records[0]
    assert 0 < pcw.timing.tokens_embedded < alone.timing.tokens_embedded  # the shared windows are skipped
    assert pcw.timing.docs_embedded == 100  # each document still had windows of its own to embed
    assert pcw.metrics == pytest.approx(alone.metrics)
    cached_run = read_run_file(tmp_path / "out" / pcw.run_file)
    fresh_run = read_run_file(tmp_path / "fresh" / alone.run_file)
    assert cached_run.keys() == fresh_run.keys()
    for qid, hits in fresh_run.items():
        assert cached_run[qid] == pytest.approx(hits, abs=1e-5)
    assert chunk.timing.tokens_embedded > 0


def test_documents_the_window_holds_share_vectors_across_extensions(tiny_model: Path, tmp_path: Path) -> None:
    """An extension runs the unmodified model on inputs the window holds, so an ``extend`` strategy
    takes those documents' vectors from truncate's cache; a longer document is embedded anew."""
    data = write_qmsum(tmp_path / "data", 6)  # short meetings: every one fits the 64-token window
    short = {"tasks": ["qmsum"], "data_dir": str(data)}
    (truncate,) = run_grid(tiny_grid(tiny_model, tmp_path, ["truncate"], **short), command="a").records
    extended = tiny_grid(tiny_model, tmp_path, ["extend:pi", "extend:gp"], **short)
    pi, gp = run_grid(extended, command="b").records[1:]
    for record in (pi, gp):
        assert record.timing.docs_cached == 6 and record.timing.tokens_embedded == 0
    fresh = tiny_grid(
        tiny_model, tmp_path, ["extend:pi"], cache_dir=None, out=str(tmp_path / "fresh"), **short
    )
    alone = run_grid(fresh, command="c").records[0]
    assert alone.timing.docs_embedded == 6 and pi.metrics == pytest.approx(alone.metrics)
    assert pi.metrics == pytest.approx(truncate.metrics)
    run_grid(tiny_grid(tiny_model, tmp_path, ["truncate"]), command="d")  # passkey 256: past the window
    long = run_grid(tiny_grid(tiny_model, tmp_path, ["extend:pi"]), command="e").records[-1]
    assert long.task == "passkey" and long.strategy == "extend:pi"
    assert long.timing.docs_embedded == 100 and long.timing.docs_cached == 0


def test_an_explicit_original_length_keeps_a_window_its_own_key() -> None:
    from ragidx.embed.config import ExtensionConfig

    pi = ExtensionConfig(method="pi", target_length=256)
    key = functools.partial(embedding._window_key, "enc", span=(0, 50), window=62, sha="s")
    assert key(pi) == key(ExtensionConfig())  # the window holds it: the unextended vector
    assert key(pi) != key(ExtensionConfig(tau=0.8))  # τ acts on every input
    assert key(pi.model_copy(update={"tau": 0.8})) == key(ExtensionConfig(tau=0.8))
    assert key(pi.model_copy(update={"original_length": 32})) != key(ExtensionConfig())
    longer = functools.partial(embedding._window_key, "enc", span=(0, 200), window=62, sha="s")
    assert longer(pi) != longer(ExtensionConfig())


class _Interrupt:
    def __init__(self) -> None:
        self.batches = 0

    def record(self, description: str, done: bool = False) -> None:
        pass

    def stage(self, description: str, total: int) -> None:
        pass

    def advance(self, amount: int) -> None:
        self.batches += 1
        if self.batches == 20:
            raise KeyboardInterrupt


def test_an_interrupted_run_resumes_from_the_flushed_embeddings(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedding, "FLUSH_TOKENS", 2000)
    with pytest.raises(KeyboardInterrupt):
        run_grid(tiny_grid(tiny_model, tmp_path, ["pcw"]), _Interrupt(), command="x")
    assert not (tmp_path / "out" / "results.json").exists() or not read_results(tmp_path / "out").records
    resumed = run_grid(tiny_grid(tiny_model, tmp_path, ["pcw"]), command="x").records[0]
    assert 0 < resumed.timing.docs_cached < 100
    assert resumed.timing.docs_cached + resumed.timing.docs_embedded == 100


def test_late_hybrid_and_budget_share_one_embedding_run(tiny_model: Path, tmp_path: Path) -> None:
    """late:N embeds once; its hybrid, budget and tuned variants reuse the cached raw vectors, and
    each records its vectors per document and index size."""
    specs = ["late:32", "late:32+hybrid:rrf", "late:32+vectors:2", "late:32+hybrid:auto", "late:32+hybrid:1"]
    results = run_grid(tiny_grid(tiny_model, tmp_path, specs), command="late")
    first, *rest = results.records
    assert first.timing.docs_embedded == 100
    assert all(r.timing.docs_embedded == 0 and r.timing.docs_cached == 100 for r in rest)
    by = {r.strategy: r for r in results.records}
    assert by["late:32+vectors:2"].parameters["vectors_per_doc"] == 2.0
    late_vectors = by["late:32"].parameters["vectors_per_doc"]
    assert late_vectors == pytest.approx(256 / 32, abs=1)
    assert by["late:32+hybrid:rrf"].parameters["vectors_per_doc"] == pytest.approx(late_vectors + 1)
    tuning = by["late:32+hybrid:auto"].parameters["hybrid_tuning"]["256"]
    assert len(tuning["fold_weights"]) == 5 and 0 <= tuning["weight_on_all_queries"] <= 1
    assert by["late:32"].groups[0].embed_modes == {"late": 100}
    table = (tmp_path / "out" / "results.md").read_text()
    assert "Quality vs index size" in table and "★" in table


def test_the_onnx_precision_keys_the_cache_and_names_the_hardware(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """backend onnx vectors (float32 or int8) never serve a torch run, nor each other; the torch
    float32 key stays the one it was."""
    pytest.importorskip("onnxruntime", reason="backend onnx needs the onnx extra")
    pytest.importorskip("onnx", reason="backend onnx needs the onnx extra")
    from ragidx.embed.config import ExtensionConfig

    monkeypatch.setenv("RAGIDX_ONNX_CACHE", str(tmp_path / "onnx"))
    keys, names = {}, {}
    for backend, dtype in [("torch", "auto"), ("torch", "float32"), ("onnx", "auto"), ("onnx", "int8")]:
        encoders = embedding.Encoders("cpu", dtype, None, backend)
        encoder, keys[backend, dtype] = encoders.get(str(tiny_model), {}, ExtensionConfig())
        names[backend, dtype] = embedding.hardware(encoder).dtype
    assert keys["torch", "auto"] == keys["torch", "float32"]
    assert len({keys["torch", "auto"], keys["onnx", "auto"], keys["onnx", "int8"]}) == 3
    assert list(names.values()) == ["float32", "float32", "onnx-float32", "onnx-int8"]
