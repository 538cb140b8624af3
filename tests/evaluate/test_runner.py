"""End to end on a tiny random model: grid → records, runs, results.md, plots; resume; selections."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragidx.evaluate.metrics import evaluate
from ragidx.evaluate.report import EvalRecord, Hardware, Timing, read_results
from ragidx.evaluate.runner import run_grid
from ragidx.evaluate.tasks import Task, TaskGroup, load_task
from ragidx.search.trec import read_run_file
from tests.conftest import write_qmsum
from tests.evaluate.grids import tiny_grid


@pytest.mark.slow
def test_grid_writes_records_runs_table_and_plots(tiny_model: Path, tiny_encoder, tmp_path: Path) -> None:
    results = run_grid(tiny_grid(tiny_model, tmp_path, ["truncate", "chunk", "extend:pi"]), command="test")
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
    assert (out / "plots" / f"passkey__{tiny_model.name}.png").is_file()  # named by the model folder


@pytest.mark.slow
def test_rerun_skips_done_records_and_reuses_cached_embeddings(tiny_model: Path, tmp_path: Path) -> None:
    first = run_grid(tiny_grid(tiny_model, tmp_path, ["chunk"]), command="a")
    assert first.records[0].timing.docs_embedded == 100
    added = run_grid(tiny_grid(tiny_model, tmp_path, ["chunk", "pcw"]), command="b")
    assert [r.strategy for r in added.records] == ["chunk", "pcw"]
    assert added.records[0] == first.records[0]  # not recomputed
    assert added.commands == ["a", "b"]
    forced = run_grid(tiny_grid(tiny_model, tmp_path, ["chunk", "pcw"], force=True), command="c")
    for before, after in zip(added.records, forced.records, strict=True):
        assert after.timing.docs_embedded == 0 and after.timing.docs_cached == 100
        assert after.timing.queries_cached == 50
        assert after.metrics == pytest.approx(before.metrics)


def test_whole_document_real_task_plots_as_bars(tiny_model: Path, tmp_path: Path) -> None:
    """A real task run on whole documents (no max length) has no length axis: one bar per strategy,
    not a log-scaled line at length 0 (matplotlib warns about that one, and warnings fail here)."""
    import warnings

    from ragidx.evaluate.plots import write_plots
    from ragidx.evaluate.report import EvalResults

    (record,) = run_grid(tiny_grid(tiny_model, tmp_path, ["truncate"]), command="bars").records
    groups = [g.model_copy(update={"length": None}) for g in record.groups]
    real = [
        record.model_copy(update={"task": "qmsum", "strategy": spec, "groups": groups, "max_length": None})
        for spec in ("chunk:256:0", "late:256")
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        written = write_plots(EvalResults(records=real), tmp_path / "plots")
    assert written[0].name.startswith("qmsum__") and all(p.stat().st_size > 0 for p in written)


@pytest.mark.slow
def test_a_selection_ranks_each_fold_by_the_candidate_chosen_on_the_others(
    tiny_model: Path, tiny_encoder, tmp_path: Path
) -> None:
    from ragidx.evaluate.metrics import per_query

    specs = ["chunk:16:0", "chunk:64:0", "truncate"]
    label = "select:chunk:16:0|chunk:64:0|truncate"
    grid = tiny_grid(tiny_model, tmp_path, [], selections=[specs], lengths=[256, 512], max_lengths=[512])
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


def _candidate(spec: str, run_file: str, vectors: float, whole: bool) -> EvalRecord:
    return EvalRecord(
        task="passkey",
        task_source="synthetic",
        main_metric="acc@1",
        score=0.0,
        metrics={},
        groups=[],
        model="m",
        model_fingerprint="f",
        strategy=spec,
        whole_document=whole,
        max_length=256,
        seed=0,
        parameters={"vectors_per_doc": vectors, "index_bytes_per_doc": 1536 * vectors},
        timing=Timing(
            seconds=9,
            embed_seconds=8,
            tokens_embedded=1000,
            docs_embedded=20,
            docs_cached=0,
            queries_embedded=20,
            queries_cached=0,
        ),
        hardware=Hardware(device="cpu", cpu="x", threads=2, torch="2", platform="p"),
        ragidx_version="0",
        created="earlier",
        run_file=run_file,
    )


def test_a_hand_built_selection_of_two_candidates(tmp_path: Path) -> None:
    """Ten queries per length, query i's relevant document is doc i (ids with spaces, escaped in the
    runs). With seed 0 the five folds are {4,6} {2,7} {3,5} {9,0} {8,1}. At 256, A ranks doc i first
    for the first three folds' queries, B for the last two folds' and the first's: 6 right each. Held
    out {4,6}: 4 vs 4, a tie, A (the earlier); {2,7} and {3,5}: A 4 vs B 6, B; {9,0} and {8,1}: A 6
    vs B 4, A. Each held-out fold is then ranked by the candidate wrong on it, except {4,6}: 20 %
    against 60 % for either candidate. At 512 B is always right: B in every fold, 100 %."""
    from ragidx.evaluate.metrics import per_query
    from ragidx.evaluate.runner import select_one
    from ragidx.search.trec import open_run, trec_id, write_run

    a, b = "chunk:16:0", "extend:pi"
    folds = [[4, 6], [2, 7], [3, 5], [9, 0], [8, 1]]
    right = {
        (a, 256): {4, 6, 2, 7, 3, 5},
        (b, 256): {9, 0, 8, 1, 4, 6},
        (a, 512): set(),
        (b, 512): set(range(10)),
    }
    groups = [
        TaskGroup(
            str(n),
            {f"{n} doc {i}": "text" for i in range(10)},
            {f"passkey-{n}-q{i}": "question" for i in range(10)},
            {f"passkey-{n}-q{i}": {f"{n} doc {i}": 1} for i in range(10)},
            n,
        )
        for n in (256, 512)
    ]
    task = Task("passkey", "synthetic", groups, "by hand")
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    for spec, name in ((a, "a.trec.gz"), (b, "b.trec")):  # b: a plain run of an older folder
        with open_run(out / "runs" / name) as handle:
            for group in groups:
                for i, qid in enumerate(group.queries):
                    hit, miss = f"{group.length} doc {i}", f"{group.length} doc {(i + 1) % 10}"
                    first, second = (hit, miss) if i in right[spec, group.length] else (miss, hit)
                    write_run(handle, qid, [(first, 0.9), (second, 0.5)], "t")
    candidates = [_candidate(a, "runs/a.trec.gz", 4.0, False), _candidate(b, "runs/b.trec", 1.0, True)]
    record = select_one(task, f"select:{a}|{b}", 256, candidates, out)

    assert record.parameters["selection"] == {
        "256": {
            "fold_choices": [a, b, b, a, a],
            "fold_queries": [2, 2, 2, 2, 2],
            "choice_on_all_queries": a,  # 6 vs 6: the earlier
            "candidate_scores": {a: 60.0, b: 60.0},
        },
        "512": {
            "fold_choices": [b] * 5,
            "fold_queries": [2, 2, 2, 2, 2],
            "choice_on_all_queries": b,
            "candidate_scores": {a: 0.0, b: 100.0},
        },
    }
    composed = read_run_file(out / record.run_file)
    runs = {a: read_run_file(out / "runs/a.trec.gz"), b: read_run_file(out / "runs/b.trec")}
    for group, choices, expected in zip(
        groups, ([a, b, b, a, a], [b] * 5), ([1, 0, 0, 0, 0], [1] * 5), strict=True
    ):
        qids = list(group.queries)
        for choice, held, value in zip(choices, folds, expected, strict=True):
            for i in held:
                qid = trec_id(qids[i])
                assert list(composed[qid].items()) == list(runs[choice][qid].items())
                ranked = [d.replace("%20", " ") for d in composed[qid]]
                assert per_query(ranked, group.qrels[qids[i]])["acc@1"] == value
    assert [g.metrics["acc@1"] for g in record.groups] == [20.0, 100.0]
    assert record.score == record.metrics["acc@1"] == 60.0 and record.strategy == f"select:{a}|{b}"
    assert [(g.group, g.length, g.n_queries, g.n_docs) for g in record.groups] == [
        ("256", 256, 10, 10),
        ("512", 512, 10, 10),
    ]
    # deployed: A and B each chosen on all queries once; the earlier, A, with its index size
    assert record.parameters["deployed"] == a and record.parameters["candidates"] == [a, b]
    assert record.parameters["vectors_per_doc"] == 4.0 and record.parameters["index_bytes_per_doc"] == 6144
    assert record.whole_document is False and record.max_length == 256
    assert record.timing.tokens_embedded == 0 and record.timing.seconds < 9
    assert record.run_file == "runs/passkey__select-chunk-16-0_extend-pi__256__m__256-512.trec.gz"
    written = (out / record.run_file).read_bytes()
    whole = [c.model_copy(update={"whole_document": True}) for c in candidates]
    assert select_one(task, f"select:{a}|{b}", 256, whole, out).whole_document is True
    assert (out / record.run_file).read_bytes() == written  # a rerun writes the same bytes


def test_a_selection_needs_every_query_in_each_candidates_run(tmp_path: Path) -> None:
    from ragidx.errors import ConfigError
    from ragidx.evaluate.runner import select_one

    group = TaskGroup("all", {"d": "text"}, {"q1": "x", "q2": "y"}, {"q1": {"d": 1}, "q2": {"d": 1}})
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs/a.trec").write_text("q1 Q0 d 1 1.0 t\nq2 Q0 d 1 1.0 t\n")
    (tmp_path / "runs/b.trec").write_text("q1 Q0 d 1 1.0 t\n")  # written for fewer queries
    candidates = [
        _candidate("chunk", "runs/a.trec", 2.0, False),
        _candidate("pcw", "runs/b.trec", 1.0, False),
    ]
    task = Task("beir:x", "real", [group], "by hand")
    with pytest.raises(ConfigError, match=r"the run of pcw has no ranking for query 'q2'; re-run pcw"):
        select_one(task, "select:chunk|pcw", None, candidates, tmp_path)


def test_a_sampled_real_task_is_its_own_task(tiny_model: Path, tmp_path: Path) -> None:
    """--sample N: N documents with the queries judged on them, recorded as qmsum[N] and titled so."""
    data = write_qmsum(tmp_path / "data", 6)
    grid = tiny_grid(tiny_model, tmp_path, ["chunk"], tasks=["qmsum"], sample=4, data_dir=str(data))
    (record,) = run_grid(grid, command="sample").records
    assert record.task == "qmsum[4]" and "sample of 4 of 6 documents" in record.task_source
    assert record.groups[0].n_docs == 4 and record.groups[0].n_queries >= 8
    assert "| strategy | QMSum, 4 docs | avg |" in (tmp_path / "out" / "results.md").read_text()


def test_a_sampled_synthetic_task_keeps_its_lengths_and_shares_the_full_tasks_cache(
    tiny_model: Path, tmp_path: Path
) -> None:
    """passkey[N]: its own record and report column per length; its documents are the full task's,
    so a full run afterwards embeds only the documents the sample did not have."""
    grid = tiny_grid(tiny_model, tmp_path, ["chunk"], sample=10)
    (record,) = run_grid(grid, command="sample").records
    assert record.task == "passkey[10]" and "sample of 10 of 100 documents" in record.task_source
    assert record.groups[0].length == 256 and record.groups[0].n_docs == 10
    assert "Passkey, 10 docs" in (tmp_path / "out" / "results.md").read_text()
    full = tiny_grid(tiny_model, tmp_path, ["chunk"], out=str(tmp_path / "full"))
    (whole,) = run_grid(full, command="full").records
    assert whole.task == "passkey" and whole.groups[0].n_docs == 100
    assert whole.timing.docs_cached == 10 and whole.timing.docs_embedded == 90
