"""End to end on a tiny random model: grid → records, runs, results.md, plots; cache and resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragidx.evaluate import runner
from ragidx.evaluate.metrics import evaluate
from ragidx.evaluate.report import read_results
from ragidx.evaluate.runner import EvalGrid, run_grid, search
from ragidx.evaluate.tasks import load_task
from ragidx.trec import read_run


def _grid(tiny_model: Path, tmp_path: Path, strategies: list[str], **extra) -> EvalGrid:
    return EvalGrid(
        models=[str(tiny_model)],
        tasks=["passkey"],
        lengths=[256],
        strategies=strategies,
        max_lengths=[256],
        out=str(tmp_path / "out"),
        cache_dir=str(tmp_path / "cache"),
        device="cpu",
        **extra,
    )


def test_grid_writes_records_runs_table_and_plots(tiny_model: Path, tiny_encoder, tmp_path: Path) -> None:
    results = run_grid(_grid(tiny_model, tmp_path, ["truncate", "chunk", "extend:pi"]), command="test")
    out = tmp_path / "out"
    assert [(r.strategy, r.max_length) for r in results.records] == [
        ("truncate", None),
        ("chunk", 256),
        ("extend:pi", 256),
    ]
    qrels = load_task("passkey", encoder=tiny_encoder, lengths=[256]).groups[0].qrels
    for record in results.records:
        assert record.groups[0].n_docs == 100 and record.groups[0].n_queries == 50
        assert record.score == record.metrics["acc@1"] == record.groups[0].metrics["acc@1"]
        run = read_run((out / record.run_file).read_text().splitlines())
        ranked = {q: sorted(hits.items(), key=lambda p: -p[1]) for q, hits in run.items()}
        assert all(len(hits) == 100 for hits in ranked.values())
        assert evaluate(ranked, qrels)["ndcg@10"] * 100 == pytest.approx(record.metrics["ndcg@10"], abs=1e-6)
    modes = [r.groups[0].embed_modes for r in results.records]
    assert modes == [{"truncate": 100}, {"chunk": 100}, {"extend:pi": 100}]
    assert read_results(out).records == results.records
    table = (out / "results.md").read_text()
    assert "| chunk @256 |" in table and "Whole document vs chunking" in table and "    test" in table
    assert (
        out / "plots" / f"passkey__{''.join(c if c.isalnum() else '_' for c in str(tiny_model))}.png"
    ).is_file()


def test_rerun_skips_done_records_and_reuses_cached_embeddings(tiny_model: Path, tmp_path: Path) -> None:
    first = run_grid(_grid(tiny_model, tmp_path, ["chunk"]), command="a")
    assert first.records[0].timing.docs_embedded == 100
    added = run_grid(_grid(tiny_model, tmp_path, ["chunk", "pcw"]), command="b")
    assert [r.strategy for r in added.records] == ["chunk", "pcw"]
    assert added.records[0] == first.records[0]  # not recomputed
    assert added.commands == ["a", "b"]
    forced = run_grid(_grid(tiny_model, tmp_path, ["chunk", "pcw"], force=True), command="c")
    for before, after in zip(added.records, forced.records, strict=True):
        assert after.timing.docs_embedded == 0 and after.timing.docs_cached == 100
        assert after.timing.queries_cached == 50
        assert after.metrics == pytest.approx(before.metrics)


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
    monkeypatch.setattr(runner, "FLUSH_TOKENS", 2000)
    with pytest.raises(KeyboardInterrupt):
        run_grid(_grid(tiny_model, tmp_path, ["pcw"]), _Interrupt(), command="x")
    assert not (tmp_path / "out" / "results.json").exists() or not read_results(tmp_path / "out").records
    resumed = run_grid(_grid(tiny_model, tmp_path, ["pcw"]), command="x").records[0]
    assert 0 < resumed.timing.docs_cached < 100
    assert resumed.timing.docs_cached + resumed.timing.docs_embedded == 100


def test_search_scores_a_document_by_its_best_vector() -> None:
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.8, 0.6]], dtype=np.float32)
    docs = runner._Embedded(["a", "b", "c"], vectors, np.array([0, 2, 3]))
    ranked = search(np.array([[0.0, 1.0], [1.0, 0.0]], dtype=np.float32), docs, k=2)
    assert [d for d, _ in ranked[0]] == ["a", "b"] and ranked[0][0][1] == pytest.approx(1.0)
    assert [d for d, _ in ranked[1]] == ["a", "c"]
