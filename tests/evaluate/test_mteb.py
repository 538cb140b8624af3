"""MTEB-style result files (``ragidx eval --format mteb``) on synthetic records, checked against real
MTEB result files: the ``embeddings-benchmark/results`` repository's
``results/intfloat__e5-base-v2/1c644c92ad3ba1efdad3f1451a637716616a20e8/LEMBPasskeyRetrieval.json``
and ``LEMBQMSumRetrieval.json`` (mteb 1.18.0), trimmed below to their structure and a few scores."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ragidx.errors import InputError
from ragidx.evaluate.metrics import METRICS
from ragidx.evaluate.mteb import metric_name, mteb_result, write_mteb
from ragidx.evaluate.report import EvalRecord, EvalResults, GroupScore, Hardware, Timing

_ENTRY_1024 = {"hf_subset": "default", "languages": ["eng-Latn"], "main_score": 0.62, "ndcg_at_1": 0.62}
PASSKEY_EXAMPLE: dict[str, Any] = {  # LEMBPasskeyRetrieval.json, one split of eight shown
    "dataset_revision": "6e346642246bfb4928c560ee08640dc84d074e8c",
    "evaluation_time": 7.119226932525635,
    "kg_co2_emissions": 0.000328670878192971,
    "mteb_version": "1.18.0",
    "scores": {
        "test_1024": [{**_ENTRY_1024, "ndcg_at_10": 0.62, "precision_at_1": 0.62, "recall_at_100": 1.0}]
    },
    "task_name": "LEMBPasskeyRetrieval",
}
QMSUM_EXAMPLE: dict[str, Any] = {  # LEMBQMSumRetrieval.json
    "dataset_revision": "6e346642246bfb4928c560ee08640dc84d074e8c",
    "task_name": "LEMBQMSumRetrieval",
    "mteb_version": "1.18.0",
    "scores": {
        "test": [
            {
                "ndcg_at_1": 0.12246,
                "ndcg_at_10": 0.23859,
                "recall_at_10": 0.38507,
                "mrr_at_10": 0.193589,
                "main_score": 0.23859,
                "hf_subset": "default",
                "languages": ["eng-Latn"],
            }
        ]
    },
    "evaluation_time": 2.7458958625793457,
    "kg_co2_emissions": 0.00015227566343741408,
}
# Every score name MTEB's retrieval evaluator writes into those files (nauc_* left out).
MTEB_NAMES = {
    f"{m}_at_{k}" for m in ("ndcg", "map", "recall", "precision", "mrr") for k in (1, 3, 5, 10, 20, 100, 1000)
}


def _record(
    task: str, groups: dict[int | None, float], *, strategy: str = "chunk", **fields: Any
) -> EvalRecord:
    """A record whose every metric of a group is ``score`` (percent) but ndcg@10, a little lower."""
    scores = [
        GroupScore(
            group=str(length) if length else "all",
            length=length,
            n_queries=50,
            n_docs=100,
            metrics={m: max(score - (1.0 if m == "ndcg@10" else 0.0), 0.0) for m in METRICS},
        )
        for length, score in groups.items()
    ]
    main = "acc@1" if None not in groups else "ndcg@10"
    means = {m: sum(g.metrics[m] for g in scores) / len(scores) for m in METRICS}
    values: dict[str, Any] = {
        "task": task,
        "task_source": "generated (seed 0)",
        "main_metric": main,
        "score": means[main],
        "metrics": means,
        "groups": scores,
        "model": "intfloat/e5-base-v2",
        "model_fingerprint": "0123456789abcdef",
        "strategy": strategy,
        "whole_document": False,
        "max_length": 4096,
        "seed": 0,
        "parameters": {},
        "timing": Timing(
            seconds=2.5,
            embed_seconds=1.0,
            tokens_embedded=0,
            docs_embedded=0,
            docs_cached=0,
            queries_embedded=0,
            queries_cached=0,
        ),
        "hardware": Hardware(device="cpu", cpu="x", threads=1, torch="2", platform="linux"),
        "ragidx_version": "0.0.0",
        "created": "2026-01-01T00:00:00",
        "run_file": "runs/x.trec.gz",
    }
    return EvalRecord.model_validate(values | fields)


def _loads_as_mteb(result: dict[str, Any]) -> None:
    """What MTEB's ``TaskResult`` checks when it loads a file (``_validate_scores_dict``, the fields)."""
    assert isinstance(result["dataset_revision"], str) and isinstance(result["task_name"], str)
    assert isinstance(result["mteb_version"], str)
    for entries in result["scores"].values():
        for entry in entries:
            assert "main_score" in entry
            assert isinstance(entry["hf_subset"], str) and isinstance(entry["languages"], list)
    json.dumps(result, allow_nan=False)


def test_the_real_examples_say_which_metric_is_main() -> None:
    passkey = PASSKEY_EXAMPLE["scores"]["test_1024"][0]
    assert passkey["main_score"] == passkey["ndcg_at_1"]
    qmsum = QMSUM_EXAMPLE["scores"]["test"][0]
    assert qmsum["main_score"] == qmsum["ndcg_at_10"] != qmsum["ndcg_at_1"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ndcg@10", "ndcg_at_10"),
        ("ndcg@1", "ndcg_at_1"),
        ("acc@1", "precision_at_1"),
        ("mrr@10", "mrr_at_10"),
    ],
)
def test_metric_names(name: str, expected: str) -> None:
    assert metric_name(name) == expected


