"""The lexical index (ragidx.index.lexical) against a slow, obviously correct BM25 on small corpora."""

from __future__ import annotations

import io
import math
import random
from collections import Counter
from typing import TypeVar

import numpy as np
import pytest

from ragidx.errors import ConfigError, IndexFormatError
from ragidx.index.config import LexicalConfig
from ragidx.index.lexical import Analyzer, LexicalIndex, Postings, analyse

K = TypeVar("K")
WORDS = "bee hive honey dance waggle flower pollen queen drone worker river stone bridge lamp".split()  # noqa: SIM905


def _corpus(n: int, seed: int) -> dict[str, str]:
    rng = random.Random(seed)
    return {f"d{i:02d}": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40))) for i in range(n)}


def _reference(config: LexicalConfig, corpus: dict[str, str], query: str) -> dict[str, float]:
    """The lexical score written out: a document's BM25, plus (passage_terms P > 0) the best BM25
    among its passages (P terms starting every P // 2, until one reaches the end; BM25 statistics
    over all passages)."""
    analyzer = Analyzer(config)
    terms = {d: analyzer.terms(t) for d, t in corpus.items()}
    out = _bm25(config, {d: Counter(t) for d, t in terms.items()}, analyzer.terms(query))
    size = config.passage_terms
    if size:
        passages = {}
        for d, seq in terms.items():
            starts = [0]
            while starts[-1] + size < len(seq):
                starts.append(starts[-1] + size // 2)
            passages |= {(d, s): Counter(seq[s : s + size]) for s in starts}
        scored = _bm25(config, passages, analyzer.terms(query))
        for d in corpus:
            out[d] += max(v for (owner, _), v in scored.items() if owner == d)
    return out


def _bm25(config: LexicalConfig, docs: dict[K, Counter[str]], query: list[str]) -> dict[K, float]:
    """BM25 written out term by term: Lucene's idf, no (k1 + 1) factor, repeated query terms count."""
    lengths = {d: sum(c.values()) for d, c in docs.items()}
    avgdl = sum(lengths.values()) / len(docs)
    out = dict.fromkeys(docs, 0.0)
    for term in query:
        df = sum(1 for c in docs.values() if term in c)
        idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        for d, counts in docs.items():
            tf = counts[term]
            if tf:
                norm = config.k1 * (1 - config.b + config.b * lengths[d] / max(avgdl, 1e-9))
                out[d] += idf * tf / (tf + norm)
    return out


def _scores(index: LexicalIndex, query: str) -> dict[str, float]:
    scores = index.scores(query).tolist()
    return dict(zip(index.doc_ids, scores, strict=True))


def test_analyzer_stop_words_stemming_case_and_scripts() -> None:
    analyzer = Analyzer(LexicalConfig())
    assert analyzer.terms("The Bees are dancing in the Hives!") == ["bee", "danc", "hive"]
    assert analyzer.terms("the of and, to ...") == []  # Lucene's stop words
    assert analyzer.terms("a 7 x") == []  # one-character tokens are not terms
    assert analyzer.terms("蜜蜂跳舞") == ["蜜蜂", "蜂跳", "跳舞"]  # CJK: character bigrams
    assert analyzer.terms("蜂 bee") == ["蜂", "bee"]
    assert analyzer.terms("النحل يرقص") == ["النحل", "يرقص"]  # no Arabic stemmer asked: words kept
    plain = Analyzer(LexicalConfig(stemmer="none", stopwords="none", lowercase=False))
    assert plain.terms("The Bees dancing") == ["The", "Bees", "dancing"]
    assert Analyzer(LexicalConfig(stemmer="german")).terms("Bienen tanzen") == ["bien", "tanz"]
    with pytest.raises(ConfigError, match="no such Snowball stemmer"):
        Analyzer(LexicalConfig(stemmer="klingon"))


@pytest.mark.parametrize(
    "config",
    [
        LexicalConfig(),
        LexicalConfig(passage_terms=8),
        LexicalConfig(passage_terms=0),
        LexicalConfig(k1=0.9, b=0.4, stemmer="none", passage_terms=5),
    ],
)
def test_bm25_matches_the_reference(config: LexicalConfig) -> None:
    corpus = _corpus(30, seed=1)
    index = LexicalIndex.empty(config)
    index.add_texts(list(corpus), list(corpus.values()))
    for query in ("bee dance", "honey honey river", "queen pollen stone lamp", "nothing here"):
        expected = _reference(config, corpus, query)
        got = _scores(index, query)
        assert got == pytest.approx(expected, abs=1e-5)
        top = index.top(query, 5)
        assert [d for d, _ in top] == sorted(
            (d for d in expected if expected[d] > 0), key=lambda d: -expected[d]
        )[: len(top)] or query == "nothing here"


@pytest.mark.parametrize("passage_terms", [256, 6, 0])
def test_incremental_updates_equal_a_fresh_build(passage_terms: int) -> None:
    config = LexicalConfig(passage_terms=passage_terms)
    corpus = _corpus(40, seed=2)
    index = LexicalIndex.empty(config)
    ids = list(corpus)
    index.add_texts(ids[:25], [corpus[d] for d in ids[:25]])
    index.flush()
    index.remove(["d03", "d10", "nope"])
    index.add_texts(ids[25:], [corpus[d] for d in ids[25:]])
    changed = {"d05": "a new text about the queen and her stone bridge", "d30": "lamp lamp lamp"}
    index.add_texts(list(changed), list(changed.values()))  # replaces the same ids
    index.remove(["d31"])  # removed while still pending
    final = {d: t for d, t in corpus.items() if d not in ("d03", "d10", "d31")} | changed
    fresh = LexicalIndex.empty(config)
    fresh.add_texts(list(final), list(final.values()))
    assert sorted(index.doc_ids) == sorted(final)
    for query in ("queen stone", "lamp", "bee hive honey"):
        assert _scores(index, query) == pytest.approx(_scores(fresh, query), abs=1e-6)
        assert _scores(index, query) == pytest.approx(_reference(config, final, query), abs=1e-5)
    assert "zzz" not in index.terms and len(index.terms) == len(fresh.terms)  # no orphaned terms


def test_file_round_trip_without_pickle() -> None:
    config = LexicalConfig()
    corpus = _corpus(12, seed=3) | {"ü-doc": "Zürich cafés 蜜蜂"}
    index = LexicalIndex.empty(config)
    index.add_texts(list(corpus), list(corpus.values()))
    data = index.to_bytes()
    back = LexicalIndex.from_bytes(data, config)
    assert back.doc_ids == index.doc_ids and back.terms == index.terms
    for query in ("bee river", "zürich 蜜蜂"):
        assert np.array_equal(back.scores(query), index.scores(query))
    with np.load(__import__("io").BytesIO(data), allow_pickle=False) as arrays:
        assert all(arrays[name].dtype != object for name in arrays.files)
    with pytest.raises(IndexFormatError, match="not a readable lexical index"):
        LexicalIndex.from_bytes(data[: len(data) // 2], config, "x.npz")


def test_an_empty_index_and_a_query_of_stop_words() -> None:
    index = LexicalIndex.empty(LexicalConfig())
    assert index.scores("bees").shape == (0,) and index.top("bees", 3) == []
    index.add_texts(["a"], ["bees dance"])
    assert index.query_terms("the and to") == [] and index.top("the and to", 3) == []


def test_passages_of_a_streamed_text_equal_the_whole_texts() -> None:
    """Pieces cut at whitespace (a streamed file) give the same postings, passages crossing pieces."""
    config = LexicalConfig(passage_terms=6)
    corpus = _corpus(10, seed=4) | {"stop-only": "the of and", "empty": ""}
    analyzer = Analyzer(config)
    whole = analyse(analyzer, list(corpus), list(corpus.values()))
    words = [t.split() for t in corpus.values()]
    pieces = [[" ".join(w[i : i + 4]) for i in range(0, max(len(w), 1), 4)] for w in words]
    streamed = analyse(analyzer, list(corpus), pieces)
    assert whole.passages is not None and streamed.passages is not None
    for a, b in ((whole, streamed), (whole.passages, streamed.passages)):
        assert a.doc_ids == b.doc_ids and a.lengths.tolist() == b.lengths.tolist()
        assert [sorted(zip(*_row(a, i), strict=True)) for i in range(len(a.doc_ids))] == [
            sorted(zip(*_row(b, i), strict=True)) for i in range(len(b.doc_ids))
        ]
    assert whole.passages.doc_ids.count("empty") == 1 and whole.passages.doc_ids.count("stop-only") == 1
    index = LexicalIndex.empty(config)
    index.add(streamed)
    assert _scores(index, "queen lamp") == pytest.approx(_reference(config, corpus, "queen lamp"), abs=1e-5)
    with pytest.raises(ValueError, match="document ids"):
        analyse(analyzer, ["a"], ["x y", "z"])


def _row(postings: Postings, i: int) -> tuple[list[str], list[int]]:
    lo, hi = postings.doc_ptr[i], postings.doc_ptr[i + 1]
    return [postings.terms[t] for t in postings.term_ids[lo:hi]], postings.tfs[lo:hi].tolist()


def test_a_file_without_passages_reads_as_whole_documents_only() -> None:
    """An index written before passages (format 1) opens, scores whole documents, and stays so."""
    corpus = _corpus(12, seed=5)
    old = LexicalIndex.empty(LexicalConfig(passage_terms=0))
    old.add_texts(list(corpus), list(corpus.values()))
    with np.load(io.BytesIO(old.to_bytes()), allow_pickle=False) as arrays:
        files = {name: arrays[name] for name in arrays.files}
    buffer = io.BytesIO()
    np.savez(buffer, **(files | {"format": np.array([1], dtype=np.int32)}))
    back = LexicalIndex.from_bytes(buffer.getvalue(), LexicalConfig())  # the manifest's default: 256
    assert back.passages is None and back.config.passage_terms == 0
    whole = LexicalConfig(passage_terms=0)
    assert _scores(back, "bee lamp") == pytest.approx(_reference(whole, corpus, "bee lamp"), abs=1e-5)
    back.add(analyse(Analyzer(LexicalConfig()), ["new"], ["bee lamp lamp"]))  # passages dropped
    assert _scores(back, "lamp")["new"] == pytest.approx(
        _reference(whole, corpus | {"new": "bee lamp lamp"}, "lamp")["new"], abs=1e-5
    )


def test_passages_survive_the_file_and_must_match_the_manifest() -> None:
    config = LexicalConfig(passage_terms=6)
    corpus = _corpus(15, seed=6)
    index = LexicalIndex.empty(config)
    index.add_texts(list(corpus), list(corpus.values()))
    back = LexicalIndex.from_bytes(index.to_bytes(), config)
    assert back.passages is not None and back.passages.doc_ids == index.passages.doc_ids  # type: ignore[union-attr]
    assert np.array_equal(back.scores("river stone"), index.scores("river stone"))
    with pytest.raises(IndexFormatError, match="passages of 6 terms, the manifest says 256"):
        LexicalIndex.from_bytes(index.to_bytes(), LexicalConfig())
    index.passages.remove(["d03"])  # type: ignore[union-attr]  # out of step with the documents
    with pytest.raises(IndexFormatError, match="out of step"):
        LexicalIndex.from_bytes(index.to_bytes(), config)
