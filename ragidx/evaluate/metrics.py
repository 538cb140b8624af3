"""Retrieval metrics over a ranked run and graded relevance judgements, as ``trec_eval`` defines them.

* ``ndcg@k``: gain = the judged relevance grade, discount ``1 / log2(rank + 1)``, normalised by the
  ideal ordering of all judged documents (trec_eval's ``ndcg_cut_k``);
* ``recall@k``: relevant documents in the top k / relevant documents (``recall_k``);
* ``mrr@10``: reciprocal rank of the first relevant document within the top 10 (0 if none);
* ``acc@1``: the top document is relevant (LongEmbed's synthetic metric; ``P_1``).

A run is ``{query id: [(doc id, score), …]}`` already in rank order. Queries judged but missing from
the run score 0; every judged query counts (the mean is over the qrels' queries with a relevant
document). Scores are percentages only in reports; here they are fractions in [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

Run = Mapping[str, Sequence[tuple[str, float]]]
Qrels = Mapping[str, Mapping[str, int]]

METRICS: tuple[str, ...] = ("ndcg@10", "ndcg@1", "acc@1", "recall@1", "recall@10", "recall@100", "mrr@10")


def per_query(ranked: Sequence[str], judged: Mapping[str, int]) -> dict[str, float]:
    """Every metric of :data:`METRICS` for one query's ranked document ids."""
    relevant = {d for d, grade in judged.items() if grade > 0}
    hits = [d in relevant for d in ranked]
    scores: dict[str, float] = {}
    for k in (10, 1):
        scores[f"ndcg@{k}"] = _ndcg(ranked[:k], judged, k)
    scores["acc@1"] = float(bool(hits[:1] and hits[0]))
    for k in (1, 10, 100):
        scores[f"recall@{k}"] = sum(hits[:k]) / len(relevant) if relevant else 0.0
    first = next((rank for rank, hit in enumerate(hits[:10], start=1) if hit), None)
    scores["mrr@10"] = 1.0 / first if first else 0.0
    return scores


def _ndcg(ranked: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    dcg = sum(max(judged.get(d, 0), 0) / math.log2(rank + 1) for rank, d in enumerate(ranked, start=1))
    ideal_gains = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    ideal = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal_gains, start=1))
    return dcg / ideal if ideal > 0 else 0.0


def evaluate(run: Run, qrels: Qrels) -> dict[str, float]:
    """Mean of each metric over the judged queries (those with at least one relevant document)."""
    judged = [q for q, docs in qrels.items() if any(g > 0 for g in docs.values())]
    if not judged:
        raise ValueError("no query has a relevant document")
    totals = dict.fromkeys(METRICS, 0.0)
    for qid in judged:
        ranked = [doc for doc, _ in run.get(qid, ())]
        for name, value in per_query(ranked, qrels[qid]).items():
            totals[name] += value
    return {name: total / len(judged) for name, total in totals.items()}
