"""``bm25`` and ``+bm25:…`` in ragidx eval: BM25 as the lexical index scores it, fusion as the
retriever fuses (against a brute force and against the retriever itself), ``bm25:auto`` by
cross-validation, and a tiny grid end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragidx.evaluate.embedding import Embedded
from ragidx.evaluate.lexical import LexicalGroup, LexicalScores, score_group
from ragidx.evaluate.metrics import evaluate, per_query
from ragidx.evaluate.report import markdown, read_results
from ragidx.evaluate.runner import run_grid
from ragidx.evaluate.scoring import LexicalFusion, bm25_rankings, fused_rankings, rank
from ragidx.evaluate.selection import cross_validate
from ragidx.evaluate.tasks import TaskGroup
from ragidx.index.config import LexicalConfig
from ragidx.index.lexical import LexicalIndex
from ragidx.search.fusion import WEIGHTS, zscore
from ragidx.search.trec import read_run_file
from tests.evaluate.grids import tiny_grid
from tests.index.test_lexical import _reference

TOPICS = ["bees waggle dance", "river stone bridge", "copper lamp wick", "sourdough starter flour"]
FILLER = ["garden", "paper", "music", "winter", "orange", "harbor", "window", "light"]


def _group(n_docs: int = 15, seed: int = 0) -> TaskGroup:
    """Documents about one of four topics each (and filler); queries on a topic, one of stop words
    only, one whose words no document holds. Each topic query is judged relevant to its documents."""
    rng = np.random.default_rng(seed)
    corpus = {}
    for i in range(n_docs):
        words = " ".join(rng.choice(FILLER, size=8 + 3 * (i % 5)))
        corpus[f"d{i:02d}"] = f"{TOPICS[i % 4]} {words} " + (TOPICS[i % 4].split()[0] + " ") * (i % 3)
    queries = {f"q{t}": f"the {topic} of the {FILLER[t]}" for t, topic in enumerate(TOPICS)}
    queries |= {"stop": "the of and to", "nothing": "zebra quartz"}
    qrels = {f"q{t}": {d: 1 for j, d in enumerate(corpus) if j % 4 == t} for t in range(len(TOPICS))}
    qrels |= {"stop": {"d00": 1}, "nothing": {"d01": 1}}
    return TaskGroup("all", corpus, queries, qrels)


def test_bm25_scores_equal_the_lexical_index_and_its_top() -> None:
    group = _group()
    scored = score_group(group)
    index = LexicalIndex.empty(LexicalConfig())
    index.add_texts(list(group.corpus), group.corpus.values())
    for i, query in enumerate(group.queries.values()):
        assert scored.scores[i] == pytest.approx(index.scores(query), abs=1e-6)
        reference = _reference(LexicalConfig(), group.corpus, query)  # written out term by term
        assert scored.scores[i] == pytest.approx([reference[d] for d in group.corpus], abs=1e-5)
    assert scored.searchable.tolist() == [True, True, True, True, False, True]
    ranked = bm25_rankings(scored)
    for query, hits in zip(group.queries.values(), ranked, strict=True):
        assert [d for d, _ in hits] == [d for d, _ in index.top(query, 100)]
        assert [s for _, s in hits] == pytest.approx([s for _, s in index.top(query, 100)])
    assert ranked[4] == [] and ranked[5] == []  # stop words only; words no document holds
    assert scored.index_bytes == len(index.to_bytes()) and scored.doc_ids == list(group.corpus)


def test_scores_are_computed_once_per_group_content() -> None:
    lexical = LexicalScores()
    first = lexical.group(_group())
    assert lexical.group(_group()) is first  # the same content: not analysed again
    assert lexical.group(_group(seed=1)) is not first


def _brute_force(
    dense: np.ndarray, bm25: np.ndarray, doc_ids: list[str], weight: float | None, k: int, fetch: int
) -> list[tuple[str, float]]:
    """One query of a hybrid search written out: the union of both sides' best ``fetch`` (BM25 above
    zero; ties: the earlier document), z-scores (population standard deviation) or competition-rank
    RRF over the union, the ``k`` best by fused score, then document id."""
    n = len(doc_ids)
    by_dense = sorted(range(n), key=lambda j: (-dense[j], j))[:fetch]
    by_bm25 = sorted((j for j in range(n) if bm25[j] > 0), key=lambda j: (-bm25[j], j))[:fetch]
    union = sorted(set(by_dense) | set(by_bm25))
    d = [float(dense[j]) for j in union]
    b = [float(bm25[j]) for j in union]

    def z(values: list[float]) -> list[float]:
        mean = sum(values) / len(values)
        std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
        return [(v - mean) / std if std > 0 else 0.0 for v in values]

    if weight is None:
        fused = [
            1 / (60 + 1 + sum(o > x for o in d)) + (1 / (60 + 1 + sum(o > y for o in b)) if y > 0 else 0.0)
            for x, y in zip(d, b, strict=True)
        ]
    else:
        fused = [weight * zb + (1 - weight) * zd for zb, zd in zip(z(b), z(d), strict=True)]
    order = sorted(range(len(union)), key=lambda i: (-fused[i], doc_ids[union[i]]))[:k]
    return [(doc_ids[union[i]], fused[i]) for i in order]


@pytest.mark.parametrize("weight", [0.0, 0.3, 0.7, 1.0, None])
@pytest.mark.parametrize(("k", "fetch"), [(4, 5), (3, 100)])
def test_fused_rankings_equal_a_brute_force_hybrid_search(weight: float | None, k: int, fetch: int) -> None:
    group = _group()
    scored = score_group(group)
    rng = np.random.default_rng(1)
    dense = rng.normal(size=(len(group.queries), len(group.corpus))).astype(np.float32)
    dense[1, 3] = dense[1, 7]  # a tie on the dense side
    ranked = fused_rankings(dense, scored, weight, k=k, fetch=fetch)
    for q, hits in enumerate(ranked):
        if not scored.searchable[q]:  # stop words only: the dense ranking, as the retriever falls back
            order = np.argsort(-dense[q], kind="stable")[:k]
            assert hits == [(scored.doc_ids[j], float(dense[q, j])) for j in order]
            continue
        expected = _brute_force(dense[q], scored.scores[q], scored.doc_ids, weight, k, fetch)
        assert [d for d, _ in hits] == [d for d, _ in expected]
        assert [s for _, s in hits] == pytest.approx([s for _, s in expected], abs=1e-9)
    assert len(ranked[0]) == k


@pytest.mark.parametrize("weight", [0.3, "rrf"])
def test_fused_rankings_match_the_retriever(
    weight: float | str, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same documents ingested and searched in mode hybrid (3 candidates a side, so the union is
    a part of the 12 documents) and scored by the evaluation from every document's dense score."""
    from ragidx.index.directory import Index
    from ragidx.search import retriever
    from ragidx.search.options import SearchOptions
    from tests.search.test_hybrid_search import topic_index

    index = Index.open(topic_index(tmp_path, tiny_model))
    assert index.lexical is not None
    doc_ids = index.lexical.doc_ids
    queries = ["waggle dance of bees", "a stone bridge over the river", "lamp", "flour and bees"]
    corpus = {d: index.document(d).text for d in doc_ids}
    group = TaskGroup("all", corpus, {str(i): q for i, q in enumerate(queries)}, {})
    dense_hits = retriever.Retriever(index).search_many(queries, k=12, options=SearchOptions(mode="dense"))
    dense = np.array([[next(h.score for h in hits if h.doc_id == d) for d in doc_ids] for hits in dense_hits])
    monkeypatch.setattr(retriever, "HYBRID_CANDIDATES", 3)
    options = SearchOptions(mode="hybrid", lexical_weight=weight)  # type: ignore[arg-type]
    found = retriever.Retriever(index).search_many(queries, k=3, options=options)
    fixed = None if weight == "rrf" else float(weight)
    ranked = fused_rankings(dense, score_group(group), fixed, k=3, fetch=3)
    for hits, mine in zip(found, ranked, strict=True):
        assert [h.doc_id for h in hits] == [d for d, _ in mine]
        assert [h.score for h in hits] == pytest.approx([s for _, s in mine], abs=1e-5)


