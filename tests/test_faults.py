"""Crash safety, by fault injection: killed ingests resume to the same index as a clean run,
readers see the previous complete generation during a write, failed writes leave nothing behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragidx import faults
from ragidx.embed.encoder import Encoder
from ragidx.index.directory import STAGING_NAME, Index
from ragidx.index.lock import LOCK_NAME
from ragidx.index.manifest import BACKUP_NAME, MANIFEST_NAME
from ragidx.index.verify import verify
from ragidx.ingestion.pipeline import ingest
from tests.conftest import tiny_config, write_docs

ROOT = Path(__file__).resolve().parent.parent
KILL_POINTS = ["write:3", "mid-commit:1", "after-commit:1"]
BATCH_TOKENS = 120  # a few documents per checkpointed batch
N_NEW = 12


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> dict[str, Any]:
    """An index of 3 documents (generation 1), a folder with 12 more, and the clean result of
    ingesting them in one run."""
    root = tmp_path_factory.mktemp("faults")
    docs = write_docs(root / "docs", 3)
    ingest(docs, root / "base", tiny_config(tiny_model, batch_tokens=BATCH_TOKENS))
    write_docs(docs / "new", N_NEW, seed=1)
    shutil.copytree(root / "base", root / "clean")
    writes: list[int] = []
    batches: list[int] = []
    with (
        faults.hook("write", lambda: writes.append(1)),
        faults.hook("after-batch", lambda: batches.append(1)),
    ):
        ingest(docs, root / "clean", tiny_config(tiny_model, batch_tokens=BATCH_TOKENS))
    assert len(batches) >= 4
    return {
        "docs": docs,
        "base": root / "base",
        "clean": root / "clean",
        "writes": len(writes),
        "batches": len(batches),
    }


def _copy_base(base: dict[str, Any], tmp_path: Path) -> Path:
    shutil.copytree(base["base"], tmp_path / "ix")
    return tmp_path / "ix"


def _snapshot(directory: Path) -> dict[str, tuple[list[int], np.ndarray]]:
    index = Index.open(directory)
    rows: dict[str, list[int]] = {}
    for vid, doc_id in zip(index.store.vids(), index.store.vector_doc_ids(), strict=True):
        rows.setdefault(doc_id, []).append(int(vid))
    return {d: (v, np.stack([index.vectors.index.reconstruct(i) for i in v])) for d, v in rows.items()}


def _assert_same_index(directory: Path, clean: Path) -> None:
    got, want = _snapshot(directory), _snapshot(clean)
    assert sorted(got) == sorted(want)
    for doc_id, (vids, vectors) in want.items():
        assert got[doc_id][0] == vids, doc_id
        np.testing.assert_allclose(got[doc_id][1], vectors, atol=1e-5)
    lexical, clean_lexical = Index.open(directory).lexical, Index.open(clean).lexical
    assert lexical is not None and clean_lexical is not None  # resumed: the same BM25 postings
    assert sorted(lexical.doc_ids) == sorted(clean_lexical.doc_ids)
    for query in ("Document 3", "first record"):
        ours = dict(zip(lexical.doc_ids, lexical.scores(query).tolist(), strict=True))
        theirs = dict(zip(clean_lexical.doc_ids, clean_lexical.scores(query).tolist(), strict=True))
        assert ours == pytest.approx(theirs, abs=1e-6)


@pytest.fixture(scope="module")
def killed(
    base: dict[str, Any], tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Copies of ``base`` into which ``ragidx ingest`` subprocesses (started together, to share
    their start-up time) ingested the new documents until they SIGKILLed themselves at a fault."""
    root = tmp_path_factory.mktemp("killed")
    config = root / "config.toml"
    config.write_text(
        f'[model]\nmodel = "{tiny_model}"\ndevice = "cpu"\n[ingest]\nbatch_tokens = {BATCH_TOKENS}\n'
    )
    running = {}
    for fault in KILL_POINTS:
        directory = root / fault.replace(":", "-")
        shutil.copytree(base["base"], directory)
        env = {**os.environ, faults.ENV: fault, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
        command = [sys.executable, "-m", "ragidx", "ingest", str(base["docs"]), "-i", str(directory)]
        running[fault] = (directory, subprocess.Popen([*command, "-c", str(config), "-q"], env=env))
    for fault, (_, process) in running.items():
        assert process.wait(timeout=300) == -9, f"{fault}: the ingest was not killed"
    return {fault: directory for fault, (directory, _) in running.items()}


@pytest.mark.slow
@pytest.mark.parametrize("fault", KILL_POINTS)
def test_killed_ingest_resumes_to_the_clean_index(
    base: dict[str, Any], killed: dict[str, Path], tiny_model: Path, fault: str
) -> None:
    directory = killed[fault]
    assert (directory / LOCK_NAME).exists()  # a SIGKILL releases nothing
    opened = Index.open(directory)  # a reader now sees one complete generation
    committed = fault == "after-commit:1"
    assert (opened.manifest.generation, len(opened)) == ((2, 3 + N_NEW) if committed else (1, 3))

    batches: list[int] = []
    with faults.hook("after-batch", lambda: batches.append(1)):
        report = ingest(base["docs"], directory, tiny_config(tiny_model, batch_tokens=BATCH_TOKENS))
    if committed:
        assert (report.added, report.unchanged, report.resumed) == (0, 3 + N_NEW, 0)
    else:
        assert (report.added, report.unchanged) == (N_NEW, 3)
    if fault == "write:3":  # killed writing the third checkpoint: the first two are reused
        assert 0 < report.resumed < N_NEW and len(batches) == base["batches"] - 2
    if fault == "mid-commit:1":  # every batch was checkpointed: nothing is embedded again
        assert report.resumed == N_NEW and batches == []
    _assert_same_index(directory, base["clean"])
    left = sorted(p.name for p in directory.iterdir())
    assert left == [
        "chunks-000002.parquet",
        "documents-000002.parquet",
        "lexical-000002.npz",
        BACKUP_NAME,
        MANIFEST_NAME,
        "vectors-000002.faiss",
    ]
    assert verify(directory).ok


def test_reader_during_a_write_sees_the_previous_generation(
    base: dict[str, Any], tmp_path: Path, tiny_model: Path, tiny_encoder: Encoder
) -> None:
    directory = _copy_base(base, tmp_path)
    seen: list[tuple[int, int, str]] = []

    def read() -> None:
        index = Index.open(directory, encoder=tiny_encoder)
        hits = index.search("Document 1.", k=20)
        seen.append((index.manifest.generation, len(index), " ".join(sorted(h.doc_id for h in hits))))

    with faults.hook("after-batch", read), faults.hook("mid-commit", read), faults.hook("write", read):
        ingest(base["docs"], directory, tiny_config(tiny_model, batch_tokens=BATCH_TOKENS))
    after = Index.open(directory)
    assert (after.manifest.generation, len(after)) == (2, 3 + N_NEW)
    # every read before the switch sees generation 1 whole; the one write after it (the manifest's
    # backup copy) sees generation 2 whole: never a mix
    old = (1, 3, "doc-00.txt doc-01.txt doc-02.txt")
    new = (2, 3 + N_NEW, " ".join(sorted(h.doc_id for h in after.search("Document 1.", k=20))))
    before_switch = seen[: seen.index(new)] if new in seen else seen
    assert len(before_switch) > 5 and set(before_switch) == {old}
    assert set(seen[len(before_switch) :]) <= {new}


@pytest.mark.parametrize("last", [2, 5])
def test_failed_write_during_commit_leaves_the_old_index(
    base: dict[str, Any], tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch, last: int
) -> None:
    """The k-th last write of a commit (5: the FAISS file, 2: the manifest switch) fails (the last,
    the manifest's backup, comes after the switch: see tests/index/test_commit_interrupt.py)."""
    directory = _copy_base(base, tmp_path)
    monkeypatch.setenv(faults.ENV, f"write:{base['writes'] - last + 1}:oserror")
    faults.reset()
    with pytest.raises(OSError, match="no space left") as caught:
        ingest(base["docs"], directory, tiny_config(tiny_model, batch_tokens=BATCH_TOKENS))
    assert f"cannot write {directory}" in str(caught.value)  # the error names the file
    monkeypatch.delenv(faults.ENV)
    names = sorted(p.name for p in directory.iterdir())
    assert names == [
        STAGING_NAME,
        "chunks-000001.parquet",
        "documents-000001.parquet",
        "lexical-000001.npz",
        BACKUP_NAME,
        MANIFEST_NAME,
        "vectors-000001.faiss",
    ]  # old generation, checkpoints; no lock, temp or new files
    assert len(Index.open(directory)) == 3
    report = ingest(base["docs"], directory, tiny_config(tiny_model, batch_tokens=BATCH_TOKENS))
    assert report.resumed == N_NEW and report.added == N_NEW
    _assert_same_index(directory, base["clean"])
