"""results.md and plots read records of one strategy run at different lengths as one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragidx.evaluate.report import (
    EvalRecord,
    EvalResults,
    GroupScore,
    Hardware,
    Timing,
    markdown,
    merge_lengths,
    table_rows,
)


def _record(strategy: str, scores: dict[int, float], vectors: float, **parameters: object) -> EvalRecord:
    return EvalRecord(
        task="passkey",
        task_source="generated",
        main_metric="acc@1",
        score=sum(scores.values()) / len(scores),
        metrics={"acc@1": sum(scores.values()) / len(scores)},
        groups=[
            GroupScore(group=str(n), length=n, n_queries=50, n_docs=100, metrics={"acc@1": v}, embed_modes={})
            for n, v in scores.items()
        ],
        model="m",
        model_fingerprint="f",
        strategy=strategy,
        whole_document=False,
        max_length=None,
        seed=0,
        parameters={"vectors_per_doc": vectors, **parameters},
        timing=Timing(
            seconds=1,
            embed_seconds=1,
            tokens_embedded=1,
            docs_embedded=1,
            docs_cached=0,
            queries_embedded=0,
            queries_cached=0,
        ),
        hardware=Hardware(device="cpu", cpu="x", threads=2, torch="2", platform="p"),
        ragidx_version="0",
        created="now",
        run_file="runs/x.trec.gz",
    )


def test_records_at_other_lengths_merge_into_one_row() -> None:
    short = _record(
        "chunk",
        {256: 100.0, 512: 90.0, 1024: 80.0},
        2.0,
        hybrid_tuning={"256": {"weight_on_all_queries": 0.0}},
    )
    long = _record("chunk", {2048: 60.0}, 8.0, hybrid_tuning={"2048": {"weight_on_all_queries": 1.0}})
    other = _record("pcw", {256: 50.0}, 1.0)
    merged = merge_lengths([short, other, long])
    assert [r.strategy for r in merged] == ["chunk", "pcw"]
    chunk = merged[0]
    assert [g.group for g in chunk.groups] == ["256", "512", "1024", "2048"]
    assert chunk.score == pytest.approx(82.5)  # the mean over the four lengths, not the last record's
    assert chunk.parameters["vectors_per_doc"] == pytest.approx((2.0 * 300 + 8.0 * 100) / 400)
    assert chunk.parameters["hybrid_tuning"] == {
        "256": {"weight_on_all_queries": 0.0},
        "2048": {"weight_on_all_queries": 1.0},
    }
    assert merged[1] is other
    _, rows = table_rows(merged)
    assert dict(rows)["chunk"]["passkey"] == pytest.approx(82.5)
    table = markdown(EvalResults(records=[short, long]))
    assert table.count("| chunk |") == 2  # one row in the main table and one in the per-length table
    assert "| chunk | 100.0 | 90.0 | 80.0 | 60.0 | 82.5 |" in table


def _cells(line: str) -> list[str]:
    """A Markdown table row's cells, split on unescaped ``|`` as GitHub does."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def test_a_selection_record_keeps_tables_verdicts_and_plots_whole(tmp_path: Path) -> None:
    import warnings

    from ragidx.evaluate.plots import write_plots

    label = "select:chunk:128:0|chunk:256:0+best:2"
    records = [
        _record("chunk:128:0", {256: 60.0, 512: 40.0}, 4.0),
        _record("chunk:256:0+best:2", {256: 70.0, 512: 50.0}, 2.0),
        _record("extend:pi", {256: 90.0, 512: 10.0}, 1.0).model_copy(update={"whole_document": True}),
        _record(
            label,
            {256: 68.0, 512: 52.0},  # folds may choose better than any candidate
            2.0,
            candidates=["chunk:128:0", "chunk:256:0+best:2"],
            selection={
                "256": {"choice_on_all_queries": "chunk:256:0+best:2"},
                "512": {"choice_on_all_queries": "chunk:128:0"},
            },
        ),
    ]
    text = markdown(EvalResults(records=records, commands=["ragidx eval --select a,b"]))
    tables = [line for line in text.splitlines() if line.startswith("|")]
    for line in tables:  # every row has its header's number of cells: the label's | are escaped
        header = next(h for h in reversed(tables[: tables.index(line) + 1]) if h.startswith("| strategy"))
        assert len(_cells(line)) == len(_cells(header)), line
    escaped = label.replace("|", "\\|")
    rows = [[c.strip("*") for c in _cells(line)] for line in tables if line.startswith(f"| {escaped} |")]
    assert rows[0] == [label.replace("|", "\\|"), "60.0", "60.0"]  # main table: passkey, avg
    assert rows[1][1:] == ["68.0", "52.0", "60.0"]  # per-length table
    tradeoff = next(_cells(line) for line in tables if line.startswith(f"| {escaped} ★"))  # ties best:2
    assert tradeoff[1:] == ["2.0", "–", "1", "60.0", "chunk:256:0+best:2, chunk:128:0"]  # choice per group
    # the selection counts as chunked (its candidates are): it is the best chunked at 512
    assert f"Passkey 512: chunking wins — best whole extend:pi 10.0 vs best chunked {label} 52.0" in text
    assert "best chunked chunk:256:0+best:2 70.0" in text  # at 256 a candidate itself is the best
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        written = write_plots(EvalResults(records=records), tmp_path / "plots")
        whole = [r.groups[0].model_copy(update={"length": None}) for r in records]
        pairs = zip(records, whole, strict=True)
        real = [r.model_copy(update={"task": "qmsum", "groups": [g]}) for r, g in pairs]
        written += write_plots(EvalResults(records=real), tmp_path / "real")
    assert len(written) == 4 and all(p.stat().st_size > 0 for p in written)


