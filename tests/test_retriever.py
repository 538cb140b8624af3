"""Retriever: chunk hits merged per document (max-sim), k handling, snippets."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ragidx.config import RagidxConfig
from ragidx.index import Index
from ragidx.ingestion import ingest
from ragidx.retriever import snippet
from tests.conftest import long_text


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
    hits = index.search(query, k=10)
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
    hits = Index.open(tmp_path / "ix").search("one", k=50)
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
    hits = index.search(query, k=3, where=lambda record: record.doc_id in wanted)
    assert {h.doc_id for h in hits} == wanted  # far down the unfiltered ranking, still all found
    assert index.search(query, k=3, where=lambda record: False) == []

    chunks = index.search(index.store.document("d03.txt").text[:200], k=6, per="chunk")
    assert len(chunks) == 6 and len({h.doc_id for h in chunks}) < 6  # several chunks of a document
    for hit in chunks:
        if hit.chunk is not None:
            assert hit.passage == hit.text[hit.chunk["char_start"] : hit.chunk["char_end"]]
    documents = index.search(index.store.document("d03.txt").text[:200], k=6)
    assert len({h.doc_id for h in documents}) == 6
