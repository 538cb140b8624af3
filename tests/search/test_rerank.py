"""Tests for ragidx.search.rerank: a tiny random cross-encoder gives exactly ``CrossEncoder.predict``'s
scores on the passages chosen, the ranking follows them, long passages are split (never truncated),
and ``Index.search(rerank=…)`` returns reranked results whose passage is the one preferred."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from sentence_transformers import CrossEncoder

from ragidx.embed.models import ModelPathError
from ragidx.errors import ConfigError, ModelError
from ragidx.index.directory import Index
from ragidx.search.fusion import zscore
from ragidx.search.options import Rerank
from ragidx.search.passages import chunks, ranked_chunks
from ragidx.search.rerank import Candidate, Reranker
from ragidx.search.retriever import SearchNote
from ragidx.search.snippets import Terms
from tests.conftest import long_text
from tests.search.test_hybrid_search import topic_index

QUERY = "bees waggle dance"


@pytest.fixture(scope="module")
def reranker(tiny_cross_encoder: Path) -> Reranker:
    return Reranker.load(str(tiny_cross_encoder), "cpu", "float32")


@pytest.fixture(scope="module")
def reference(tiny_cross_encoder: Path) -> CrossEncoder:
    """The same folder loaded by sentence-transformers itself."""
    return CrossEncoder(str(tiny_cross_encoder), device="cpu")


@pytest.fixture(scope="module")
def corpus_index(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    return topic_index(tmp_path_factory.mktemp("rerank"), tiny_model)


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text)


def test_scores_are_cross_encoder_predict(reranker: Reranker, reference: CrossEncoder) -> None:
    texts = ["Bees dance to say where flowers are.", "A river runs under the stone bridge.", long_text(20)]
    candidates = [
        Candidate("a", texts[0], 0.3, [(0, 4), (5, len(texts[0]))]),
        Candidate("b", texts[1], 0.9, [(0, len(texts[1]))]),
        Candidate("c", texts[2], 0.5, [(0, 40), (41, 90), (91, 130)]),
    ]
    run = reranker.rerank(QUERY, candidates, passages=2)
    pairs = [(QUERY, c.text[lo:hi]) for c in candidates for lo, hi in list(c.passages or [])[:2]]
    expected = reference.predict(pairs, batch_size=32, show_progress_bar=False)
    assert run.pairs == len(pairs) == 5
    by_doc = {r.doc_id: r for r in run.results}
    at = 0
    for c in candidates:
        mine = expected[at : at + min(2, len(c.passages or []))]
        at += len(mine)
        found = by_doc[c.doc_id]
        assert found.rerank_score == float(np.max(mine))  # exactly predict's score, in the same batch
        best = list(c.passages or [])[int(np.argmax(mine))]
        assert found.span == best and found.score == found.rerank_score
        assert found.first_stage_score == c.score and found.pieces == len(mine) and found.split == 0
        one = reference.predict([(QUERY, c.text[best[0] : best[1]])], show_progress_bar=False)
        np.testing.assert_allclose(found.rerank_score, one[0], rtol=0, atol=1e-6)  # alone: the same
    scores = [r.score for r in run.results]
    assert scores == sorted(scores, reverse=True)
    assert [r.position for r in run.results] == sorted(range(3), key=lambda i: -by_doc["abc"[i]].score)


def test_ties_keep_the_first_stage_order(reranker: Reranker) -> None:
    same = "The same passage, word for word."
    candidates = [Candidate(d, same, s) for d, s in (("x", 0.1), ("y", 0.9), ("z", 0.5))]
    run = reranker.rerank(QUERY, candidates)
    assert [r.doc_id for r in run.results] == ["x", "y", "z"]
    assert len({r.score for r in run.results}) == 1


def test_weight_fuses_the_first_stage(reranker: Reranker) -> None:
    texts = [long_text(30, seed=s) for s in range(5)]
    first = [5.0, 4.0, 3.0, 2.0, 1.0]
    pure = reranker.rerank_ids(QUERY, list("abcde"), first, dict(zip("abcde", texts, strict=True)))
    raw = {r.doc_id: r.rerank_score for r in pure.results}
    rerank = np.array([raw[d] for d in "abcde"])
    for weight in (0.3, 1.0):
        run = reranker.rerank_ids(
            QUERY, list("abcde"), first, lambda d: texts["abcde".index(d)], weight=weight
        )
        fused = (1 - weight) * zscore(rerank) + weight * zscore(np.array(first))
        got = {r.doc_id: r.score for r in run.results}
        np.testing.assert_allclose([got[d] for d in "abcde"], fused, atol=1e-9)
        assert [r.doc_id for r in run.results] == [d for _, d in sorted(zip(-fused, "abcde", strict=True))]
    assert [r.doc_id for r in run.results] == list("abcde")  # weight 1: the first stage's order


def test_a_long_passage_is_split_not_truncated(reranker: Reranker, reference: CrossEncoder) -> None:
    text = long_text(300, seed=3)
    run = reranker.rerank(QUERY, [Candidate("long", text, 1.0, [(0, len(text))])], passages=1)
    (found,) = run.results
    assert found.split == 1 and found.pieces == run.pairs > 4
    windows = reranker._pieces(
        text, 0, len(text), reranker.window - reranker.specials - reranker._count(QUERY)
    )
    assert len(windows) == found.pieces
    assert [w for lo, hi in windows for w in _words(text[lo:hi])] == _words(text)  # every word, once
    lengths = reranker.pair_lengths([(QUERY, text[lo:hi]) for lo, hi in windows])
    assert max(lengths) <= reranker.window == 64  # predict never cuts a pair
    assert max(lengths) >= reranker.window - 12  # pieces as long as they can be (a sentence is 13 tokens)
    scores = reference.predict([(QUERY, text[lo:hi]) for lo, hi in windows], show_progress_bar=False)
    assert found.rerank_score == float(scores.max()) and found.span == windows[int(scores.argmax())]


def test_without_passages_the_windows_with_the_query_words_are_read(reranker: Reranker) -> None:
    text = long_text(200, seed=4) + " Here the bees waggle and dance. " + long_text(100, seed=5)
    at = text.index("the bees waggle")
    run = reranker.rerank(QUERY, [Candidate("doc", text, 1.0)], passages=1)
    (found,) = run.results
    assert found.pieces == 1 and found.split == 0 and found.passage == -1
    assert found.span[0] <= at < found.span[1]


def test_a_long_query_is_cut_with_a_note(reranker: Reranker) -> None:
    query = " ".join(["waggle"] * 200)
    with pytest.warns(SearchNote, match="reads its first"):
        run = reranker.rerank(query, [Candidate("doc", long_text(100), 1.0)])
    assert run.pairs >= 1


def test_loaded_once_and_bad_models(reranker: Reranker, tiny_cross_encoder: Path, tiny_model: Path) -> None:
    assert Reranker.load(str(tiny_cross_encoder), "cpu", "float32") is reranker
    with pytest.raises(ModelPathError, match="rerank model /no/such/folder: no such folder"):
        Reranker.load("/no/such/folder", "cpu", "float32")
    with pytest.raises(ModelError, match="not a cross-encoder"):
        Reranker.load(str(tiny_model), "cpu", "float32")


def test_rerank_specs() -> None:
    assert Rerank.parse("org/model:7") == Rerank(model="org/model", top_n=7)
    assert Rerank.parse("./folder") == Rerank(model="./folder", top_n=50)
    assert Rerank.parse("C:models") == Rerank(model="C:models")  # not a number: part of the name
    for bad in ("m:0", "m:-3"):
        with pytest.raises(ConfigError, match=r"give 1 or more \(MODEL\[:N\]"):
            Rerank.parse(bad)
    with pytest.raises(ConfigError, match="top_n"):
        Rerank.of({"model": "m", "top_n": 0})
    with pytest.raises(ConfigError, match="model"):
        Rerank.parse("")


def test_ranked_chunks_interleave_dense_and_words(corpus_index: Path) -> None:
    index = Index.open(corpus_index)
    doc_id = next(d for d in index.store.doc_ids() if len(chunks(index, d)) >= 3)
    text = index.document(doc_id).text
    records = chunks(index, doc_id)
    cosines = np.linspace(0, 1, len(records))  # the last chunk is the dense best
    order = ranked_chunks(records, text, Terms(QUERY), cosines)
    assert sorted(order) == list(range(len(records))) and order[0] == len(records) - 1
    by_words = ranked_chunks(records, text, Terms(QUERY))
    has_words = [i for i, r in enumerate(records) if Terms(QUERY).spans(text, r.char_start, r.char_end)]
    assert set(by_words[: len(has_words)]) == set(has_words)  # the chunks holding query words first


@pytest.mark.parametrize("mode", ["hybrid", "dense", "lexical"])
def test_index_search_reranks(
    corpus_index: Path, tiny_cross_encoder: Path, reference: CrossEncoder, mode: str
) -> None:
    index = Index.open(corpus_index)
    first = index.search(QUERY, 6, mode=mode)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        results = index.search(QUERY, 4, mode=mode, rerank=f"{tiny_cross_encoder}:6")  # type: ignore[arg-type]
    assert len(results) == min(4, len(first))  # lexical: only the documents holding a query word
    assert [r.rank for r in results] == list(range(1, len(results) + 1))
    assert {r.doc_id for r in results} <= {r.doc_id for r in first}
    scores = [r.score for r in results]
    assert scores == sorted(scores, reverse=True)
    first_rank = {r.doc_id: (r.rank, r.score) for r in first}
    for r in results:
        info = r.rerank
        assert info is not None and info["model"] == f"{tiny_cross_encoder}" and info["ms"] > 0
        assert (info["first_stage_rank"], info["first_stage_score"]) == pytest.approx(first_rank[r.doc_id])
        span = (info["char_start"], info["char_end"])
        assert (
            r.passage_span == {"char_start": span[0], "char_end": span[1]}
            and r.passage == r.text[slice(*span)]
        )
        assert r.match is not None and span[0] <= r.match["char_start"] < span[1]  # the snippet is in it
        one = reference.predict([(QUERY, r.passage)], show_progress_bar=False)
        np.testing.assert_allclose(info["score"], one[0], rtol=0, atol=1e-6)
        assert r.score == info["score"]
        if r.chunk is not None:  # the chunk holding the preferred passage
            assert r.chunk["char_start"] <= span[0] and span[1] <= r.chunk["char_end"]
        assert "rerank" in r.to_dict()


def test_index_search_reads_each_documents_best_chunks(
    corpus_index: Path, tiny_cross_encoder: Path, reference: CrossEncoder
) -> None:
    """A chunked document's score is the max of predict over its K best chunks by the first stage."""
    index = Index.open(corpus_index)
    results = index.search(QUERY, 3, mode="dense", rerank=Rerank(model=str(tiny_cross_encoder), passages=2))
    qv, _ = index.encoder.embed([QUERY], role="query")
    for r in results:
        records = chunks(index, r.doc_id)
        assert records, "the corpus' documents are chunked"
        cosines = index.reconstruct(np.array([x.vid for x in records])) @ qv[0]
        analyzer = index.lexical.analyzer if index.lexical is not None else None
        best = [records[i] for i in ranked_chunks(records, r.text, Terms(QUERY, analyzer), cosines)[:2]]
        scores = reference.predict([(QUERY, r.text[x.char_start : x.char_end]) for x in best])
        assert r.rerank is not None and r.rerank["passages"] == 2 and r.rerank["split"] == 0
        np.testing.assert_allclose(r.rerank["score"], scores.max(), rtol=0, atol=1e-6)