def test_a_whole_win_inside_the_window_is_not_called_extension() -> None:
    """At a length every document fits, a τ-scaled single window beating chunk is no extension win."""
    tau = _record("extend:pi+tau:0.8", {256: 86.0, 2048: 36.0}, 1.0).model_copy(
        update={"whole_document": True}
    )
    tau.groups[0].embed_modes, tau.groups[1].embed_modes = {"whole": 100}, {"extend:pi": 100}
    chunk = _record("chunk", {256: 78.0, 2048: 74.0}, 4.0)
    text = markdown(EvalResults(records=[tau, chunk]))
    assert (
        "Passkey 256: every document fits the window (nothing extended: τ or pooling differ) — "
        "best whole extend:pi+tau:0.8 86.0 vs best chunked chunk 78.0" in text
    )
    assert "Passkey 2048: chunking wins — best whole extend:pi+tau:0.8 36.0" in text


def test_rows_name_models_by_folder_unless_two_share_it() -> None:
    def at(model: str) -> EvalRecord:
        return _record("chunk", {256: 50.0}, 1.0).model_copy(
            update={"model": model, "model_fingerprint": model}
        )

    _, rows = table_rows([at("~/.cache/ragidx/models/e5-small"), at("default")])
    assert [name for name, _ in rows] == ["e5-small · chunk", "default · chunk"]
    _, rows = table_rows([at("a/model"), at("b/model")])  # the same folder name: the whole name
    assert [name for name, _ in rows] == ["a/model · chunk", "b/model · chunk"]
    _, rows = table_rows([at("a/model")])
    assert [name for name, _ in rows] == ["chunk"]


def test_plot_files_are_named_by_the_model_folder_unless_two_share_it(tmp_path: Path) -> None:
    from ragidx.evaluate.plots import write_plots

    def names(*models: str) -> list[str]:
        records = [
            _record("chunk", {256: 50.0}, 1.0).model_copy(update={"model": m, "model_fingerprint": m})
            for m in models
        ]
        out = tmp_path / str(len(list(tmp_path.iterdir())))
        return sorted(p.name for p in write_plots(EvalResults(records=records), out))

    assert names("~/.cache/ragidx/models/e5-small", "default") == [
        "passkey__default.png",
        "passkey__e5-small.png",
    ]
    assert names("a/model", "b/model") == ["passkey__a_model.png", "passkey__b_model.png"]
    assert names("intfloat/multilingual-e5-small:main") == ["passkey__multilingual-e5-small-main.png"]


def test_synthetic_plots_draw_one_line_per_strategy_from_the_smallest_fitting_max_length() -> (
    None
):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ragidx.evaluate.plots import _synthetic

    def at(strategy: str, max_length: int | None, scores: dict[int, float]) -> EvalRecord:
        return _record(strategy, scores, 1.0).model_copy(update={"max_length": max_length})

    rows = [
        at("chunk", 2048, {256: 90.0, 2048: 70.0}),
        at("chunk", 4096, {2048: 10.0, 4096: 60.0}),  # 2048 again: the 2048 run holds it whole
        at("chunk", 1024, {2048: 20.0}),  # cut to 1024: loses to the runs that hold it
        at("truncate", None, {256: 90.0, 4096: 5.0}),
    ]
    figure, axes = plt.subplots()
    _synthetic(axes, rows)
    lines = {line.get_label(): line for line in axes.get_lines()}
    plt.close(figure)
    assert sorted(lines) == ["chunk (73.3)", "truncate (47.5)"]
    assert list(lines["chunk (73.3)"].get_xdata()) == [256, 2048, 4096]
    assert list(lines["chunk (73.3)"].get_ydata()) == [90.0, 70.0, 60.0]
    assert lines["chunk (73.3)"].get_color() != lines["truncate (47.5)"].get_color()


