"""Tests for ragidx.evaluate.scoring: a document scored by its best vector, the mean of its best N,
or fused with its document vector."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragidx.evaluate.embedding import Embedded
from ragidx.evaluate.runner import run_grid
from ragidx.evaluate.scoring import search
from tests.evaluate.grids import tiny_grid


def test_search_scores_a_document_by_its_best_vector() -> None:
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.8, 0.6]], dtype=np.float32)
    docs = Embedded(["a", "b", "c"], vectors, np.array([0, 2, 3]))
    ranked = search(np.array([[0.0, 1.0], [1.0, 0.0]], dtype=np.float32), docs, k=2)
    assert [d for d, _ in ranked[0]] == ["a", "b"] and ranked[0][0][1] == pytest.approx(1.0)
    assert [d for d, _ in ranked[1]] == ["a", "c"]


def test_hybrid_weight_one_and_zero_reproduce_document_and_chunk_rankings() -> None:
    rng = np.random.default_rng(0)
    chunks = rng.normal(size=(7, 4)).astype(np.float32)
    documents = rng.normal(size=(3, 4)).astype(np.float32)
    docs = Embedded(["a", "b", "c"], chunks, np.array([0, 2, 5]), documents=documents)
    queries = rng.normal(size=(5, 4)).astype(np.float32)
    from ragidx.embed.config import HybridConfig

    only_doc = search(queries, docs, hybrid=HybridConfig(fusion="weighted", weight=1.0))
    only_chunk = search(queries, docs, hybrid=HybridConfig(fusion="weighted", weight=0.0))
    plain = search(queries, docs)
    doc_order = np.argsort(-(queries @ documents.T), axis=1, kind="stable")
    assert [[d for d, _ in hits] for hits in only_doc] == [
        [docs.doc_ids[j] for j in row] for row in doc_order
    ]
    assert [[d for d, _ in hits] for hits in only_chunk] == [[d for d, _ in hits] for hits in plain]


def test_best_n_scores_by_the_mean_of_the_best_vectors_and_reuses_the_embeddings(
    tiny_model: Path, tmp_path: Path
) -> None:
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.8, 0.6], [0.7, 0.7]], dtype=np.float32)
    docs = Embedded(["a", "b"], vectors, np.array([0, 2]))
    ranked = search(np.array([[1.0, 0.0]], dtype=np.float32), docs, best=2)
    # a: (1.0 + 0.0) / 2 = 0.5; b: its best two of 0.6, 0.8, 0.7 = 0.75; max-sim would rank a first
    assert [d for d, _ in ranked[0]] == ["b", "a"]
    assert [s for _, s in ranked[0]] == pytest.approx([0.75, 0.5])
    assert [d for d, _ in search(np.array([[1.0, 0.0]], dtype=np.float32), docs)[0]] == ["a", "b"]
    results = run_grid(tiny_grid(tiny_model, tmp_path, ["chunk:32:0", "chunk:32:0+best:2"]), command="best")
    plain, best = results.records
    assert best.timing.docs_embedded == 0 and best.timing.docs_cached == 100
    assert best.parameters["long_doc"]["best_chunks"] == 2
    assert best.parameters["vectors_per_doc"] == plain.parameters["vectors_per_doc"]


@pytest.mark.parametrize("best", [None, 1, 3])
def test_torch_scoring_on_a_device_gives_the_numpy_scores(
    best: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``device`` (CUDA in a run; the CPU here, through the same code): the same document scores,
    block of queries by block of queries (a tiny block size forces several)."""
    from ragidx.evaluate import scoring

    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 7, size=40)
    vectors = rng.standard_normal((int(lengths.sum()), 16)).astype(np.float32)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    documents = rng.standard_normal((40, 16)).astype(np.float32)
    docs = Embedded([f"d{i}" for i in range(40)], vectors, starts, documents=documents)
    queries = rng.standard_normal((9, 16)).astype(np.float32)
    monkeypatch.setattr(scoring, "SCORE_BLOCK_BYTES", 4 * len(vectors) * 2)  # two queries per block
    want_chunk, want_document = scoring._levels(queries, docs, best)
    chunk, document = scoring._levels(queries, docs, best, device="cpu")
    assert chunk.dtype == want_chunk.dtype and want_document is not None and document is not None
    np.testing.assert_allclose(chunk, want_chunk, rtol=0, atol=1e-5)
    np.testing.assert_allclose(document, want_document, rtol=0, atol=1e-5)
    assert [[d for d, _ in row] for row in search(queries, docs, 10, best=best, device="cpu")] == [
        [d for d, _ in row] for row in search(queries, docs, 10, best=best)
    ]
