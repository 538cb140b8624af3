"""Retriever: chunk hits merged per document (max-sim), k handling, snippets, hybrid fusion."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragidx.config import RagidxConfig
from ragidx.embed.config import HybridConfig
from ragidx.errors import ConfigError
from ragidx.index.directory import Index
from ragidx.ingestion.pipeline import ingest
from ragidx.search.retriever import Retriever
from ragidx.search.snippets import snippet
from tests.conftest import long_text, tiny_config


def test_chunked_documents_are_reported_once_with_their_best_chunk(tmp_path: Path, tiny_model: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"long{i}.txt").write_text(long_text(250, seed=i))
    config = RagidxConfig().override(
        model={"model": str(tiny_model), "device": "cpu"}, long_doc={"chunk_size": 24, "overlap": 4}
    )
    ingest(docs, tmp_path / "ix", config)
    index = Index.open(tmp_path / "ix")
    assert index.store.n_vectors > 20  # many chunks per document

    doc = index.store.document("long1.txt")
    tokens = index.encoder.tokenize(doc.text)
    # query with the exact text of one chunk of long1: that chunk must win, its document first
    chunk_rows = [index.store.vector(int(v)) for v in index.store.vids()]
    chunk = next(r for r in chunk_rows if r.doc_id == "long1.txt" and r.ordinal == 3)
    query = index.encoder.tokenizer.decode(tokens.ids[chunk.tok_start : chunk.tok_end])
    hits = index.search(query, k=10, mode="dense")
    assert hits[0].doc_id == "long1.txt"
    assert sorted(h.doc_id for h in hits) == ["long0.txt", "long1.txt", "long2.txt"]  # deduplicated
    assert hits[0].chunk is not None and hits[0].chunk["ordinal"] == 3
    assert hits[0].embed_mode == "chunk"
    assert (
        doc.text[hits[0].chunk["char_start"] : hits[0].chunk["char_end"]].lower().startswith(query.split()[0])
    )

    # scores are the max over each document's chunks (brute force over all vectors)
    qv, _ = index.encoder.embed([query], role="query")
    all_vecs = np.vstack([index.vectors.index.reconstruct(int(v)) for v in index.store.vids()])
    per_doc: dict[str, float] = {}
    for row, score in zip(chunk_rows, all_vecs @ qv[0], strict=True):
        per_doc[row.doc_id] = max(per_doc.get(row.doc_id, -1.0), float(score))
    for hit in hits:
        assert abs(hit.score - per_doc[hit.doc_id]) < 1e-5


def test_k_larger_than_the_index(tmp_path: Path, tiny_model: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("one")
    ingest(
        tmp_path / "d",
        tmp_path / "ix",
        RagidxConfig().override(model={"model": str(tiny_model), "device": "cpu"}),
    )
    hits = Index.open(tmp_path / "ix").search("one", k=50, mode="dense")
    assert len(hits) == 1 and hits[0].doc_id == "a.txt"


def test_snippet_prefers_the_sentence_sharing_query_words() -> None:
    text = (
        "Lighthouses are tall. The Pharos stood in Alexandria. Bees make honey in hives. "
        "Smeaton used granite blocks for the Eddystone tower. Rain fell all day."
    )
    assert snippet(text, "who used granite for Eddystone?", width=60).startswith("Smeaton used granite")
    assert len(snippet(text * 10, "granite", width=80)) <= 80
    assert snippet("", "anything") == ""
    assert snippet("No overlap here.", "zebra") == "No overlap here."


def test_where_filters_while_ranking_and_chunks_rank_on_their_own(tmp_path: Path, tiny_model: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(12):
        (docs / f"d{i:02d}.txt").write_text(long_text(30 if i % 3 else 250, seed=i))
    config = RagidxConfig().override(
        model={"model": str(tiny_model), "device": "cpu"}, long_doc={"chunk_size": 24, "overlap": 4}
    )
    ingest(docs, tmp_path / "ix", config)
    index = Index.open(tmp_path / "ix")
    query = index.store.document("d01.txt").text
    wanted = {"d00.txt", "d03.txt", "d06.txt"}
    hits = index.search(query, k=3, where=lambda record: record.doc_id in wanted, mode="dense")
    assert {h.doc_id for h in hits} == wanted  # far down the unfiltered ranking, still all found
    assert index.search(query, k=3, where=lambda record: False, mode="dense") == []

    chunks = index.search(index.store.document("d03.txt").text[:200], k=6, per="chunk", mode="dense")
    assert len(chunks) == 6 and len({h.doc_id for h in chunks}) < 6  # several chunks of a document
    for hit in chunks:
        if hit.chunk is not None:
            assert hit.passage == hit.text[hit.chunk["char_start"] : hit.chunk["char_end"]]
    documents = index.search(index.store.document("d03.txt").text[:200], k=6, mode="dense")
    assert len({h.doc_id for h in documents}) == 6


# ----------------------------------------------------------------------------- hybrid fusion
def _brute_force(index: Index, query: str) -> tuple[dict[str, float], dict[str, tuple[float, int]]]:
    """Per document: its document cosine, and its best chunk cosine with that chunk's ordinal."""
    qv, _ = index.encoder.embed([query], role="query")
    document: dict[str, float] = {}
    chunk: dict[str, tuple[float, int]] = {}
    for doc_id in index.store.doc_ids():
        vids, ordinals = index.store.document_vids(doc_id)
        cosines = index.vectors_of(vids) @ qv[0]
        document[doc_id] = float(cosines[ordinals == -1][0])
        best = int(np.argmax(np.where(ordinals >= 0, cosines, -np.inf)))
        chunk[doc_id] = (float(cosines[best]), int(ordinals[best]))
    return document, chunk


