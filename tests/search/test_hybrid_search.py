"""Search modes dense, lexical and hybrid: fusion against a brute-force reference, the stop-word
fallback, indexes without a lexical part, and incremental updates seen by BM25."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from ragidx.config import RagidxConfig
from ragidx.errors import ConfigError
from ragidx.index.directory import Index
from ragidx.index.verify import verify
from ragidx.ingestion.pipeline import ingest
from ragidx.search.fusion import zscore
from ragidx.search.retriever import SearchNote
from tests.conftest import long_text, tiny_config
from tests.index.test_lexical import _reference

TOPICS = ["bees waggle dance", "river stone bridge", "copper lamp wick", "sourdough starter flour"]


def topic_index(root: Path, tiny_model: Path) -> Path:
    """Twelve documents, some chunked, each about one topic, ingested with a tiny model (lexical
    on) into ``root/ix``."""
    docs = root / "docs"
    docs.mkdir()
    for i in range(12):
        body = long_text(20 + 15 * (i % 4), seed=70 + i)
        (docs / f"t{i:02d}.txt").write_text(f"{TOPICS[i % 4]} {body} {TOPICS[i % 4]}")
    ingest(docs, root / "ix", tiny_config(tiny_model, {"chunk_size": 24, "overlap": 4}))
    return root / "ix"


@pytest.fixture(scope="module")
def corpus_index(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """:func:`topic_index`, shared by the module's tests (read-only)."""
    return topic_index(tmp_path_factory.mktemp("hybrid-search"), tiny_model)


def _brute_force(index: Index, query: str, weight: float | None) -> list[tuple[str, float, float, float]]:
    """Every document's max-sim cosine (all stored vectors), BM25 (written out), fused over all."""
    doc_ids = index.store.doc_ids()
    texts = {d: index.store.document(d).text for d in doc_ids}
    qv, _ = index.encoder.embed([query], role="query")
    dense = dict.fromkeys(doc_ids, -np.inf)
    for vid in index.store.vids():
        record = index.store.vector(int(vid))
        cosine = float(index.vectors.reconstruct(np.array([vid]))[0] @ qv[0])
        dense[record.doc_id] = max(dense[record.doc_id], cosine)
    assert index.lexical is not None
    bm25 = _reference(index.lexical.config, texts, query)
    d, b = np.array([dense[x] for x in doc_ids]), np.array([bm25[x] for x in doc_ids])
    if weight is None:  # competition ranks: 1 + how many score higher
        rank_d = 1 + (d[None, :] > d[:, None]).sum(axis=1)
        rank_b = 1 + (b[None, :] > b[:, None]).sum(axis=1)
        fused = 1 / (60 + rank_d) + np.where(b > 0, 1 / (60 + rank_b), 0.0)
    else:
        fused = weight * zscore(b) + (1 - weight) * zscore(d)
    order = sorted(range(len(doc_ids)), key=lambda i: (-fused[i], doc_ids[i]))
    return [(doc_ids[i], float(fused[i]), float(d[i]), float(b[i])) for i in order]


@pytest.mark.parametrize("weight", [0.7, 0.3, "rrf"])
def test_hybrid_is_exact_against_brute_force(corpus_index: Path, weight: float | str) -> None:
    index = Index.open(corpus_index)
    for query in ("waggle dance of bees", "a stone bridge over the river", "lamp"):
        expected = _brute_force(index, query, None if weight == "rrf" else float(weight))
        hits = index.search(query, k=12, lexical_weight=weight)  # type: ignore[arg-type]
        assert [h.doc_id for h in hits] == [e[0] for e in expected]
        assert [h.score for h in hits] == pytest.approx([e[1] for e in expected], abs=1e-5)
        assert [h.dense_score for h in hits] == pytest.approx([e[2] for e in expected], abs=1e-5)
        assert [h.lexical_score for h in hits] == pytest.approx([e[3] for e in expected], abs=1e-5)


def test_default_mode_is_hybrid_with_the_manifests_weight(corpus_index: Path) -> None:
    index = Index.open(corpus_index)
    assert index.manifest.lexical is not None and index.manifest.lexical.weight == 0.7
    default = index.search("copper lamp", k=5)
    explicit = index.search("copper lamp", k=5, mode="hybrid", lexical_weight=0.7)
    assert [(h.doc_id, h.score) for h in default] == [(h.doc_id, h.score) for h in explicit]
    assert all(h.lexical_score is not None and h.dense_score is not None for h in default)
    chunks = index.search("copper lamp", k=5, per="chunk")  # chunks are ranked by the vectors
    assert all(h.lexical_score is None for h in chunks)
    with pytest.raises(ConfigError, match="per='chunk' needs mode dense"):
        index.search("copper lamp", per="chunk", mode="hybrid")