def test_index_search_per_chunk_and_bad_settings(corpus_index: Path, tiny_cross_encoder: Path) -> None:
    index = Index.open(corpus_index)
    results = index.search(QUERY, 3, mode="dense", per="chunk", rerank=str(tiny_cross_encoder))
    for r in results:
        assert r.chunk is not None and r.rerank is not None
        assert r.chunk["char_start"] <= r.rerank["char_start"] and r.rerank["char_end"] <= r.chunk["char_end"]
    with pytest.raises(ConfigError, match="give 1 or more"):
        index.search(QUERY, 3, rerank=f"{tiny_cross_encoder}:0")
    with pytest.raises(ModelPathError, match="no such folder"):
        index.search(QUERY, 3, rerank="./not-here:5")


def test_a_whole_text_is_tokenized_once_across_queries(tiny_cross_encoder: Path) -> None:
    """A run reranks the same documents query after query: each whole text is tokenized once (the
    next queries reuse its tokens and sentence ends), and the results are what a fresh reranker gives."""
    texts = {d: long_text(150, seed=s) + " Here the bees waggle and dance. " for d, s in (("a", 6), ("b", 7))}
    queries = [QUERY, "where are the flowers", QUERY]
    fresh = [
        Reranker(Reranker.load(str(tiny_cross_encoder), "cpu", "float32").model, "fresh") for _ in queries
    ]
    reranker = Reranker(fresh[0].model, "cached")
    calls: list[int] = []
    real = reranker.tokenizer.__call__

    def counting(text: object, *args: object, **kwargs: object) -> object:
        if isinstance(text, str) and text in texts.values():
            calls.append(len(text))
        return real(text, *args, **kwargs)

    reranker.tokenizer = cast(Any, counting)
    runs = [reranker.rerank_ids(q, ["a", "b"], [1.0, 0.5], texts, passages=2) for q in queries]
    assert len(calls) == 2  # one per document, not one per query and document
    for query, run, other in zip(queries, runs, fresh, strict=True):
        again = other.rerank_ids(query, ["a", "b"], [1.0, 0.5], texts, passages=2)
        assert [(r.doc_id, r.span, r.rerank_score) for r in run.results] == [
            (r.doc_id, r.span, r.rerank_score) for r in again.results
        ]
