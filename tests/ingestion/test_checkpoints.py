"""Checkpoint files: Parquet round trip, fingerprint folders, damaged batches dropped."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ragidx.index.directory import STAGING_NAME
from ragidx.ingestion.checkpoints import Checkpoints


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
    (checkpoints.folder / "batch-broken.parquet").write_bytes(b"PAR1 not parquet")
    (checkpoints.folder / ".batch-x.parquet.tmp-123").write_bytes(b"half")
    wrong_dim = Checkpoints(tmp_path, "f" * 64, 8)
    assert wrong_dim.load() == {}  # 4-d vectors under an 8-d index: not reused
    checkpoints.save({"a" * 64: np.ones((1, 4), np.float32)})
    assert list(Checkpoints(tmp_path, "f" * 64, 4).load()) == ["a" * 64]
    assert len(list(checkpoints.folder.iterdir())) == 1  # broken batch and temp file are gone
