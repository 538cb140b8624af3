"""The lexical index (ragidx.index.lexical) against a slow, obviously correct BM25 on small corpora."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest

from ragidx.errors import ConfigError, IndexFormatError
from ragidx.index.config import LexicalConfig
from ragidx.index.lexical import Analyzer, LexicalIndex

WORDS = "bee hive honey dance waggle flower pollen queen drone worker river stone bridge lamp".split()  # noqa: SIM905


def _corpus(n: int, seed: int) -> dict[str, str]:
    rng = random.Random(seed)
    return {f"d{i:02d}": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40))) for i in range(n)}


def _reference(config: LexicalConfig, corpus: dict[str, str], query: str) -> dict[str, float]:
    """BM25 written out term by term: Lucene's idf, no (k1 + 1) factor, repeated query terms count."""
    analyzer = Analyzer(config)
    docs = {d: Counter(analyzer.terms(t)) for d, t in corpus.items()}
    lengths = {d: sum(c.values()) for d, c in docs.items()}
    avgdl = sum(lengths.values()) / len(docs)
    out = dict.fromkeys(corpus, 0.0)
    for term in analyzer.terms(query):
        df = sum(1 for c in docs.values() if term in c)
        idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        for d, counts in docs.items():
            tf = counts[term]
            if tf:
                norm = config.k1 * (1 - config.b + config.b * lengths[d] / avgdl)
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


@pytest.mark.parametrize("config", [LexicalConfig(), LexicalConfig(k1=0.9, b=0.4, stemmer="none")])
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


def test_incremental_updates_equal_a_fresh_build() -> None:
    config = LexicalConfig()
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
