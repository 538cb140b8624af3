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
from ragidx.trec import read_run_file


def _grid(tiny_model: Path, tmp_path: Path, strategies: list[str], **extra) -> EvalGrid:
    settings = {"lengths": [256], "max_lengths": [256], **extra}
    return EvalGrid(
        models=[str(tiny_model)],
        tasks=["passkey"],
        strategies=strategies,
        out=str(tmp_path / "out"),
        cache_dir=str(tmp_path / "cache"),
        device="cpu",
        **settings,
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
        assert record.run_file.endswith("__256.trec.gz")  # the task's lengths in the name; gzipped
        run = read_run_file(out / record.run_file)
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


def test_late_hybrid_and_budget_share_one_embedding_run(tiny_model: Path, tmp_path: Path) -> None:
    """late:N embeds once; its hybrid, budget and tuned variants reuse the cached raw vectors, and
    each records its vectors per document and index size."""
    specs = ["late:32", "late:32+hybrid:rrf", "late:32+vectors:2", "late:32+hybrid:auto", "late:32+hybrid:1"]
    results = run_grid(_grid(tiny_model, tmp_path, specs), command="late")
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


def test_hybrid_weight_one_and_zero_reproduce_document_and_chunk_rankings() -> None:
    rng = np.random.default_rng(0)
    chunks = rng.normal(size=(7, 4)).astype(np.float32)
    documents = rng.normal(size=(3, 4)).astype(np.float32)
    docs = runner._Embedded(["a", "b", "c"], chunks, np.array([0, 2, 5]), documents=documents)
    queries = rng.normal(size=(5, 4)).astype(np.float32)
    from ragidx.longdoc import HybridConfig

    only_doc = search(queries, docs, hybrid=HybridConfig(fusion="weighted", weight=1.0))
    only_chunk = search(queries, docs, hybrid=HybridConfig(fusion="weighted", weight=0.0))
    plain = search(queries, docs)
    doc_order = np.argsort(-(queries @ documents.T), axis=1, kind="stable")
    assert [[d for d, _ in hits] for hits in only_doc] == [
        [docs.doc_ids[j] for j in row] for row in doc_order
    ]
    assert [[d for d, _ in hits] for hits in only_chunk] == [[d for d, _ in hits] for hits in plain]


def test_whole_document_real_task_plots_as_bars(tiny_model: Path, tmp_path: Path) -> None:
    """A real task run on whole documents (no max length) has no length axis: one bar per strategy,
    not a log-scaled line at length 0 (matplotlib warns about that one, and warnings fail here)."""
    import warnings

    from ragidx.evaluate.plots import write_plots
    from ragidx.evaluate.report import EvalResults

    (record,) = run_grid(_grid(tiny_model, tmp_path, ["truncate"]), command="bars").records
    groups = [g.model_copy(update={"length": None}) for g in record.groups]
    real = [
        record.model_copy(update={"task": "qmsum", "strategy": spec, "groups": groups, "max_length": None})
        for spec in ("chunk:256:0", "late:256")
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        written = write_plots(EvalResults(records=real), tmp_path / "plots")
    assert written[0].name.startswith("qmsum__") and all(p.stat().st_size > 0 for p in written)


def test_best_n_scores_by_the_mean_of_the_best_vectors_and_reuses_the_embeddings(
    tiny_model: Path, tmp_path: Path
) -> None:
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.8, 0.6], [0.7, 0.7]], dtype=np.float32)
    docs = runner._Embedded(["a", "b"], vectors, np.array([0, 2]))
    ranked = search(np.array([[1.0, 0.0]], dtype=np.float32), docs, best=2)
    # a: (1.0 + 0.0) / 2 = 0.5; b: its best two of 0.6, 0.8, 0.7 = 0.75; max-sim would rank a first
    assert [d for d, _ in ranked[0]] == ["b", "a"]
    assert [s for _, s in ranked[0]] == pytest.approx([0.75, 0.5])
    assert [d for d, _ in search(np.array([[1.0, 0.0]], dtype=np.float32), docs)[0]] == ["a", "b"]
    results = run_grid(_grid(tiny_model, tmp_path, ["chunk:32:0", "chunk:32:0+best:2"]), command="best")
    plain, best = results.records
    assert best.timing.docs_embedded == 0 and best.timing.docs_cached == 100
    assert best.parameters["long_doc"]["best_chunks"] == 2
    assert best.parameters["vectors_per_doc"] == plain.parameters["vectors_per_doc"]


