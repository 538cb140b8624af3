"""The single-writer lock: exclusive, names its holder, stale locks of dead processes taken over."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ragidx.index.lock import LOCK_NAME, IndexLockedError, WriterLock
from ragidx.ingestion.pipeline import ingest
from tests.conftest import tiny_config, write_docs


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_second_writer_is_refused_with_the_holder_named(tmp_path: Path, tiny_model: Path) -> None:
    docs = write_docs(tmp_path / "docs", 2)
    with WriterLock(tmp_path / "ix"):
        holder = json.loads((tmp_path / "ix" / LOCK_NAME).read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        with pytest.raises(IndexLockedError, match=rf"pid {os.getpid()} on .*wait for it to finish"):
            ingest(docs, tmp_path / "ix", tiny_config(tiny_model))
        with pytest.raises(IndexLockedError):
            WriterLock(tmp_path / "ix").acquire()
    assert not (tmp_path / "ix").exists()  # created for the lock, empty again: removed
    report = ingest(docs, tmp_path / "ix", tiny_config(tiny_model))
    assert report.added == 2 and not (tmp_path / "ix" / LOCK_NAME).exists()


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path: Path, tiny_model: Path) -> None:
    (tmp_path / "ix").mkdir()
    stale = {"pid": _dead_pid(), "host": socket.gethostname(), "started": "2020-01-01T00:00:00+00:00"}
    (tmp_path / "ix" / LOCK_NAME).write_text(json.dumps(stale))
    lock = WriterLock(tmp_path / "ix").acquire()
    assert lock.took_over == stale
    lock.release()
    assert not (tmp_path / "ix" / LOCK_NAME).exists()


def test_lock_from_another_host_is_not_guessed_stale(tmp_path: Path) -> None:
    (tmp_path / "ix").mkdir()
    other = {"pid": _dead_pid(), "host": "some-other-host", "started": "2020-01-01T00:00:00+00:00"}
    (tmp_path / "ix" / LOCK_NAME).write_text(json.dumps(other))
    with pytest.raises(IndexLockedError, match="on some-other-host"):
        WriterLock(tmp_path / "ix").acquire()
    assert (tmp_path / "ix" / LOCK_NAME).exists()


def test_lock_is_released_when_the_writer_fails(tmp_path: Path, tiny_model: Path) -> None:
    docs = write_docs(tmp_path / "docs", 1)
    ingest(docs, tmp_path / "ix", tiny_config(tiny_model))
    (docs / "bad.txt").write_bytes(b"\x00binary")
    with pytest.raises(Exception, match="strict"):
        ingest(docs, tmp_path / "ix", tiny_config(tiny_model, strict=True))
    assert not (tmp_path / "ix" / LOCK_NAME).exists()