def test_bm25_auto_is_chosen_by_cross_validation_deterministically() -> None:
    group = _group(n_docs=24)
    for t in range(6, 16):  # more judged topic queries, so that five folds have something to choose
        group.queries[f"x{t}"] = f"{TOPICS[t % 4]} {FILLER[t % 8]}"
        group.qrels[f"x{t}"] = {d: 1 for j, d in enumerate(group.corpus) if j % 4 == t % 4}
    scored = score_group(group)
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(len(group.corpus), 8)).astype(np.float32)
    docs = Embedded(list(group.corpus), vectors, np.arange(len(group.corpus)))
    queries = rng.normal(size=(len(group.queries), 8)).astype(np.float32)
    fusion = LexicalFusion(scored, weight=None, tune=True)
    ranked, tuning = rank(queries, docs, group, "ndcg@10", seed=0, lexical=fusion)
    again, same = rank(queries, docs, group, "ndcg@10", seed=0, lexical=fusion)
    assert (ranked, tuning) == (again, same)
    assert set(tuning) == {"lexical_tuning"}
    chosen = tuning["lexical_tuning"]
    # the same choice by hand: each fold ranked with the weight best on the other four
    dense = queries @ vectors.T
    qids = list(group.queries)

    def score(weight: float) -> np.ndarray:
        runs = fused_rankings(dense, scored, weight)
        hits = [[d for d, _ in r] for r in runs]
        return np.array([per_query(h, group.qrels[q])["ndcg@10"] for q, h in zip(qids, hits, strict=True)])

    _, folds = cross_validate(score, len(qids), WEIGHTS, seed=0)
    assert chosen["fold_weights"] == [w for w, _ in folds]
    means = [score(w).mean() for w in WEIGHTS]
    assert chosen["weight_on_all_queries"] == WEIGHTS[int(np.argmax(means))]  # ties: the smaller weight
    assert chosen["weight_on_all_queries"] >= 0.5  # random vectors, telling words: BM25 carries it
    for weight, held in folds:
        fold_runs = fused_rankings(dense, scored, weight)
        assert all(ranked[i] == fold_runs[i] for i in held)


