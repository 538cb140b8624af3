"""Checkpoint files: Parquet round trip, fingerprint folders, damaged batches dropped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from ragidx import faults
from ragidx.config import RagidxConfig
from ragidx.index.directory import STAGING_NAME, Index
from ragidx.ingestion.checkpoints import Checkpoints
from ragidx.ingestion.pipeline import ingest
from tests.conftest import tiny_config, write_docs


def test_batches_round_trip_and_other_fingerprints_are_dropped(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    first = {"a" * 64: rng.standard_normal((3, 8)).astype(np.float32)}
    second = {"b" * 64: rng.standard_normal((1, 8)).astype(np.float32), "c" * 64: np.ones((2, 8), np.float32)}
    checkpoints = Checkpoints(tmp_path, "f" * 64, 8)
    checkpoints.save(first)
    checkpoints.save(second)
    checkpoints.save({})
    old = Checkpoints(tmp_path, "0" * 64, 8)
    old.save(first)
    loaded = Checkpoints(tmp_path, "f" * 64, 8).load()
    assert sorted(loaded) == ["a" * 64, "b" * 64, "c" * 64]
    for key, vectors in {**first, **second}.items():
        np.testing.assert_array_equal(loaded[key], vectors)
    assert [p.name for p in (tmp_path / STAGING_NAME).iterdir()] == [checkpoints.folder.name]
    checkpoints.clear()
    assert not (tmp_path / STAGING_NAME).exists()


def test_damaged_batches_and_temp_files_are_removed(tmp_path: Path) -> None:
    checkpoints = Checkpoints(tmp_path, "f" * 64, 4)
    checkpoints.save({"a" * 64: np.ones((1, 4), np.float32)})
    (checkpoints.folder / "batch-broken.parquet").write_bytes(b"PAR1 not parquet")  # no checksum
    (checkpoints.folder / f"batch-{'0' * 24}-{'1' * 64}.parquet").write_bytes(b"PAR1 not parquet")
    (checkpoints.folder / ".batch-x.parquet.tmp-123").write_bytes(b"half")
    wrong_dim = Checkpoints(tmp_path, "f" * 64, 8)
    assert wrong_dim.load() == {}  # 4-d vectors under an 8-d index: not reused
    assert len(wrong_dim.damaged) == 2  # the 4-d batch and the one whose checksum does not match
    checkpoints.save({"a" * 64: np.ones((1, 4), np.float32)})
    assert list(Checkpoints(tmp_path, "f" * 64, 4).load()) == ["a" * 64]
    assert len(list(checkpoints.folder.iterdir())) == 1  # broken batches and temp file are gone


def test_parts_are_read_in_window_order_up_to_the_first_gap_or_damage(tmp_path: Path) -> None:
    sha = "d" * 64
    checkpoints = Checkpoints(tmp_path, "f" * 64, 4)
    assert checkpoints.part(sha).vectors.shape == (0, 4) and checkpoints.part(sha).runs == []
    windows = np.arange(40, dtype=np.float32).reshape(10, 4)
    for start, end in [(0, 3), (3, 5), (5, 6), (8, 10)]:  # windows 6 and 7: never saved
        checkpoints.save_part(sha, start, windows[start:end], f"{start:064x}")
    checkpoints.save_part("e" * 64, 0, windows[:1], "0" * 64)
    parts = checkpoints.part(sha)
    np.testing.assert_array_equal(parts.vectors, windows[:6])
    assert parts.runs == [(0, 3, f"{0:064x}"), (3, 2, f"{3:064x}"), (5, 1, f"{5:064x}")]
    second = sorted(checkpoints.folder.glob(f"part-{sha}-000000003-*"))[0]
    second.write_bytes(second.read_bytes()[:-1] + b"X")
    np.testing.assert_array_equal(checkpoints.part(sha).vectors, windows[:3])
    assert checkpoints.damaged == [second] and not second.exists()
    assert Checkpoints(tmp_path, "f" * 64, 4).load() == {}  # parts are not whole documents
    checkpoints.drop_parts(sha)
    assert [p.name[:69] for p in checkpoints.folder.iterdir()] == [f"part-{'e' * 64}"]


def test_a_part_without_the_sha256_of_its_tokens_is_never_trusted(tmp_path: Path) -> None:
    """A part written before parts recorded their tokens (issue 29) cannot be checked against the
    text read now: it is removed, silently (it is not damaged), and its windows embedded again."""
    sha = "d" * 64
    checkpoints = Checkpoints(tmp_path, "f" * 64, 4)
    checkpoints._write(f"part-{sha}-{0:09d}", [sha] * 2, [0, 1], np.ones((2, 4), np.float32))  # no metadata
    checkpoints.save_part(sha, 2, np.zeros((1, 4), np.float32), "a" * 64)
    assert len(checkpoints.part(sha)) == 0 and checkpoints.damaged == []
    assert [p.name[:79] for p in checkpoints.folder.iterdir()] == [f"part-{sha}-{2:09d}"]


def _killed_before_commit(docs: Path, directory: Path, config: RagidxConfig) -> None:
    def crash() -> None:
        raise RuntimeError("killed")

    with faults.hook("before-commit", crash), pytest.raises(RuntimeError, match="killed"):
        ingest(docs, directory, config)


def test_a_flipped_byte_in_a_checkpoint_is_detected_and_its_batch_embedded_again(
    tmp_path: Path, tiny_model: Path
) -> None:
    docs = write_docs(tmp_path / "docs", 6)
    config = tiny_config(tiny_model, batch_tokens=60)
    clean = ingest(docs, tmp_path / "clean", config)
    _killed_before_commit(docs, tmp_path / "ix", config)
    batches = sorted((tmp_path / "ix" / STAGING_NAME).glob("*/batch-*.parquet"))
    assert len(batches) >= 3
    damaged = batches[1]
    data = bytearray(damaged.read_bytes())
    stored = pq.read_table(damaged)["vector"][0].values.to_numpy().astype("<f4")
    at = bytes(data).find(stored[:2].tobytes())  # the stored floats, as written
    assert at > 0
    data[at + 3] ^= 0x40  # one bit of the first float's exponent: a wrong vector, still valid Parquet
    damaged.write_bytes(bytes(data))

    report = ingest(docs, tmp_path / "ix", config)
    assert 0 < report.resumed < clean.added and report.added == clean.added
    ours, theirs = Index.open(tmp_path / "ix"), Index.open(tmp_path / "clean")
    vids = np.sort(theirs.store.vids())
    np.testing.assert_array_equal(np.sort(ours.store.vids()), vids)
    np.testing.assert_allclose(ours.vectors_of(vids), theirs.vectors_of(vids), atol=1e-6)
    assert [Path(w.source) for w in report.warnings] == [damaged]
    assert "checksum" in report.warnings[0].reason and "embedded again" in report.warnings[0].reason


def test_a_full_disk_while_checkpointing_names_the_file(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = write_docs(tmp_path / "docs", 3)
    monkeypatch.setenv(faults.ENV, "write:1:oserror")  # the first write: the first batch's checkpoint
    faults.reset()
    with pytest.raises(OSError, match="no space left on device") as failed:
        ingest(docs, tmp_path / "ix", tiny_config(tiny_model, batch_tokens=60))
    message = str(failed.value)
    assert f"{tmp_path / 'ix' / STAGING_NAME}/" in message and ".parquet" in message
    assert "free space" in message and "\n" not in message
    assert not Index.exists(tmp_path / "ix")