def test_lexical_mode_ranks_by_bm25_without_loading_the_model(
    corpus_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = Index.open(corpus_index)
    monkeypatch.setattr(Index, "encoder", property(lambda self: pytest.fail("the model was loaded")))
    hits = index.search("sourdough starter", k=4, mode="lexical", where=lambda r: r.doc_id != "t03.txt")
    assert index.lexical is not None
    expected = [d for d, _ in index.lexical.top("sourdough starter", 5) if d != "t03.txt"][:4]
    assert [h.doc_id for h in hits] == expected
    for hit in hits:  # a chunked document's span is its chunk holding the query's words
        if index.document(hit.doc_id).n_vectors > 1:
            assert hit.chunk is not None and hit.chunk["ordinal"] == 0  # both ends hold them: the first
            assert "sourdough starter" in hit.passage and hit.passage != hit.text
        else:
            assert hit.chunk is None and hit.passage == hit.text
        assert hit.match is not None and hit.match["by"] == "lexical"
    assert "sourdough" in hits[0].snippet.lower()
    assert hits[0].score == hits[0].lexical_score and hits[0].dense_score is None


def test_a_query_of_stop_words_falls_back_to_dense_with_a_note(corpus_index: Path) -> None:
    index = Index.open(corpus_index)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hits = index.search("the of and", k=5)
    assert any(issubclass(w.category, SearchNote) and "stop words" in str(w.message) for w in caught)
    dense = index.search("the of and", k=5, mode="dense")
    assert [(h.doc_id, h.score) for h in hits] == [(h.doc_id, h.score) for h in dense]


def test_an_index_without_a_lexical_part_searches_dense_and_says_how_to_add_one(
    tmp_path: Path, tiny_model: Path, corpus_index: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"x{i}.txt").write_text(f"{TOPICS[i]} {long_text(30, seed=i)}")
    dense_only = tiny_config(tiny_model).override(lexical={"enabled": False})
    ingest(docs, tmp_path / "ix", dense_only)
    index = Index.open(tmp_path / "ix")
    assert index.lexical is None and index.manifest.lexical is None
    assert not any(p.name.startswith("lexical-") for p in (tmp_path / "ix").iterdir())
    assert index.search("river", k=2) == index.search("river", k=2, mode="dense")
    with pytest.raises(ConfigError, match=r"no lexical index .* ragidx ingest PATHS --index .* --lexical"):
        index.search("river", mode="hybrid")
    # --lexical on the next ingest adds it, from the stored texts, without embedding again
    report = ingest(docs, tmp_path / "ix", tiny_config(tiny_model).override(lexical={"enabled": True}))
    assert (report.unchanged, report.added) == (3, 0)
    index = Index.open(tmp_path / "ix")
    assert index.lexical is not None and sorted(index.lexical.doc_ids) == ["x0.txt", "x1.txt", "x2.txt"]
    assert index.search("river stone", k=1, mode="lexical")[0].doc_id == "x1.txt"
    assert verify(tmp_path / "ix").ok


def test_bm25_follows_changed_and_removed_documents(tmp_path: Path, tiny_model: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(4):
        (docs / f"y{i}.txt").write_text(f"{TOPICS[i]} {long_text(25, seed=i)}")
    config = tiny_config(tiny_model)
    ingest(docs, tmp_path / "ix", config)
    (docs / "y2.txt").write_text("a note about a heliotrope greenhouse")
    (docs / "y3.txt").unlink()
    report = ingest(
        docs,
        tmp_path / "ix",
        RagidxConfig.model_validate(config.model_dump()).override(ingest={"prune": True}),
    )
    assert (report.updated, report.removed, report.unchanged) == (1, 1, 2)
    index = Index.open(tmp_path / "ix")
    assert [h.doc_id for h in index.search("heliotrope", mode="lexical")] == ["y2.txt"]
    assert index.search("copper lamp wick", mode="lexical") == []  # y2's old text is gone
    assert index.search("sourdough", mode="lexical") == []  # y3 was removed
    assert index.lexical is not None and sorted(index.lexical.doc_ids) == ["y0.txt", "y1.txt", "y2.txt"]
    shutil.rmtree(docs)


@pytest.mark.parametrize("changes", [False, True])
def test_adding_bm25_reads_a_streamed_file_again_only_if_it_is_unchanged(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch, changes: bool
) -> None:
    """--lexical on an index of streamed files analyses each file again (the store holds only its
    head); a file whose text changed while it was read again keeps the head-only analysis, with a
    warning, instead of words that are not the stored document's."""
    import ragidx.ingestion.pipeline as pipeline

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "big.txt").write_text(long_text(15_000, seed=3) + " heliotrope greenhouse")  # past the head
    streamed = {"stream_bytes": 1000}
    dense_only = tiny_config(tiny_model, **streamed).override(lexical={"enabled": False})
    ingest(docs, tmp_path / "ix", dense_only)
    assert Index.open(tmp_path / "ix").store.document("big.txt").metadata["streamed"] is True
    real = pipeline.hashed_pieces

    def changing(document: object, digest: object) -> object:
        yield from real(document, digest)  # type: ignore[arg-type]
        if changes:
            digest.update(b"written meanwhile")  # type: ignore[attr-defined]

    monkeypatch.setattr(pipeline, "hashed_pieces", changing)
    with_bm25 = tiny_config(tiny_model, **streamed).override(lexical={"enabled": True})
    report = ingest(docs, tmp_path / "ix", with_bm25)
    assert [w.reason for w in report.warnings] == ([pipeline.CHANGED_LEXICAL_REASON] if changes else [])
    found = [h.doc_id for h in Index.open(tmp_path / "ix").search("heliotrope", k=1, mode="lexical")]
    assert found == ([] if changes else ["big.txt"])  # the word at the end: only from the whole file
