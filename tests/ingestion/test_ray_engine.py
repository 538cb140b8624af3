"""Distributed ingest on a local Ray instance: the same index as a local ingest, incremental,
resumable from its shards, bad files reported exactly as locally."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from ragidx import faults
from ragidx.errors import ConfigError, ModelError
from ragidx.index.directory import STAGING_NAME, Index
from ragidx.ingestion.checkpoints import DAMAGED_REASON
from ragidx.ingestion.pipeline import IngestReport, ingest
from ragidx.ingestion.ray_engine import ingest_ray
from tests.conftest import long_text, tiny_config, write_docs


def _folder(root: Path) -> Path:
    """Short files, long ones (several chunks), a JSONL corpus, a nested page and a bad file."""
    write_docs(root, 5)
    (root / "long-a.md").write_text(long_text(400, seed=7))
    (root / "sub").mkdir()
    (root / "sub" / "long-b.txt").write_text(long_text(250, seed=8))
    (root / "sub" / "page.html").write_text("<html><title>Page</title><body><p>Hi there.</p></body></html>")
    (root / "corpus.jsonl").write_text('{"_id": "j1", "text": "first record"}\n{"_id": "j2", "text": "x"}\n')
    (root / "broken.txt").write_bytes(b"\x00\x01\x02binary\x00" * 64)
    return root


def _rows(index: Index) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    documents = [
        {k: v for k, v in vars(index.store.document(d)).items() if k != "ingested_at"}
        for d in sorted(index.store.doc_ids())
    ]
    chunks = sorted(
        (vars(index.store.vector(int(v))) for v in index.store.vids()), key=lambda row: row["vid"]
    )
    return documents, chunks


def _same_index(local: Path, distributed: Path) -> None:
    a, b = Index.open(local), Index.open(distributed)
    assert _rows(a) == _rows(b)
    vids = np.sort(a.store.vids())
    np.testing.assert_array_equal(vids, np.sort(b.store.vids()))
    np.testing.assert_allclose(a.vectors_of(vids), b.vectors_of(vids), atol=1e-5)
    assert a.manifest.counts == b.manifest.counts
    assert a.manifest.embedding_fingerprint() == b.manifest.embedding_fingerprint()
    assert a.lexical is not None and b.lexical is not None  # the same BM25 index, byte for byte
    assert a.manifest.files["lexical"].sha256 == b.manifest.files["lexical"].sha256
    for query in ("Document 3", "first record", long_text(12, seed=7)):
        hits_a, hits_b = a.search(query, k=5), b.search(query, k=5)
        assert [h.doc_id for h in hits_a] == [h.doc_id for h in hits_b]
        np.testing.assert_allclose([h.score for h in hits_a], [h.score for h in hits_b], atol=1e-5)


def _skips(report: IngestReport) -> list[tuple[str, str]]:
    return [(s.source, s.reason) for s in report.skipped]


def test_ray_builds_the_index_a_local_ingest_builds(
    local_ray: None, tmp_path: Path, tiny_model: Path
) -> None:
    docs = _folder(tmp_path / "docs")
    chunked = {"policy": "chunk", "chunk_size": 40, "overlap": 8}
    config = tiny_config(tiny_model, chunked, batch_tokens=256, stream_bytes=2000)  # long-a.md streamed
    local = ingest(docs, tmp_path / "local", config)
    distributed = ingest_ray(docs, tmp_path / "ray", config, workers=2, files_per_batch=2)
    assert (distributed.engine, distributed.workers) == ("ray", 2)
    assert distributed.added == local.added == 10 and distributed.resumed == 0
    assert distributed.vectors == local.vectors > distributed.added  # long documents: several chunks
    assert distributed.window_tokens == local.window_tokens
    assert _skips(distributed) == _skips(local) and len(local.skipped) == 1  # broken.txt, same reason
    assert "broken.txt" in local.skipped[0].source
    _same_index(tmp_path / "local", tmp_path / "ray")
    assert Index.open(tmp_path / "ray").store.document("long-a.md").metadata["streamed"] is True


def test_killed_ray_ingest_resumes_from_its_shards_and_a_rerun_skips_everything(
    local_ray: None, tmp_path: Path, tiny_model: Path
) -> None:
    docs = write_docs(tmp_path / "docs", 5)
    (docs / "long.txt").write_text(long_text(300, seed=9))  # pcw: the mean of its chunks
    config = tiny_config(tiny_model, {"policy": "pcw", "chunk_size": 40})

    def die() -> None:
        raise RuntimeError("killed before the commit")

    with faults.hook("before-commit", die), pytest.raises(RuntimeError, match="killed"):
        ingest_ray(docs, tmp_path / "ix", config, workers=1, files_per_batch=2)
    assert not Index.exists(tmp_path / "ix")  # nothing committed, the shards are kept
    resumed = ingest_ray(docs, tmp_path / "ix", config, workers=1)
    assert (resumed.added, resumed.resumed, resumed.window_tokens) == (6, 6, 0)  # nothing embedded again
    local = ingest(docs, tmp_path / "local", config)
    assert local.resumed == 0 and local.by_mode == resumed.by_mode == {"whole": 5, "pcw": 1}
    _same_index(tmp_path / "local", tmp_path / "ix")

    generation = Index.open(tmp_path / "ix").manifest.generation
    again = ingest_ray(docs, tmp_path / "ix", config, workers=1)
    assert (again.added, again.updated, again.unchanged, again.window_tokens) == (0, 0, 6, 0)
    assert Index.open(tmp_path / "ix").manifest.generation == generation  # nothing written


def test_a_ray_job_failed_inside_a_large_document_resumes_after_its_last_part(
    local_ray: None, tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29: an actor checkpoints a document larger than a batch part by part (in the index's
    staging folder, which it reaches on a local Ray instance); a job that fails inside the document
    keeps its parts, and the rerun embeds only the windows after them, with a clean ingest's
    vectors."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "big.txt").write_text(long_text(2500, seed=5))
    (docs / "small.md").write_text("A short note about bees.")
    config = tiny_config(tiny_model, {"policy": "chunk", "overlap": 8}, batch_tokens=400, stream_bytes=5000)
    clean = ingest(docs, tmp_path / "local", config)
    monkeypatch.setenv(faults.ENV, "after-batch:3:oserror")  # the actor fails after big.txt's third part
    with pytest.raises(ModelError, match="the Ray job failed"):
        ingest_ray(docs, tmp_path / "ix", config, workers=1)
    monkeypatch.delenv(faults.ENV)
    faults.reset()
    assert not Index.exists(tmp_path / "ix")
    parts = sorted((tmp_path / "ix" / STAGING_NAME).glob("*/part-*.parquet"))
    assert len(parts) == 3
    windows = sum(pq.read_metadata(part).num_rows for part in parts)

    resumed = ingest_ray(docs, tmp_path / "ix", config, workers=1)
    assert (resumed.added, resumed.resumed, resumed.warnings) == (2, 1, [])  # big.txt resumed
    assert resumed.window_tokens == clean.window_tokens - 64 * windows  # its parts' windows: not again
    _same_index(tmp_path / "local", tmp_path / "ix")
    assert not (tmp_path / "ix" / STAGING_NAME).exists()


def test_ray_builds_the_hybrid_late_index_a_local_ingest_builds(
    local_ray: None, tmp_path: Path, tiny_model: Path
) -> None:
    """Late chunks, a budget and a document vector per document: the same rows at both levels, and
    a streamed file skipped with the same reason."""
    docs = write_docs(tmp_path / "docs", 3)
    (docs / "long.txt").write_text(long_text(200, seed=5))
    (docs / "huge.txt").write_text(long_text(400, seed=6))  # streamed: refused under late
    late = {
        "policy": "late",
        "chunk_size": 16,
        "overlap": 0,
        "vectors_per_doc": 4,
        "hybrid": {"fusion": "rrf"},
    }
    config = tiny_config(tiny_model, late, stream_bytes=2000)
    local = ingest(docs, tmp_path / "local", config)
    distributed = ingest_ray(docs, tmp_path / "ray", config, workers=1)
    assert distributed.by_mode == local.by_mode == {"late": 4}
    assert distributed.vectors == local.vectors
    assert _skips(distributed) == _skips(local) and "huge.txt" in local.skipped[0].source
    _same_index(tmp_path / "local", tmp_path / "ray")
    ray_index = Index.open(tmp_path / "ray")
    assert ray_index.document_vectors is not None and ray_index.document_vectors.ntotal == 4
    assert ray_index.store.document_vids("long.txt")[1].tolist() == [-1, 0, 1, 2, 3]  # the budget: 4


def test_without_ray_the_error_says_what_to_install(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if ray were not installed
    docs = write_docs(tmp_path / "docs", 1)
    with pytest.raises(ConfigError, match=r"pip install 'ragidx\[ray\]'"):
        ingest_ray(docs, tmp_path / "ix", tiny_config(tiny_model))
    assert not (tmp_path / "ix").exists()


def test_a_damaged_checkpoint_found_by_the_ray_driver_is_reported_and_embedded_again(
    local_ray: None, tmp_path: Path, tiny_model: Path
) -> None:
    docs = write_docs(tmp_path / "docs", 4)
    config = tiny_config(tiny_model)

    def die() -> None:
        raise RuntimeError("killed before the commit")

    with faults.hook("before-commit", die), pytest.raises(RuntimeError, match="killed"):
        ingest_ray(docs, tmp_path / "ix", config, workers=1, files_per_batch=2)
    batches = sorted((tmp_path / "ix" / STAGING_NAME).glob("*/batch-*.parquet"))  # per fingerprint
    assert batches
    data = bytearray(batches[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    batches[0].write_bytes(bytes(data))
    resumed = ingest_ray(docs, tmp_path / "ix", config, workers=1)
    assert [(w.source, w.reason) for w in resumed.warnings] == [(str(batches[0]), DAMAGED_REASON)]
    assert resumed.added == 4 and resumed.resumed < 4 and resumed.window_tokens > 0  # embedded again
    ingest(docs, tmp_path / "local", config)
    _same_index(tmp_path / "local", tmp_path / "ix")