QUERY = "Sentence 3 says river stone light garden"


def test_hybrid_weight_one_is_the_document_ranking_and_zero_max_sim(hybrid_index: Path) -> None:
    index = Index.open(hybrid_index)
    document, chunk = _brute_force(index, QUERY)
    by_document = index.search(QUERY, k=8, hybrid=HybridConfig(fusion="weighted", weight=1.0), mode="dense")
    assert [h.doc_id for h in by_document] == sorted(document, key=lambda d: -document[d])
    for hit in by_document:
        assert hit.score == pytest.approx(document[hit.doc_id], abs=1e-5)
        assert hit.document_score == pytest.approx(document[hit.doc_id], abs=1e-5)
        assert hit.chunk_score == pytest.approx(chunk[hit.doc_id][0], abs=1e-5)
        if hit.embed_mode == "late":  # the best chunk's span (a whole document has none)
            assert hit.chunk is not None and hit.chunk["ordinal"] == chunk[hit.doc_id][1]
        else:
            assert hit.embed_mode == "whole" and hit.chunk is None
    by_chunk = index.search(QUERY, k=8, hybrid=HybridConfig(fusion="weighted", weight=0.0), mode="dense")
    qv, _ = index.encoder.embed([QUERY], role="query")
    max_sim = Retriever(index)._max_sim(qv, 8, None, "document")[0]  # the chunk level alone
    assert [h.doc_id for h in by_chunk] == [index.store.vector(v).doc_id for v, _ in max_sim]
    assert [h.score for h in by_chunk] == pytest.approx([s for _, s in max_sim], abs=1e-5)
    assert [h.doc_id for h in by_chunk] == sorted(chunk, key=lambda d: -chunk[d][0])


def test_hybrid_rrf_matches_a_hand_computed_fusion(hybrid_index: Path) -> None:
    index = Index.open(hybrid_index)
    assert index.manifest.long_doc.hybrid is not None and index.manifest.long_doc.hybrid.fusion == "rrf"
    document, chunk = _brute_force(index, QUERY)
    doc_rank = {d: r for r, d in enumerate(sorted(document, key=lambda d: -document[d]), start=1)}
    chunk_rank = {d: r for r, d in enumerate(sorted(chunk, key=lambda d: -chunk[d][0]), start=1)}
    expected = {d: 1 / (60 + doc_rank[d]) + 1 / (60 + chunk_rank[d]) for d in document}
    hits = index.search(QUERY, k=8, mode="dense")  # the manifest's fusion: RRF, k = 60
    assert len(hits) == 8 == len({h.doc_id for h in hits})
    assert {h.doc_id: h.score for h in hits} == pytest.approx(expected, abs=1e-9)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    top = index.search(QUERY, k=3, mode="dense")
    assert [h.doc_id for h in top] == [h.doc_id for h in hits[:3]]


