"""Documents embedded as streams (streamed files, long texts): the same plan, spans, vectors and
BM25 terms as the document read whole, with bounded memory; checkpoints inside one document; a file
changed during its ingest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragidx import faults
from ragidx.errors import InputError
from ragidx.index.directory import STAGING_NAME, Index
from ragidx.ingestion import pipeline, streaming
from ragidx.ingestion.pipeline import ingest
from ragidx.read import walk as documents
from tests.conftest import long_text, tiny_config

ROOT = Path(__file__).resolve().parents[2]


def _assert_same_lexical(directory: Path, whole: Path) -> None:
    ours, theirs = Index.open(directory).lexical, Index.open(whole).lexical
    assert ours is not None and theirs is not None
    assert ours.doc_ids == theirs.doc_ids
    for query in ("Sentence 120 says", "last line", "short note"):
        np.testing.assert_allclose(ours.scores(query), theirs.scores(query), atol=1e-6)


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
    monkeypatch.setattr(streaming, "PIECE_CHARS", 700)  # tokenized in pieces, across block ends
    whole = ingest(docs, tmp_path / "whole", tiny_config(tiny_model, long_doc))
    streamed = ingest(
        docs, tmp_path / "streamed", tiny_config(tiny_model, long_doc, stream_bytes=5000, batch_tokens=300)
    )
    monkeypatch.setattr(streaming, "LARGE_TEXT_CHARS", 5000)  # a long text held in memory: streamed too
    seen: list[tuple[str, bool]] = []
    real = pipeline.embed_streamed

    def embed_streamed(document: documents.Document, *args: object, **kwargs: object) -> object:
        seen.append((document.doc_id, document.stream is None))
        return real(document, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "embed_streamed", embed_streamed)
    in_memory = ingest(docs, tmp_path / "in-memory", tiny_config(tiny_model, long_doc, batch_tokens=300))
    assert seen == [("big.txt", True)]
    w_docs, w_spans, w_vectors = _vectors(tmp_path / "whole")
    for name, report in (("streamed", streamed), ("in-memory", in_memory)):
        assert whole.by_mode == report.by_mode and whole.tokens_embedded == report.tokens_embedded
        s_docs, s_spans, s_vectors = _vectors(tmp_path / name)
        assert w_docs == s_docs and w_spans == s_spans
        np.testing.assert_allclose(s_vectors, w_vectors, atol=1e-5)
        _assert_same_lexical(tmp_path / name, tmp_path / "whole")
    assert Index.open(tmp_path / "in-memory").store.document("big.txt").text == (
        Index.open(tmp_path / "whole").store.document("big.txt").text
    )
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


class _Killed(Exception):
    pass


def _kill_at(n: int) -> object:
    """A hook for the ``after-batch`` fault point that stops the ingest at its ``n``-th batch."""
    count = [0]

    def hook() -> None:
        count[0] += 1
        if count[0] == n:
            raise _Killed

    return faults.hook("after-batch", hook)


def _big_and_small(root: Path) -> Path:
    root.mkdir()
    (root / "big.txt").write_text(long_text(2500, seed=5))
    (root / "small.md").write_text("A short note about bees.")
    return root


@pytest.mark.parametrize(
    ("long_doc", "stream_bytes"),
    [({"policy": "chunk", "overlap": 8}, None), ({"policy": "pcw"}, None), ({"policy": "chunk"}, 5000)],
    ids=["chunk", "pcw", "chunk-streamed-file"],
)
def test_a_kill_inside_one_large_document_resumes_from_its_last_checkpointed_batch(
    tmp_path: Path, tiny_model: Path, long_doc: dict, stream_bytes: int | None
) -> None:
    """A document larger than a batch is checkpointed batch by batch (the README's promise): a
    killed ingest resumes after the last finished batch, with the clean ingest's vectors."""
    docs = _big_and_small(tmp_path / "docs")
    ingest_settings = {"batch_tokens": 400, **({"stream_bytes": stream_bytes} if stream_bytes else {})}
    config = tiny_config(tiny_model, long_doc, **ingest_settings)
    batches: list[int] = []
    with faults.hook("after-batch", lambda: batches.append(1)):
        clean = ingest(docs, tmp_path / "clean", config)
    assert len(batches) >= 6  # big.txt's batches, its whole vectors, small.md's batch

    with _kill_at(4), pytest.raises(_Killed):  # killed after big.txt's fourth batch
        ingest(docs, tmp_path / "ix", config)
    assert len(list((tmp_path / "ix" / STAGING_NAME).glob("*/part-*.parquet"))) == 4
    resumed_batches: list[int] = []
    with faults.hook("after-batch", lambda: resumed_batches.append(1)):
        report = ingest(docs, tmp_path / "ix", config)
    assert len(resumed_batches) == len(batches) - 4  # the four checkpointed batches are not run again
    assert report.resumed == 1 and report.added == 2
    assert 0 < report.window_tokens < clean.window_tokens
    assert _vectors(tmp_path / "ix")[:2] == _vectors(tmp_path / "clean")[:2]
    np.testing.assert_allclose(_vectors(tmp_path / "ix")[2], _vectors(tmp_path / "clean")[2], atol=1e-5)
    assert not (tmp_path / "ix" / STAGING_NAME).exists()


@pytest.mark.parametrize(
    "long_doc", [{"policy": "chunk", "overlap": 8}, {"policy": "pcw"}], ids=["chunk", "pcw"]
)
def test_parts_of_other_text_under_the_same_sha_are_dropped_and_embedded_again(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch, long_doc: dict
) -> None:
    """Issue 29: a file hashed as A and rewritten to B while it streams checkpoints B's windows
    under A's sha; killed before the end-of-stream check, then restored to A, the next ingest finds
    that its parts were of other tokens: it drops them with a warning and embeds A from its start."""
    docs = _big_and_small(tmp_path / "docs")
    big = docs / "big.txt"
    text_a = big.read_text()
    config = tiny_config(tiny_model, long_doc, batch_tokens=400, stream_bytes=5000)
    clean = ingest(docs, tmp_path / "clean", config)
    real = pipeline.content_sha256
    digests: list[str] = []

    def hashed_then_changed(document: documents.Document) -> str:
        digest = real(document)
        if document.doc_id == "big.txt":
            digests.append(digest)
            big.write_text(long_text(2500, seed=6))  # B, streamed under A's sha
        return digest

    with monkeypatch.context() as patch, _kill_at(2), pytest.raises(_Killed):
        patch.setattr(pipeline, "content_sha256", hashed_then_changed)
        ingest(docs, tmp_path / "ix", config)
    parts = sorted((tmp_path / "ix" / STAGING_NAME).glob("*/part-*.parquet"))
    assert len(parts) == 2 and all(p.name.startswith(f"part-{digests[0]}-") for p in parts)
    big.write_text(text_a)  # restored: A's sha again, the parts hold B's windows

    report = ingest(docs, tmp_path / "ix", config)
    assert _vectors(tmp_path / "ix")[:2] == _vectors(tmp_path / "clean")[:2]
    np.testing.assert_allclose(_vectors(tmp_path / "ix")[2], _vectors(tmp_path / "clean")[2], atol=1e-5)
    warnings = [(Path(w.source).name, w.reason) for w in report.warnings]
    assert warnings == [("big.txt", pipeline.STALE_PARTS_REASON)]
    assert report.resumed == 0 and report.window_tokens == clean.window_tokens  # all embedded again
    assert not (tmp_path / "ix" / STAGING_NAME).exists()


@pytest.mark.slow
def test_a_sigkilled_ingest_keeps_the_batches_of_a_large_document(tmp_path: Path, tiny_model: Path) -> None:
    """The same with a real SIGKILL in a ``ragidx ingest`` process (parts are durable)."""
    docs = _big_and_small(tmp_path / "docs")
    config_file = tmp_path / "config.toml"
    config_file.write_text(f'[model]\nmodel = "{tiny_model}"\ndevice = "cpu"\n[ingest]\nbatch_tokens = 400\n')
    env = {**os.environ, faults.ENV: "after-batch:3", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "ragidx", "ingest", str(docs), "-i", str(tmp_path / "ix")]
    killed = subprocess.run([*command, "-c", str(config_file), "-q"], env=env, check=False)
    assert killed.returncode == -9
    config = tiny_config(tiny_model, batch_tokens=400)
    clean = ingest(docs, tmp_path / "clean", config)
    report = ingest(docs, tmp_path / "ix", config)
    assert report.resumed == 1 and 0 < report.window_tokens < clean.window_tokens
    np.testing.assert_allclose(_vectors(tmp_path / "ix")[2], _vectors(tmp_path / "clean")[2], atol=1e-5)


def test_a_streamed_file_changed_during_its_ingest_is_skipped_and_the_index_keeps_what_it_had(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = _big_and_small(tmp_path / "docs")
    big = docs / "big.txt"
    config = tiny_config(tiny_model, stream_bytes=2000)
    ingest(docs, tmp_path / "ix", config)
    before = _vectors(tmp_path / "ix")
    stored = Index.open(tmp_path / "ix").store.document("big.txt")
    big.write_text(long_text(2500, seed=6))  # changed since the last ingest ...
    real = pipeline.content_sha256

    def hashed_then_changed(document: documents.Document) -> str:
        digest = real(document)
        if document.doc_id == "big.txt":
            big.write_text(long_text(2500, seed=7))  # ... and again after this ingest hashed it
        return digest

    monkeypatch.setattr(pipeline, "content_sha256", hashed_then_changed)
    report = ingest(docs, tmp_path / "ix", config)
    assert [(Path(s.source).name, s.reason) for s in report.skipped] == [("big.txt", pipeline.CHANGED_REASON)]
    assert (report.added, report.updated, report.unchanged) == (0, 0, 1)
    index = Index.open(tmp_path / "ix")
    assert index.store.document("big.txt").sha256 == stored.sha256  # its text, hash and vectors agree
    assert _vectors(tmp_path / "ix")[1] == before[1]
    np.testing.assert_array_equal(_vectors(tmp_path / "ix")[2], before[2])
    assert not (tmp_path / "ix" / STAGING_NAME).exists()  # its spool and parts are gone
    monkeypatch.undo()
    again = ingest(docs, tmp_path / "ix", config)
    assert again.updated == 1 and not again.skipped  # the next ingest takes the file as it is now


def test_the_lexical_index_analyses_the_text_that_was_embedded(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A streamed file changed after it was embedded: its BM25 terms are still those of the text
    embedded (a private copy of it), not of the file as it is afterwards."""
    docs = tmp_path / "docs"
    docs.mkdir()
    big = docs / "big.txt"
    big.write_text("aardvark " + long_text(2000, seed=1))
    real = pipeline.embed_streamed

    def embedded_then_changed(document: documents.Document, *args: object, **kwargs: object) -> object:
        done = real(document, *args, **kwargs)  # type: ignore[arg-type]
        big.write_text("zeppelin " + long_text(2000, seed=1))
        return done

    monkeypatch.setattr(pipeline, "embed_streamed", embedded_then_changed)
    ingest(docs, tmp_path / "ix", tiny_config(tiny_model, stream_bytes=2000))
    lexical = Index.open(tmp_path / "ix").lexical
    assert lexical is not None
    assert lexical.scores("aardvark")[0] > 0 and lexical.scores("zeppelin")[0] == 0


_PEAK = """
import json, resource, sys
from pathlib import Path
from ragidx.config import RagidxConfig
from ragidx.ingestion.pipeline import ingest
model, warm, docs, out, long_doc = sys.argv[1:6]
config = RagidxConfig().override(model={"model": model, "device": "cpu"}, long_doc=json.loads(long_doc))
ingest(warm, Path(out) / "warm", config)  # model loaded, batches of full windows run once
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ingest(docs, Path(out) / "ix", config)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


@pytest.mark.parametrize(
    ("name", "long_doc"),
    [("big.txt", {"policy": "truncate"}), ("big.jsonl", {"policy": "chunk", "max_tokens": 2000})],
)
def test_peak_memory_of_a_large_file_below_the_streaming_size_is_a_few_times_its_size(
    tmp_path: Path, tiny_model: Path, name: str, long_doc: dict
) -> None:
    """A 1.6 MB file (under the 32 MiB streaming size, read whole) is tokenized piece by piece,
    never at once: the process grows by less than 16x the file (measured: ~13x; 0.3: ~160x, as a
    tokenizer holds ~150 bytes per character it is given; ~18x before the store stopped writing
    min/max statistics of texts). What still grows with the file is its text (read, stored,
    committed), its BM25 postings, and its rows and vectors."""
    warm, docs = tmp_path / "warm", tmp_path / "docs"
    warm.mkdir()
    docs.mkdir()
    (warm / "warm.txt").write_text(long_text(3000, seed=9))
    text = long_text(250_000, seed=8)
    (docs / name).write_text(json.dumps({"_id": "big", "text": text}) if name.endswith("jsonl") else text)
    size = (docs / name).stat().st_size
    assert 1_500_000 < size < 2_000_000
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    args = [str(tiny_model), str(warm), str(docs), str(tmp_path), json.dumps(long_doc)]
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, *args], env=env, capture_output=True, text=True, check=True
    )
    grew = int(done.stdout.split()[-1])
    assert grew < 16 * size, f"grew by {grew / 2**20:.0f} MiB for a {size / 2**20:.1f} MiB file"
