"""Each result's passage, matched sentence and snippet, end to end through ``Index.search``: the
sentence that matched is found inside its chunk (dense and lexical), passages of documents without
chunks, neighbouring context, and which results get dense sentences by default."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragidx.config import RagidxConfig
from ragidx.index.directory import Index
from ragidx.ingestion.pipeline import ingest
from ragidx.search.passages import with_context
from ragidx.search.retriever import SearchResult
from ragidx.search.snippets import PASSAGE_CHARS
from tests.conftest import long_text, tiny_config

LIGHTHOUSES = [
    "Lighthouses guided sailing ships along the rocky northern coast.",
    "Every evening the keeper trimmed the wick of the oil lamp.",
    "Smeaton dovetailed granite blocks together for the Eddystone tower.",
    "Together the blocks of granite Smeaton dovetailed kept the Eddystone tower up.",  # the same words
    "Fresnel lenses later focused the beam over twenty nautical miles.",
    "Winter storms sometimes cut the keepers off for several weeks.",
    "Automation replaced nearly every keeper during the last century.",
    "Many old towers are now museums that visitors climb in summer.",
    "Some still carry radio beacons beside the original optics today.",
]
TARGET = LIGHTHOUSES[2]


@pytest.fixture(scope="module")
def chunked(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Index:
    """One document of nine sentences in chunks of about four, beside filler documents."""
    root = tmp_path_factory.mktemp("passages")
    docs = root / "docs"
    docs.mkdir()
    (docs / "lighthouses.txt").write_text(" ".join(LIGHTHOUSES))
    for i in range(12):
        (docs / f"filler{i:02d}.txt").write_text(long_text(20, seed=i))
    ingest(docs, root / "ix", tiny_config(tiny_model, {"chunk_size": 60, "overlap": 0}))
    return Index.open(root / "ix")


def _lighthouse_chunks(index: Index, query: str, sentences: str) -> list[SearchResult]:
    hits = index.search(query, k=len(index.store.vids()), per="chunk", sentences=sentences)  # type: ignore[arg-type]
    return [h for h in hits if h.doc_id == "lighthouses.txt"]


@pytest.mark.parametrize(
    ("sentences", "query", "by"),
    [
        ("dense", TARGET, "dense"),  # two sentences hold all its words: the encoder decides
        ("lexical", TARGET, "lexical"),  # the same tie, by the words alone: the earlier sentence
    ],
)
def test_the_matched_sentence_is_found_in_the_middle_of_its_chunk(
    chunked: Index, sentences: str, query: str, by: str
) -> None:
    text = chunked.document("lighthouses.txt").text
    start = text.index(TARGET)
    (hit,) = [
        h
        for h in _lighthouse_chunks(chunked, query, sentences)
        if h.chunk is not None and h.chunk["char_start"] <= start < h.chunk["char_end"]
    ]
    assert hit.chunk is not None
    assert hit.chunk["char_start"] < start - 50 and start + len(TARGET) < hit.chunk["char_end"]  # the middle
    assert hit.match is not None and hit.match["by"] == by
    assert hit.match["text"] == TARGET and hit.match["char_start"] == start
    assert hit.match["char_end"] == start + len(TARGET)
    assert TARGET in hit.snippet and not hit.snippet.startswith(TARGET)  # the whole chunk fits: in order
    lo, hi = hit.match["snippet_sentence"] or (0, 0)
    assert hit.snippet[lo:hi] == TARGET
    marked = [hit.snippet[a:b] for a, b in hit.match["snippet_terms"]]
    assert {"dovetailed", "granite", "Smeaton", "Eddystone"} <= set(marked)
    assert {t.lower() for t in hit.match["terms"]} == {t.lower() for t in marked}  # once each
    assert hit.passage == text[hit.chunk["char_start"] : hit.chunk["char_end"]] != text
    assert hit.passage_span == {"char_start": hit.chunk["char_start"], "char_end": hit.chunk["char_end"]}
    if by == "dense":  # the sentence embedded alone is the query itself
        assert hit.match["score"] == pytest.approx(1.0, abs=1e-5)


def test_auto_sentences_are_dense_for_one_query_within_a_budget(
    chunked: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedded: list[int] = []
    original = chunked.encoder.embed

    def counting(texts: list[str], role: str = "query") -> tuple[np.ndarray, int]:
        if role == "document":
            embedded.append(len(texts))
        return original(texts, role=role)  # type: ignore[arg-type]

    monkeypatch.setattr(chunked.encoder, "embed", counting)
    monkeypatch.setattr("ragidx.search.retriever.DENSE_BUDGET", 6)
    query = "zebra xylophone quartet"  # in no document: the words decide nothing, the encoder does
    default = chunked.search(query, k=8, mode="dense")  # the library's default: the words, no model
    assert {h.match["by"] for h in default if h.match} == {"lexical"} and embedded == []
    one = chunked.search(query, k=8, mode="dense", sentences="auto")  # what ragidx query shows
    by = [h.match["by"] for h in one if h.match]
    assert by[0] == "dense" and by[-1] == "lexical" and by == sorted(by)  # top results first
    assert embedded == [6]  # one call, the budget spent
    embedded.clear()
    batch = chunked.search_many([query, "granite"], k=4, mode="dense", sentences="auto")
    assert {h.match["by"] for hits in batch for h in hits if h.match} == {"lexical"} and embedded == []
    forced = chunked.search_many([query, "granite"], k=4, mode="dense", sentences="dense")
    assert {h.match["by"] for hits in forced for h in hits if h.match} == {"dense"}  # no budget
    assert len(embedded) == 2 and all(n > 6 for n in embedded)
    embedded.clear()
    vectors, _ = original([query], role="query")
    by_vectors = chunked.search_by_vectors([query], vectors, k=3, mode="dense", sentences="auto")[0]
    assert {h.match["by"] for h in by_vectors if h.match} == {"lexical"} and embedded == []
    assert [h.doc_id for h in by_vectors] == [h.doc_id for h in one[:3]]
    lexical = chunked.search(query, k=3, mode="dense", sentences="lexical")
    assert [(h.doc_id, h.score) for h in lexical] == [(h.doc_id, h.score) for h in one[:3]]  # same ranking
    assert {h.match["by"] for h in lexical if h.match} == {"lexical"} and embedded == []


def test_a_long_document_without_chunks_passes_on_the_sentences_around_the_match(
    tmp_path: Path, tiny_model: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    body = long_text(1500, seed=3)
    needle = "The lighthouse keeper dovetailed granite blocks at Eddystone."
    middle = len(body) // 2
    cut = body.index(". ", middle) + 2
    (docs / "long.txt").write_text(f"{body[:cut]}{needle} {body[cut:]}")
    (docs / "short.txt").write_text("A short note about granite.")
    ingest(docs, tmp_path / "ix", tiny_config(tiny_model, {"policy": "pcw"}))
    index = Index.open(tmp_path / "ix")
    hits = {h.doc_id: h for h in index.search("dovetailed granite Eddystone", k=2, sentences="lexical")}
    long, short = hits["long.txt"], hits["short.txt"]
    assert long.embed_mode == "pcw" and long.chunk is None and len(long.text) > 3 * PASSAGE_CHARS
    assert long.match is not None and long.match["text"] == needle
    assert needle in long.passage and len(long.passage) <= PASSAGE_CHARS
    assert len(long.passage) > PASSAGE_CHARS - 200  # whole sentences, about PASSAGE_CHARS
    assert long.passage.startswith("Sentence ") and long.passage.endswith(".")  # whole sentences
    assert short.passage == short.text
    span = (long.passage_span or {})["char_start"], (long.passage_span or {})["char_end"]
    wider = with_context(index, "long.txt", long.text, span, 1)
    assert wider[0] < span[0] and wider[1] > span[1] and wider[1] - wider[0] <= 3 * PASSAGE_CHARS
    assert with_context(index, "long.txt", long.text, span, 0) == span
    assert with_context(index, "short.txt", short.text, (0, len(short.text)), 2) == (0, len(short.text))


def test_context_adds_neighbouring_chunks(chunked: Index) -> None:
    text = chunked.document("lighthouses.txt").text
    vids, _ = chunked.vector_ids("lighthouses.txt")
    spans = sorted(
        (chunked.vector_record(int(v)).char_start, chunked.vector_record(int(v)).char_end) for v in vids
    )
    assert len(spans) >= 2
    first = spans[0]
    assert with_context(chunked, "lighthouses.txt", text, first, 1) == (spans[0][0], spans[1][1])
    assert with_context(chunked, "lighthouses.txt", text, spans[-1], 5) == (spans[0][0], spans[-1][1])


@pytest.mark.slow
def test_dense_sentences_find_a_paraphrase_that_shares_no_word(tmp_path: Path) -> None:
    """The real default model: the sentence that answers the question, though it shares no word with
    it, where a lexical choice falls back to the chunk's first sentence."""
    docs = tmp_path / "docs"
    docs.mkdir()
    essay = (
        "Startups need founders more than they need money. Most investors look for teams that can build "
        "things quickly. A good founder is relentlessly resourceful and learns from users every week. "
        "In 2024 Congress passed a startup visa for foreign entrepreneurs backed by investors. "
        "The best ideas often look like toys at first. Hiring too early is a common mistake."
    )
    (docs / "essay.txt").write_text(essay)
    ingest(docs, tmp_path / "ix", RagidxConfig())
    index = Index.open(tmp_path / "ix")
    query = "Did lawmakers ever approve immigration rules for company creators?"
    (dense,) = index.search(query, k=1, sentences="auto")
    (lexical,) = index.search(query, k=1)  # the default: by the words
    assert dense.match is not None and dense.match["by"] == "dense"
    assert dense.match["text"].startswith("In 2024 Congress passed a startup visa")
    assert dense.snippet.startswith("In 2024 Congress")
    assert lexical.match is not None and not lexical.match["text"].startswith("In 2024")
    assert np.isfinite(dense.match["score"])
