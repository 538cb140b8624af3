"""``+rerank:<model>[:N][:w<W>]`` in ``ragidx eval``: a reranked strategy's run is its first stage's run
reranked by hand with the same :class:`~ragidx.search.rerank.Reranker`, its record keeps the first
stage's metrics and the reranker's cost, a selection cross-validates W running the model once, and a
bad spec is one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragidx.embed.encoder import Encoder
from ragidx.errors import ConfigError
from ragidx.evaluate.grid import EvalGrid
from ragidx.evaluate.metrics import evaluate
from ragidx.evaluate.report import file_part
from ragidx.evaluate.runner import evaluate_one, run_grid
from ragidx.evaluate.tasks import load_task
from ragidx.search.rerank import Reranker
from ragidx.search.trec import read_run_file
from ragidx.strategy import parse
from tests.evaluate.grids import tiny_grid

FIRST = "chunk:16:0"
N = 5


def _by_hand(
    reranker: Reranker, first: dict[str, float], query: str, corpus: dict[str, str], weight: float
) -> tuple[list[str], list[float]]:
    """A first-stage ranking reranked by hand: its N best by the cross-encoder, then the rest."""
    ids = list(first)
    done = reranker.rerank_ids(query, ids[:N], [first[d] for d in ids[:N]], corpus, weight=weight)
    return [r.doc_id for r in done.results] + ids[N:], [r.score for r in done.results]


def test_a_reranked_run_is_the_first_stage_reranked_by_hand(
    tiny_model: Path, tiny_encoder: Encoder, tiny_cross_encoder: Path, tmp_path: Path
) -> None:
    spec = f"{FIRST}+rerank:{tiny_cross_encoder}:{N}"
    results = run_grid(tiny_grid(tiny_model, tmp_path, [spec]), command="rerank")
    by = {r.strategy: r for r in results.records}
    assert list(by) == [FIRST, spec]  # the first stage is a record of its own, made first
    out = tmp_path / "out"
    record, first = by[spec], by[FIRST]
    name = f"chunk-16-0_rerank-{str(tiny_cross_encoder).replace('/', '_')}-{N}"
    assert name == file_part(spec) and record.run_file.startswith(f"runs/passkey__{name}__256__")
    reranked, before = read_run_file(out / record.run_file), read_run_file(out / first.run_file)
    reranker = Reranker.load(str(tiny_cross_encoder), "cpu", "auto")
    task = load_task("passkey", encoder=tiny_encoder, lengths=[256])
    (group,) = task.groups
    changed = 0
    for qid, query in group.queries.items():
        order, scores = _by_hand(reranker, before[qid], query, group.corpus, 0.0)
        assert list(reranked[qid]) == order
        assert list(reranked[qid].values())[:N] == pytest.approx(scores, abs=1e-6)
        assert list(reranked[qid].values()) == sorted(reranked[qid].values(), reverse=True)
        changed += order[:N] != list(before[qid])[:N]
    assert changed  # the random cross-encoder does reorder
    run = {q: list(r.items()) for q, r in reranked.items()}
    assert record.metrics == pytest.approx({k: 100 * v for k, v in evaluate(run, group.qrels).items()})
    assert record.parameters["first_stage"]["metrics"] == first.metrics
    assert record.parameters["first_stage"]["strategy"] == FIRST
    cost = record.parameters["rerank"]
    assert cost["top_n"] == N and cost["weight"] == 0.0 and cost["queries"] == len(group.queries)
    assert cost["pairs"] == cost["pairs_scored_now"] >= N * len(group.queries)
    assert 0 < cost["ms_per_query_p50"] <= cost["ms_per_query_max"]
    assert record.timing.tokens_embedded == 0
    again = run_grid(tiny_grid(tiny_model, tmp_path, [spec]), command="rerank")  # resumed, not redone
    assert [r.created for r in again.records] == [r.created for r in results.records]
    with pytest.raises(ValueError, match="rerank_one"):
        evaluate_one(task, str(tiny_model), parse(spec), 256, None, None, out, 0, None)  # type: ignore[arg-type]


def test_a_selection_cross_validates_the_weight_scoring_pairs_once(
    tiny_model: Path, tiny_encoder: Encoder, tiny_cross_encoder: Path, tmp_path: Path
) -> None:
    specs = [f"{FIRST}+rerank:{tiny_cross_encoder}:{N}:w{w}" for w in ("0", "0.5")]
    results = run_grid(tiny_grid(tiny_model, tmp_path, [], selections=[specs]), command="select")
    by = {r.strategy: r for r in results.records}
    assert list(by) == [FIRST, *specs, "select:" + "|".join(specs)]
    assert by[specs[0]].parameters["rerank"]["pairs_scored_now"] > 0
    assert by[specs[1]].parameters["rerank"]["pairs_scored_now"] == 0  # the same pairs: remembered
    times = [by[s].parameters["rerank"]["ms_per_query_mean"] for s in specs]
    assert times[1] == times[0]  # the model's time, not the lookup's
    before = read_run_file(tmp_path / "out" / by[FIRST].run_file)
    fused = read_run_file(tmp_path / "out" / by[specs[1]].run_file)
    reranker = Reranker.load(str(tiny_cross_encoder), "cpu", "auto")
    (group,) = load_task("passkey", encoder=tiny_encoder, lengths=[256]).groups
    for qid, query in group.queries.items():
        order, scores = _by_hand(reranker, before[qid], query, group.corpus, 0.5)
        assert list(fused[qid]) == order
        assert list(fused[qid].values())[:N] == pytest.approx(scores, abs=1e-6)
    selection = by["select:" + "|".join(specs)].parameters["selection"]
    assert set(selection[group.name]["fold_choices"]) <= set(specs)


def test_rerank_strategies_parse_and_bad_ones_are_one_line(tmp_path: Path) -> None:
    strategy = parse("chunk+bm25:auto+rerank:/models/ce:50:w0.3")
    assert (strategy.rerank_model, strategy.rerank_top_n, strategy.rerank_weight) == ("/models/ce", 50, 0.3)
    assert strategy.first_stage == parse("chunk+bm25:auto") and strategy.dense == parse("chunk")
    assert not parse("chunk+bm25:auto").reranked and parse("bm25+rerank:org/ce").first_stage.lexical_only
    assert parse("chunk+rerank:org/ce").rerank_top_n is None  # Rerank's default
    assert parse("chunk+rerank:/m:odd:7").rerank_model == "/m:odd"  # a ':' the grammar does not claim
    for bad, says in [
        ("rerank:/m", "comes last"),
        ("chunk+rerank:/m+bm25:auto", "comes last"),
        ("chunk+rerank:/m:0", "give 1 to 100"),
        ("chunk+rerank:/m:101", "give 1 to 100"),
        ("chunk+rerank:/m:w1.5", "outside [0, 1]"),
        ("chunk+rerank:/m:w.", "not a number"),
        ("chunk+rerank::50", "needs a cross-encoder"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(says)) as caught:
            EvalGrid(tasks=["passkey"], strategies=[bad], out=str(tmp_path))
        assert "\n" not in str(caught.value)