def test_a_fixed_weight_is_not_tuned_and_zscores_are_the_fusions() -> None:
    group = _group()
    scored = score_group(group)
    docs = Embedded(list(group.corpus), np.eye(len(group.corpus), dtype=np.float32), np.arange(15))
    queries = np.random.default_rng(4).normal(size=(len(group.queries), 15)).astype(np.float32)
    ranked, tuning = rank(queries, docs, group, "ndcg@10", 0, lexical=LexicalFusion(scored, 1.0))
    assert tuning == {}
    candidates = [d for d, _ in ranked[0]]  # weight 1: by BM25 alone among the candidates
    z = zscore(scored.scores[0].astype(np.float64))  # every document is a candidate here
    assert [s for _, s in ranked[0]] == pytest.approx(sorted(z, reverse=True)[: len(candidates)])


def _tiny_grid_records(tiny_model: Path, tmp_path: Path, strategies: list[str], **extra):
    return run_grid(tiny_grid(tiny_model, tmp_path, strategies, **extra), command="lexical")


def test_grid_runs_bm25_and_hybrids_end_to_end(tiny_model: Path, tmp_path: Path) -> None:
    specs = ["bm25", "chunk:32:0", "chunk:32:0+bm25:auto", "chunk:32:0+bm25:rrf"]
    specs.append("chunk:32:0+best:2+bm25:0.5")
    results = _tiny_grid_records(tiny_model, tmp_path, specs, selections=[["chunk:32:0", "bm25"]])
    out = tmp_path / "out"
    by_spec = {r.strategy: r for r in results.records}
    assert list(by_spec) == [*specs, "select:chunk:32:0|bm25"]
    bm25 = by_spec["bm25"]
    assert bm25.max_length is None
    assert bm25.run_file.startswith("runs/passkey__bm25__window__")
    assert bm25.run_file.endswith("__256.trec.gz")
    assert bm25.timing.docs_embedded == bm25.timing.docs_cached == bm25.timing.queries_embedded == 0
    assert bm25.groups[0].embed_modes == {"bm25": 100} and bm25.parameters["vectors_per_doc"] == 0
    assert bm25.parameters["lexical"]["k1"] == 1.5 and bm25.parameters["lexical"]["stemmer"] == "english"
    assert bm25.score > 90  # the query names the person whose document it is
    auto = by_spec["chunk:32:0+bm25:auto"]
    assert auto.run_file.startswith("runs/passkey__chunk-32-0_bm25-auto__256__")
    assert auto.timing.docs_embedded == 0 and auto.timing.docs_cached == 100  # chunk's vectors
    tuning = auto.parameters["lexical_tuning"]["256"]
    assert len(tuning["fold_weights"]) == 5 and tuning["weight_on_all_queries"] in WEIGHTS
    assert auto.parameters["lexical"]["fusion"] == "auto"
    assert by_spec["chunk:32:0+bm25:rrf"].parameters["lexical"]["fusion"] == "rrf"
    fixed = by_spec["chunk:32:0+best:2+bm25:0.5"]
    assert fixed.parameters["lexical"]["weight"] == 0.5 and fixed.parameters["long_doc"]["best_chunks"] == 2
    chunk = by_spec["chunk:32:0"]
    assert fixed.parameters["vectors_per_doc"] == chunk.parameters["vectors_per_doc"]
    assert fixed.parameters["index_bytes_per_doc"] == pytest.approx(
        chunk.parameters["index_bytes_per_doc"] + fixed.parameters["lexical_bytes_per_doc"]
    )
    qrels = _passkey_qrels(tiny_model)
    for record in results.records:  # every run file read back scores as its record says
        run = read_run_file(out / record.run_file)
        ranked = {q: sorted(h.items(), key=lambda p: -p[1]) for q, h in run.items()}
        assert evaluate(ranked, qrels)["acc@1"] * 100 == pytest.approx(record.metrics["acc@1"], abs=1e-6)
    table = (out / "results.md").read_text()
    assert "## BM25 and hybrids" in table and "| bm25 |" in table
    assert "| chunk:32:0+bm25:auto @256 |" in table and "bm25 w" in table
    assert "bm25" not in table.split("## Whole document vs chunking")[1].split("##")[0]
    assert (out / "plots" / f"passkey__{tiny_model.name}__tradeoff.png").is_file()
    assert read_results(out).records == results.records
    assert markdown(read_results(out)) == table


