"""Metric parity with pytrec_eval (trec_eval) on the same random runs and graded qrels."""

from __future__ import annotations

import random

import pytest
import pytrec_eval

from ragidx.evaluate.metrics import METRICS, evaluate, per_query

TREC = {
    "ndcg@10": "ndcg_cut_10",
    "ndcg@1": "ndcg_cut_1",
    "recall@1": "recall_1",
    "recall@10": "recall_10",
    "recall@100": "recall_100",
    "acc@1": "P_1",
}


def _random_case(seed: int, graded: bool) -> tuple[dict, dict]:
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(150)]
    qrels, run = {}, {}
    for q in range(40):
        n_relevant = rng.choice([1, 1, 2, 5])
        qrels[f"q{q}"] = {d: (rng.choice([1, 2, 3]) if graded else 1) for d in rng.sample(docs, n_relevant)}
        scores = rng.sample(range(10**6), 120)  # distinct scores: no tie-breaking differences
        ranked = sorted(zip(rng.sample(docs, 120), scores, strict=True), key=lambda p: -p[1])
        run[f"q{q}"] = [(d, s / 1e6) for d, s in ranked]
    return run, qrels


@pytest.mark.parametrize(("seed", "graded"), [(0, False), (1, True), (2, True)])
def test_metrics_match_pytrec_eval(seed: int, graded: bool) -> None:
    run, qrels = _random_case(seed, graded)
    ours = evaluate(run, qrels)
    trec_run = {q: dict(hits) for q, hits in run.items()}
    measures = {*TREC.values(), "recip_rank"}
    theirs = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(trec_run)
    top10 = {q: dict(hits[:10]) for q, hits in run.items()}
    mrr10 = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    for name, trec_name in TREC.items():
        if name == "acc@1" and graded:
            continue  # P_1 counts any relevant grade; identical, but checked on the binary case
        expected = sum(theirs[q][trec_name] for q in qrels) / len(qrels)
        assert ours[name] == pytest.approx(expected, abs=1e-9), name
    assert ours["mrr@10"] == pytest.approx(sum(mrr10[q]["recip_rank"] for q in qrels) / len(qrels), abs=1e-9)


def test_per_query_values_by_hand() -> None:
    scores = per_query(["a", "b", "c"], {"b": 1})
    assert scores["acc@1"] == 0 and scores["mrr@10"] == 0.5 and scores["recall@1"] == 0
    assert scores["ndcg@10"] == pytest.approx(1 / 1.584962500721156)
    assert set(scores) == set(METRICS)


def test_a_judged_query_missing_from_the_run_scores_zero() -> None:
    assert evaluate({}, {"q": {"d": 1}})["ndcg@10"] == 0.0
    with pytest.raises(ValueError, match="no query has a relevant document"):
        evaluate({}, {"q": {"d": 0}})
