"""results.md and plots read records of one strategy run at different lengths as one."""

from __future__ import annotations

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