def test_bm25_rows_compare_each_hybrid_with_its_two_parts(tmp_path: Path) -> None:
    """The BM25 section: each +bm25 hybrid against its dense part (same L_t) and BM25 alone, Δ to the
    better part; the tuned weights shown; BM25 records kept out of "whole document vs chunking"."""
    from ragidx.evaluate.plots import write_plots

    bm25 = _record("bm25", {256: 80.0}, 0.0, lexical_bytes_per_doc=900.0)
    bm25.timing = bm25.timing.model_copy(update={"tokens_embedded": 0, "embed_seconds": 0.0})
    chunk = _record("chunk", {256: 60.0}, 3.0).model_copy(update={"max_length": 256})
    tuning = {"256": {"fold_weights": [0.7] * 5, "weight_on_all_queries": 0.7}}
    auto = _record("chunk+bm25:auto", {256: 84.0}, 3.0, lexical_tuning=tuning)
    rrf = _record("chunk+bm25:rrf", {256: 79.0}, 3.0)
    whole = _record("extend:pi+bm25:0.5", {256: 90.0}, 1.0).model_copy(update={"whole_document": True})
    classic = _record("bm25+passages:0", {256: 70.0}, 0.0)  # BM25 over whole documents only
    classic_hybrid = _record("chunk+bm25:0.5+passages:0", {256: 75.0}, 3.0)
    hybrids = (auto, rrf, whole, classic_hybrid)
    records = [bm25, chunk, classic, *(r.model_copy(update={"max_length": 256}) for r in hybrids)]
    table = markdown(EvalResults(records=records))
    section = table.split("## BM25 and hybrids")[1].split("\n## ")[0]
    assert "| bm25 | 80.0 | – | 80.0 | – | – |" in section
    assert "| chunk+bm25:auto @256 | 84.0 | 60.0 | 80.0 | +4.0 | bm25 w 0.70 |" in section
    assert "| chunk+bm25:rrf @256 | 79.0 | 60.0 | 80.0 | -1.0 | – |" in section
    assert "| extend:pi+bm25:0.5 @256 | 90.0 | – | 80.0 | – | – |" in section  # its dense part not run
    assert "| chunk+bm25:0.5+passages:0 @256 | 75.0 | 60.0 | 70.0 | +5.0 | – |" in section  # its own BM25
    verdicts = table.split("## Whole document vs chunking")[1].split("\n## ")[0]
    assert "bm25" not in verdicts  # embeddings against embeddings only
    tradeoff = table.split("## Quality vs index size")[1]
    assert "| bm25 ★ | 0.0 |" in tradeoff and "(no encoder)" in tradeoff
    written = write_plots(EvalResults(records=records), tmp_path)  # BM25 has no place on a log axis
    assert any(p.name.endswith("__tradeoff.png") for p in written)


def test_two_runs_writing_one_folder_keep_each_others_records(tmp_path: Path) -> None:
    """Two ragidx eval commands on one --out: each read results.json before the other wrote; a
    write keeps the other's records and commands, and a record both hold is the writer's."""
    from ragidx.evaluate.report import read_results, write_results

    write_results(tmp_path, EvalResults(records=[_record("chunk", {256: 50.0}, 1.0)], commands=["start"]))
    first, second = read_results(tmp_path), read_results(tmp_path)  # both commands start
    first.records.append(_record("pcw", {256: 60.0}, 1.0))
    first.commands.append("first")
    write_results(tmp_path, first)
    second.records.append(_record("truncate", {256: 70.0}, 1.0))
    second.records[0] = _record("chunk", {256: 55.0}, 1.0)  # recomputed (--force) by the second
    second.commands.append("second")
    write_results(tmp_path, second)
    on_disk = read_results(tmp_path)
    assert {r.strategy: r.score for r in on_disk.records} == {"chunk": 55.0, "pcw": 60.0, "truncate": 70.0}
    assert on_disk.commands == ["start", "second", "first"]
    assert [r.strategy for r in second.records] == ["chunk", "truncate", "pcw"]  # the caller keeps it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # the lock is the folder's


def test_a_results_write_waits_for_the_lock_on_its_folder(tmp_path: Path) -> None:
    """Another process holding the folder's lock holds the write back until it lets go."""
    import fcntl
    import os
    import threading
    import time

    from ragidx.evaluate.report import read_results, write_results

    handle = os.open(tmp_path, os.O_RDONLY)
    fcntl.flock(handle, fcntl.LOCK_EX)
    done = threading.Event()
    results = EvalResults(records=[_record("chunk", {256: 1.0}, 1.0)])
    writer = threading.Thread(target=lambda: (write_results(tmp_path, results), done.set()))
    writer.start()
    time.sleep(0.3)
    assert not done.is_set() and not (tmp_path / "results.json").exists()
    os.close(handle)
    writer.join(5)
    assert done.is_set() and [r.strategy for r in read_results(tmp_path).records] == ["chunk"]