def _passkey_qrels(tiny_model: Path) -> dict[str, dict[str, int]]:
    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import Encoder
    from ragidx.evaluate.tasks import load_task

    encoder = Encoder(EncoderConfig(model=str(tiny_model), device="cpu"))
    return load_task("passkey", encoder=encoder, lengths=[256]).groups[0].qrels


def test_a_rerun_keeps_bm25_records(tiny_model: Path, tmp_path: Path) -> None:
    first = _tiny_grid_records(tiny_model, tmp_path, ["bm25"])
    again = _tiny_grid_records(tiny_model, tmp_path, ["bm25", "truncate+bm25:0.7"])
    assert again.records[0] == first.records[0]  # done earlier: not recomputed
    assert [r.strategy for r in again.records] == ["bm25", "truncate+bm25:0.7"]
    assert again.records[1].max_length is None  # truncate ignores L_t, so does its hybrid


def test_lexical_group_scores_are_float32() -> None:
    scored: LexicalGroup = score_group(_group())
    assert scored.scores.dtype == np.float32 and scored.bytes_per_doc > 0


def test_hybrid_auto_and_bm25_auto_together_choose_a_pair_of_weights() -> None:
    group = _group(n_docs=12)
    scored = score_group(group)
    rng = np.random.default_rng(5)
    chunks = rng.normal(size=(24, 6)).astype(np.float32)
    documents = rng.normal(size=(12, 6)).astype(np.float32)
    docs = Embedded(list(group.corpus), chunks, np.arange(0, 24, 2), documents=documents)
    queries = rng.normal(size=(len(group.queries), 6)).astype(np.float32)
    fusion = LexicalFusion(scored, weight=None, tune=True)
    ranked, tuning = rank(queries, docs, group, "ndcg@10", 0, tune_hybrid=True, lexical=fusion)
    assert set(tuning) == {"hybrid_tuning", "lexical_tuning"}
    hybrid, lexical = tuning["hybrid_tuning"]["fold_weights"], tuning["lexical_tuning"]["fold_weights"]
    pairs = list(zip(hybrid, lexical, strict=True))
    assert len(pairs) == 5 and all(h in WEIGHTS and b in WEIGHTS for h, b in pairs)
    assert rank(queries, docs, group, "ndcg@10", 0, tune_hybrid=True, lexical=fusion) == (ranked, tuning)
    with pytest.raises(ValueError, match="different documents"):
        other = Embedded(list(reversed(group.corpus)), chunks, np.arange(0, 24, 2), documents=documents)
        rank(queries, other, group, "ndcg@10", 0, lexical=fusion)
