"""Streamed documents: the same plan, spans and vectors as the document read whole, with the text
held only in blocks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragidx.errors import InputError
from ragidx.index.directory import Index
from ragidx.ingestion.pipeline import ingest
from ragidx.read import walk as documents
from tests.conftest import long_text, tiny_config


def _vectors(directory: Path) -> tuple[list[dict], list[tuple], np.ndarray]:
    index = Index.open(directory)
    vids = index.store.vids()
    rows = [index.store.vector(v) for v in vids]
    spans = [(r.doc_id, r.ordinal, r.tok_start, r.tok_end, r.char_start, r.char_end) for r in rows]
    return index.store.summaries(), spans, np.stack([index.vectors.index.reconstruct(int(v)) for v in vids])


@pytest.mark.parametrize(
    "long_doc",
    [
        {"policy": "chunk", "overlap": 8},
        {"policy": "chunk", "chunk_size": 20, "overlap": 5, "max_tokens": 300},
        {"policy": "pcw"},
        {"policy": "truncate"},
    ],
)
def test_streamed_file_embeds_like_the_whole_text(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch, long_doc: dict
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "big.txt").write_text(long_text(3000, seed=3) + "\r\nlast line\r\n")
    (docs / "small.md").write_text("A short note.")
    monkeypatch.setattr(documents, "STREAM_BLOCK", 1000)  # many blocks, cut mid-word and mid-CRLF
    monkeypatch.setattr(documents, "HEAD_CHARS", 2000)
    whole = ingest(docs, tmp_path / "whole", tiny_config(tiny_model, long_doc))
    streamed = ingest(
        docs, tmp_path / "streamed", tiny_config(tiny_model, long_doc, stream_bytes=5000, batch_tokens=300)
    )
    assert whole.by_mode == streamed.by_mode and whole.tokens_embedded == streamed.tokens_embedded
    w_docs, w_spans, w_vectors = _vectors(tmp_path / "whole")
    s_docs, s_spans, s_vectors = _vectors(tmp_path / "streamed")
    assert w_docs == s_docs and w_spans == s_spans
    np.testing.assert_allclose(s_vectors, w_vectors, atol=1e-5)
    big = Index.open(tmp_path / "streamed").store.document("big.txt")
    assert big.metadata["streamed"] is True and len(big.text) == 2000
    assert Index.open(tmp_path / "whole").store.document("big.txt").sha256 == big.sha256
    again = ingest(
        docs, tmp_path / "streamed", tiny_config(tiny_model, long_doc, stream_bytes=5000, batch_tokens=300)
    )
    assert again.unchanged == 2 and again.added == 0


def test_streamed_document_is_checkpointed_and_reused(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "big.txt").write_text(long_text(2000, seed=4))
    (docs / "bad.txt").write_bytes(b"\x00binary")
    monkeypatch.setattr(documents, "STREAM_BLOCK", 1000)
    config = tiny_config(tiny_model, {"policy": "pcw"}, stream_bytes=2000)
    with pytest.raises(InputError, match="strict"):
        ingest(docs, tmp_path / "ix", config.override(ingest={"strict": True}))
    report = ingest(docs, tmp_path / "ix", config)
    assert report.resumed == 1 and report.window_tokens == 0 and report.by_mode == {"pcw": 1}
    fresh = ingest(docs, tmp_path / "fresh", config)
    assert fresh.resumed == 0 and fresh.window_tokens > 0
    np.testing.assert_allclose(_vectors(tmp_path / "ix")[2], _vectors(tmp_path / "fresh")[2], atol=1e-6)