def test_a_selection_ranks_each_fold_by_the_candidate_chosen_on_the_others(
    tiny_model: Path, tiny_encoder, tmp_path: Path
) -> None:
    from ragidx.evaluate.metrics import per_query

    specs = ["chunk:16:0", "chunk:64:0", "truncate"]
    label = "select:chunk:16:0|chunk:64:0|truncate"
    grid = _grid(tiny_model, tmp_path, [], selections=[specs], lengths=[256, 512], max_lengths=[512])
    results = run_grid(grid, command="select")
    by = {r.strategy: r for r in results.records}
    assert list(by) == [*specs, label]
    chosen, out = by[label], tmp_path / "out"
    runs = {s: read_run_file(out / by[s].run_file) for s in specs}
    composed = read_run_file(out / chosen.run_file)
    task = load_task("passkey", encoder=tiny_encoder, lengths=[256, 512])
    for group, scored in zip(task.groups, chosen.groups, strict=True):
        entry = chosen.parameters["selection"][group.name]
        qids = list(group.queries)
        acc = {
            s: np.array([per_query(list(runs[s][q]), group.qrels[q])["acc@1"] for q in qids]) for s in specs
        }
        order = np.random.default_rng(0).permutation(len(qids))
        folds = np.array_split(order, 5)
        assert entry["fold_queries"] == [len(f) for f in folds]
        for choice, held in zip(entry["fold_choices"], folds, strict=True):
            rest = np.setdiff1d(order, held)
            best = max(acc[s][rest].mean() for s in specs)
            assert choice == next(s for s in specs if acc[s][rest].mean() == best)  # ties: the earlier
            for i in held:  # a held-out query is ranked exactly as the fold's candidate ranked it
                assert list(composed[qids[i]].items()) == list(runs[choice][qids[i]].items())
        expected = np.mean(
            [acc[c][i] for c, held in zip(entry["fold_choices"], folds, strict=True) for i in held]
        )
        assert scored.metrics["acc@1"] == pytest.approx(100 * expected)
        assert entry["candidate_scores"] == pytest.approx({s: 100 * acc[s].mean() for s in specs})
    assert chosen.timing.tokens_embedded == 0 and chosen.parameters["deployed"] in specs
    assert sorted(r.run_file for r in results.records) == sorted(
        f"runs/{p.name}" for p in (out / "runs").iterdir()
    )
    again = run_grid(grid, command="select")
    assert [r.created for r in again.records] == [r.created for r in results.records]  # resumed, not redone
    assert label.replace("|", "\\|") in (out / "results.md").read_text()  # escaped in the tables


def test_runs_at_other_lengths_keep_their_own_run_files(tiny_model: Path, tmp_path: Path) -> None:
    first = run_grid(_grid(tiny_model, tmp_path, ["chunk"], lengths=[256]), command="a")
    second = run_grid(_grid(tiny_model, tmp_path, ["chunk"], lengths=[512]), command="b")
    files = [r.run_file for r in second.records]
    assert files == [first.records[0].run_file, files[1]] and files[0] != files[1]
    assert all((tmp_path / "out" / f).is_file() for f in files)


def test_results_name_a_model_under_the_home_folder_with_a_tilde() -> None:
    home = str(Path.home())
    assert runner.portable(f"{home}/.cache/ragidx/models/e5-small") == "~/.cache/ragidx/models/e5-small"
    assert runner.portable("default") == "default"
    assert runner.portable(f"{home}x/model") == f"{home}x/model"  # only the home folder itself