def test_hybrid_where_filter_and_per_chunk(hybrid_index: Path) -> None:
    index = Index.open(hybrid_index)
    wanted = {"h0.txt", "h5.txt", "h7.txt"}
    hits = index.search(QUERY, k=5, where=lambda record: record.doc_id in wanted, mode="dense")
    assert {h.doc_id for h in hits} == wanted
    chunks = index.search(QUERY, k=12, per="chunk", mode="dense")
    assert len(chunks) == 12 and len({h.doc_id for h in chunks}) < 12
    assert all(h.chunk is None or h.chunk["ordinal"] >= 0 for h in chunks)  # chunk level only
    assert all(h.document_score is None for h in chunks)
    assert "document_score" in hits[0].to_dict() and "document_score" not in chunks[0].to_dict()


def test_hybrid_override_needs_a_hybrid_index(tmp_path: Path, tiny_model: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("one")
    ingest(tmp_path / "d", tmp_path / "ix", RagidxConfig().override(model={"model": str(tiny_model)}))
    with pytest.raises(ConfigError, match="not a hybrid index"):
        Index.open(tmp_path / "ix").search("one", hybrid=HybridConfig(), mode="dense")


def test_hybrid_batches_match_single_queries(hybrid_index: Path) -> None:
    """More queries than one reconstruction group (HYBRID_GROUP): the same results as one by one."""
    index = Index.open(hybrid_index)
    queries = [f"Sentence {i} says river" for i in range(20)]
    batch = index.search_many(queries, k=4, mode="dense")
    for query, hits in zip(queries[::6], batch[::6], strict=True):
        single = index.search(query, k=4, mode="dense")
        assert [(h.doc_id, h.score, h.chunk) for h in hits] == [(h.doc_id, h.score, h.chunk) for h in single]


# ----------------------------------------------------------------------------- best-N chunk scores
@pytest.fixture(scope="module")
def chunk_index(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """Twelve documents of 1 to 9 chunks of 16 tokens (chunk policy, no overlap). Read-only."""
    root = tmp_path_factory.mktemp("best")
    docs = root / "docs"
    docs.mkdir()
    for i in range(12):
        (docs / f"b{i:02d}.txt").write_text(f"Document {i}. " + long_text(8 + 14 * (i % 6), seed=70 + i))
    ingest(docs, root / "ix", tiny_config(tiny_model, {"policy": "chunk", "chunk_size": 16, "overlap": 0}))
    return root / "ix"


def _best_n_brute_force(index: Index, query: str, best: int) -> dict[str, tuple[float, float]]:
    """Per document: the mean of its ``best`` best chunk cosines, and its best chunk cosine."""
    qv, _ = index.encoder.embed([query], role="query")
    out: dict[str, tuple[float, float]] = {}
    for doc_id in index.store.doc_ids():
        vids, ordinals = index.store.document_vids(doc_id)
        cosines = np.sort(index.vectors_of(vids[ordinals >= 0]) @ qv[0])[::-1]
        out[doc_id] = (float(cosines[:best].mean()), float(cosines[0]))
    return out


@pytest.mark.parametrize("candidates", [100, 1])  # 1: the candidate set has to grow
def test_best_n_is_exact_against_brute_force(
    chunk_index: Path, candidates: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ragidx.search.retriever

    monkeypatch.setattr(ragidx.search.retriever, "BEST_CANDIDATES", candidates)
    index = Index.open(chunk_index)
    assert {index.store.document(d).n_vectors for d in index.store.doc_ids()} != {1}
    for query in (QUERY, "Document 4 garden", "light stone"):
        for best in (2, 3):
            expected = _best_n_brute_force(index, query, best)
            for k in (1, 4, 12):
                hits = index.search(query, k=k, best_chunks=best, mode="dense")
                assert [h.doc_id for h in hits] == sorted(expected, key=lambda d: -expected[d][0])[:k]
                assert [h.score for h in hits] == pytest.approx(
                    [expected[h.doc_id][0] for h in hits], abs=1e-5
                )
                for hit in hits:  # the span shown is the document's best chunk (none when whole)
                    if hit.chunk is None:
                        assert hit.embed_mode == "whole"
                        continue
                    vid = next(
                        v
                        for v, o in zip(*index.store.document_vids(hit.doc_id), strict=True)
                        if o == hit.chunk["ordinal"]
                    )
                    qv, _ = index.encoder.embed([query], role="query")
                    assert float(index.vectors_of(np.array([vid]))[0] @ qv[0]) == pytest.approx(
                        expected[hit.doc_id][1], abs=1e-5
                    )
    wanted = {"b01.txt", "b04.txt", "b05.txt", "b10.txt"}
    filtered = index.search(
        QUERY, k=3, best_chunks=2, where=lambda record: record.doc_id in wanted, mode="dense"
    )
    expected = _best_n_brute_force(index, QUERY, 2)
    assert [h.doc_id for h in filtered] == sorted(wanted, key=lambda d: -expected[d][0])[:3]
    assert [h.doc_id for h in index.search(QUERY, k=5, best_chunks=1, mode="dense")] == [
        h.doc_id for h in index.search(QUERY, k=5, mode="dense")
    ]  # best 1 is max-sim
    batch = index.search_many([QUERY, "light stone"] * 10, k=3, best_chunks=2, mode="dense")  # > one group
    assert [h.doc_id for h in batch[-1]] == [
        h.doc_id for h in index.search("light stone", k=3, best_chunks=2, mode="dense")
    ]


def test_best_n_from_the_manifest_and_in_a_hybrid_index(
    tmp_path: Path, tiny_model: Path, hybrid_index: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(5):
        (docs / f"m{i}.txt").write_text(f"Document {i}. " + long_text(60, seed=90 + i))
    long_doc = {"policy": "chunk", "chunk_size": 16, "overlap": 0, "best_chunks": 2}
    ingest(docs, tmp_path / "ix", tiny_config(tiny_model, long_doc))
    index = Index.open(tmp_path / "ix")
    assert index.manifest.long_doc.best_chunks == 2
    default = index.search(QUERY, k=5, mode="dense")
    assert [(h.doc_id, h.score) for h in default] == [
        (h.doc_id, h.score) for h in index.search(QUERY, k=5, best_chunks=2, mode="dense")
    ]
    assert [h.score for h in default] != [
        h.score for h in index.search(QUERY, k=5, best_chunks=1, mode="dense")
    ]
    # hybrid, w = 0: the chunk level alone, scored by the best-2 mean
    hybrid = Index.open(hybrid_index)
    expected = _best_n_brute_force(hybrid, QUERY, 2)
    hits = hybrid.search(
        QUERY, k=8, hybrid=HybridConfig(fusion="weighted", weight=0.0), best_chunks=2, mode="dense"
    )
    assert [h.doc_id for h in hits] == sorted(expected, key=lambda d: -expected[d][0])
    assert [h.chunk_score for h in hits] == pytest.approx([expected[h.doc_id][0] for h in hits], abs=1e-5)


def test_best_n_needs_a_chunked_index(tmp_path: Path, tiny_model: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("one two three")
    ingest(tmp_path / "d", tmp_path / "ix", tiny_config(tiny_model, {"policy": "pcw"}))
    index = Index.open(tmp_path / "ix")
    with pytest.raises(ConfigError, match="needs an index ingested with --long-doc chunk or late"):
        index.search("one", best_chunks=2, mode="dense")
    assert len(index.search("one", best_chunks=1, mode="dense")) == 1