def test_every_ragidx_metric_has_an_mteb_name() -> None:
    assert {metric_name(m) for m in METRICS} <= MTEB_NAMES


def test_passkey_is_per_length_splits_with_fractions() -> None:
    record = _record("passkey", {256: 62.0, 1024: 4.0})
    result = mteb_result(record)
    _loads_as_mteb(result)
    assert set(PASSKEY_EXAMPLE) <= set(result) and set(result) - set(PASSKEY_EXAMPLE) == {"ragidx"}
    assert result["task_name"] == PASSKEY_EXAMPLE["task_name"]
    assert result["dataset_revision"] == PASSKEY_EXAMPLE["dataset_revision"]
    assert list(result["scores"]) == ["test_256", "test_1024"]
    for split, percent in (("test_256", 62.0), ("test_1024", 4.0)):
        [entry] = result["scores"][split]
        assert entry["hf_subset"] == "default" and entry["languages"] == ["eng-Latn"]
        assert set(entry) - {"hf_subset", "languages", "main_score"} <= MTEB_NAMES
        assert entry["main_score"] == entry["ndcg_at_1"] == entry["precision_at_1"] == percent / 100
        assert entry["ndcg_at_10"] == pytest.approx((percent - 1) / 100)
    # MTEB's task score is the mean of the splits' main scores: ragidx's score, as a fraction
    mean = sum(e[0]["main_score"] for e in result["scores"].values()) / len(result["scores"])
    assert mean == pytest.approx(record.score / 100)
    assert result["evaluation_time"] == 2.5 and result["kg_co2_emissions"] is None
    assert result["ragidx"]["strategy"] == "chunk" and result["ragidx"]["task_source"] == "generated (seed 0)"


def test_qmsum_is_one_test_split_ranked_by_ndcg_at_10() -> None:
    result = mteb_result(_record("qmsum", {None: 23.859}))
    _loads_as_mteb(result)
    assert result["task_name"] == "LEMBQMSumRetrieval"
    [entry] = result["scores"]["test"]
    example = QMSUM_EXAMPLE["scores"]["test"][0]
    assert set(example) - set(entry) == set()  # the same names for what both hold
    assert entry["main_score"] == entry["ndcg_at_10"] == pytest.approx(0.22859)
    assert entry["ndcg_at_1"] == pytest.approx(0.23859)
    assert all(0 <= v <= 1 for k, v in entry.items() if k not in ("hf_subset", "languages"))


@pytest.mark.parametrize(
    ("task", "name"),
    [
        ("needle", "LEMBNeedleRetrieval"),
        ("narrativeqa", "LEMBNarrativeQARetrieval"),
        ("summ_screen_fd", "LEMBSummScreenFDRetrieval"),
        ("2wikimqa", "LEMBWikimQARetrieval"),
        ("longembed:2wikimqa", "LEMBWikimQARetrieval"),
    ],
)
def test_longembed_task_names(task: str, name: str) -> None:
    groups: dict[int | None, float] = {512: 50.0} if task == "needle" else {None: 50.0}
    assert mteb_result(_record(task, groups))["task_name"] == name


def test_write_mteb_lays_out_model_revision_task(tmp_path: Path) -> None:
    records = [
        _record("passkey", {256: 60.0}),
        _record("passkey", {512: 40.0}),  # the same strategy at another length: one file, two splits
        _record(
            "qmsum", {None: 30.0}, model="~/models/minilm", strategy="chunk:256:0+best:2", max_length=None
        ),
        _record("qmsum", {None: 30.0}, seed=3),
        _record("beir:scifact", {None: 50.0}),
        _record("qmsum[64]", {None: 50.0}),
    ]
    written = write_mteb(EvalResults(records=records), tmp_path / "mteb")
    relative = sorted(p.relative_to(tmp_path / "mteb").as_posix() for p in written.files)
    assert relative == [
        "intfloat__e5-base-v2__chunk__4096/0123456789abcdef-seed3/LEMBQMSumRetrieval.json",
        "intfloat__e5-base-v2__chunk__4096/0123456789abcdef/LEMBPasskeyRetrieval.json",
        "minilm__chunk-256-0_best-2__window/0123456789abcdef/LEMBQMSumRetrieval.json",
    ]
    assert [s.split(":")[0] for s in written.skipped] == ["beir", "qmsum[64]"]
    passkey = json.loads((tmp_path / "mteb" / relative[1]).read_text())
    _loads_as_mteb(passkey)
    assert {k: v[0]["main_score"] for k, v in passkey["scores"].items()} == {"test_256": 0.6, "test_512": 0.4}
    assert passkey["evaluation_time"] == 5.0  # both parts' time
    assert not list(tmp_path.rglob(".*.tmp"))


def test_two_records_on_one_file_are_refused(tmp_path: Path) -> None:
    records = [_record("qmsum", {None: 30.0}, strategy="x:y"), _record("qmsum", {None: 20.0}, strategy="x-y")]
    with pytest.raises(InputError, match="map to this MTEB file"):
        write_mteb(records, tmp_path)


def test_no_nan_and_no_percentages() -> None:
    result = mteb_result(_record("needle", {256: 100.0, 32768: 0.0}))
    values = [v for e in result["scores"].values() for k, v in e[0].items() if isinstance(v, float)]
    assert values and all(0.0 <= v <= 1.0 and not math.isnan(v) for v in values)
