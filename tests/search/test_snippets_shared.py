"""Snippets shared across a batch (``snippets.Shared``): every query's matched sentence, its terms
and its snippet are what the query finds alone, checked against a slow, obviously correct lexical
choice; and through the retriever, a batch's results are each query's own, while each region of the
batch is cut into sentences once."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from ragidx.index.directory import Index
from ragidx.ingestion.pipeline import ingest
from ragidx.search import snippets
from ragidx.search.snippets import MIN_SENTENCE_CHARS, Match, Region, Shared, Terms, match, render, sentences
from tests.conftest import long_text, tiny_config

WORDS = (  # noqa: SIM905 (a word list reads better as text)
    "granite Granite tower towers the of what bees Bee honey hive hives 2024 a I. end. Start. x zz "
    "café 東京都 naïve run_fast 3.14 e.g. U.S.A. rain Rain. lighthouse Lighthouses keeps kept warm"
).split()
SEPARATORS = [" ", " ", " ", ". ", "\n", "\n\n", ".", "! ", "\n- ", ":\n", "? "]
QUERIES = [
    "granite tower",
    "what do bees keep warm in the hive",
    "Bees honey (1)",
    "Bees honey (2)",  # the same terms as the one before
    "rain 2024",
    "東京 naïve café",
    "lighthouse",
    "zebra",
]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(WORDS) + rng.choice(SEPARATORS) for _ in range(rng.randint(0, 150)))


def _reference(region: Region, terms: Terms) -> Match | None:
    """The lexical match as the module docstring defines it, sentence by sentence: the eligible
    sentence with the most distinct query terms, then the most occurrences, then the earliest; a
    word counts in the sentence its start is in."""
    spans = sentences(region.text, region.start, region.end)
    if not spans:
        return None
    marks = terms.spans(region.text, region.start, region.end)
    long = [i for i, (lo, hi) in enumerate(spans) if hi - lo >= MIN_SENTENCE_CHARS]
    eligible = long or list(range(len(spans)))
    scored = []
    for i in eligible:
        lo, hi = spans[i]
        inside = [held for (start, _), held in marks if lo <= start < hi]
        scored.append(((len(frozenset().union(*inside)), len(inside), -i), i))
    (distinct, _, _), best = max(scored)
    return Match(spans[best], float(distinct), "lexical", spans, best, marks)


def test_shared_matches_and_snippets_are_each_querys_own() -> None:
    rng = random.Random(5)
    texts = [_text(rng) for _ in range(12)] + [long_text(400, seed=3)]
    checked = 0
    for _ in range(40):
        regions = []
        for _ in range(rng.randint(1, 6)):
            text = rng.choice(texts)
            lo = rng.randint(0, len(text)) if rng.random() < 0.5 else 0
            regions.append(Region(text, lo, rng.randint(lo, len(text)) if lo else len(text)))
        shared = Shared()
        for query in rng.sample(QUERIES, 5):
            terms = Terms(query)
            together = match(regions, terms, ["lexical"] * len(regions), shared=shared)
            alone = match(regions, Terms(query), ["lexical"] * len(regions))
            for region, one, other in zip(regions, together, alone, strict=True):
                assert one == other == _reference(region, terms)
                if one is None:
                    continue
                assert one.terms == terms.spans(region.text, region.start, region.end)
                bare = Match(one.sentence, one.score, one.by, one.sentences, one.index, one.terms)
                for width in (240, 60, 12):  # the region's shared token layout, or one made afresh
                    assert render(region.text, one, width) == render(region.text, bare, width)
                checked += 1
    assert checked > 500


def test_shared_analyses_need_the_querys_analyzer() -> None:
    from ragidx.index.config import LexicalConfig
    from ragidx.index.lexical import Analyzer

    other = Shared(Analyzer(LexicalConfig(stemmer="none")))
    with pytest.raises(ValueError, match="another analyzer"):
        match([Region("Some text here.", 0, 15)], Terms("text"), ["lexical"], shared=other)


# ----------------------------------------------------------------------- through the retriever
@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    root = tmp_path_factory.mktemp("shared")
    docs = root / "docs"
    docs.mkdir()
    rng = random.Random(11)
    for i in range(6):
        (docs / f"d{i}.txt").write_text(_text(rng) + " " + long_text(60, seed=i))
    (docs / "long.txt").write_text("Granite towers. " + long_text(600, seed=7))  # chunked: regions
    ingest(docs, root / "ix", tiny_config(tiny_model, {"policy": "chunk", "chunk_size": 64, "overlap": 8}))
    return root / "ix"


BATCH = [f"{QUERIES[i % len(QUERIES)]} {i // len(QUERIES)}" for i in range(24)]  # 24: FAISS's BLAS path


def _plain(results: list[Any]) -> list[dict[str, Any]]:
    return [r.to_dict(with_text=True) | {"passage": r.passage} for r in results]


def _same(a: Any, b: Any) -> bool:
    """Equal, floats within 1e-5: FAISS may sum a query's products in another order inside a
    batch than alone (some versions do: 1e-7 apart); everything else exactly."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-5  # fused scores (z-normalised) carry it a little further
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.mark.parametrize(
    "options",
    [{}, {"mode": "lexical"}, {"mode": "dense"}, {"where": {"source": "*d[0-3].txt"}}, {"per": "chunk"}],
)
def test_a_batch_gives_each_query_what_it_gets_alone(index_dir: Path, options: dict[str, Any]) -> None:
    index = Index.open(index_dir)
    vectors, _ = index.encoder.embed(BATCH, role="query")
    options = {"sentences": "lexical", **options}
    together = index.search_by_vectors(BATCH, vectors, 5, **options)
    for i, query in enumerate(BATCH):
        alone = index.search_by_vectors([query], vectors[i : i + 1], 5, **options)[0]
        assert _same(_plain(together[i]), _plain(alone)), query  # ids, scores, snippets, matches, spans
    assert any(r.match and r.match["terms"] for results in together for r in results)


def test_search_many_matches_search_and_cuts_each_region_once(
    index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = Index.open(index_dir)
    alone = [index.search(query, 5, sentences="lexical") for query in BATCH]
    calls: list[tuple[int, int, int | None]] = []
    cut = snippets.sentences

    def counted(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
        calls.append((id(text), start, end))
        return cut(text, start, end)

    monkeypatch.setattr(snippets, "sentences", counted)
    together = index.search_many(BATCH, 5, sentences="lexical")
    results = [r for found in together for r in found]
    regions = {(r.doc_id, r.chunk["char_start"] if r.chunk else 0) for r in results}
    assert len(calls) == len(regions) < len(results) // 4  # once per region, not once per result
    for one, other in zip(together, alone, strict=True):
        assert [r.doc_id for r in one] == [r.doc_id for r in other]
        assert [r.score for r in one] == pytest.approx([r.score for r in other], abs=1e-5)
        assert [(r.snippet, r.match, r.passage_span) for r in one] == [
            (r.snippet, r.match, r.passage_span) for r in other
        ]


def test_to_dict_is_asdict_without_the_unknown_scores(index_dir: Path) -> None:
    from dataclasses import asdict

    for result in Index.open(index_dir).search_many(BATCH[:4], 5, sentences="lexical")[0]:
        expected = asdict(result)
        expected.pop("text")
        for key in ("document_score", "chunk_score", "dense_score", "lexical_score", "rerank"):
            if expected.get(key, 0) is None:
                expected.pop(key)
        made = result.to_dict()
        assert made == expected
        assert made["metadata"] is not result.metadata  # copies, as asdict makes
        assert result.match is None or made["match"] is not result.match
