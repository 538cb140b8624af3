"""Many writers racing for one index: exactly one takes a stale lock over, every trial.

Each trial leaves the lock of a dead process in the index directory, then releases
:data:`WORKERS` processes at once (a barrier) to :meth:`WriterLock.acquire` it. Every winner holds
the lock until all have tried, so two winners in a trial are two writers at the same time. The
staleness check sleeps up to 5 ms in the workers, so the race shows on few cores.
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import random
import socket
import subprocess
import sys
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from ragidx.index import lock as lock_module
from ragidx.index.lock import LOCK_NAME, IndexLockedError, WriterLock

WORKERS = 20
TRIALS = 8
WON, REFUSED = 1, 0
STALE_CHECK = lock_module.is_stale


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _slow_is_stale(holder: dict[str, object]) -> bool:
    """``is_stale`` taking a few milliseconds, as it can when the writer is descheduled: what
    makes the race between deciding that a lock is stale and replacing it show on 2 cores."""
    time.sleep(random.uniform(0, 0.005))
    return STALE_CHECK(holder)


def _contend(directory: Path, barrier: Barrier, results: multiprocessing.Queue, trials: int) -> None:
    lock_module.is_stale = _slow_is_stale  # this process is a fork of the test's: patch it here
    for _ in range(trials):
        barrier.wait()  # the stale lock is in place: go
        lock = WriterLock(directory)
        try:
            lock.acquire()
            outcome: object = WON
        except IndexLockedError:
            outcome = REFUSED
        except Exception as exc:  # anything else is a failure the parent reports
            outcome = f"{type(exc).__name__}: {exc}"
        results.put(outcome)
        try:
            barrier.wait()  # everyone has tried: winners release
        finally:
            lock.release()
        barrier.wait()  # released: the parent sets up the next trial


@pytest.mark.skipif(sys.platform == "win32", reason="the writer lock is POSIX (flock)")
def test_exactly_one_of_many_writers_takes_over_a_stale_lock(tmp_path: Path) -> None:
    directory = tmp_path / "ix"
    directory.mkdir()
    stale = {"pid": _dead_pid(), "host": socket.gethostname(), "started": "2020-01-01T00:00:00+00:00"}
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(WORKERS + 1, timeout=120)
    results: multiprocessing.Queue = context.Queue()
    workers = [
        context.Process(target=_contend, args=(directory, barrier, results, TRIALS)) for _ in range(WORKERS)
    ]
    for worker in workers:
        worker.start()
    winners = []
    try:
        for _ in range(TRIALS):
            (directory / LOCK_NAME).write_text(json.dumps(stale))
            barrier.wait()
            barrier.wait()
            outcomes = [results.get(timeout=60) for _ in range(WORKERS)]
            assert all(o in (WON, REFUSED) for o in outcomes), outcomes
            winners.append(outcomes.count(WON))
            barrier.wait()
            assert not (directory / LOCK_NAME).exists()  # the winner released it
    finally:
        barrier.abort()  # a failed trial frees the workers at once
        for worker in workers:
            worker.join(timeout=60)
            if worker.is_alive():
                worker.kill()
    assert winners == [1] * TRIALS
    assert sorted(p.name for p in directory.iterdir()) == []  # no temp or takeover files left


def test_an_unreadable_lock_file_is_refused_with_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "ix").mkdir()
    for content in ("", "{not json", "[1, 2]"):
        (tmp_path / "ix" / LOCK_NAME).write_text(content)
        with pytest.raises(IndexLockedError) as refused:
            WriterLock(tmp_path / "ix").acquire()
        message = str(refused.value)
        assert "unreadable" in message and "no ragidx ingest or delete is running" in message
        assert f"remove {tmp_path / 'ix' / LOCK_NAME}" in message
        assert (tmp_path / "ix" / LOCK_NAME).read_text() == content  # never removed by a guess


def test_a_filesystem_without_flock_refuses_the_takeover_instead_of_guessing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ix").mkdir()
    stale = {"pid": _dead_pid(), "host": socket.gethostname(), "started": "2020-01-01T00:00:00+00:00"}
    (tmp_path / "ix" / LOCK_NAME).write_text(json.dumps(stale))

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(lock_module.fcntl, "flock", no_locks)
    with pytest.raises(IndexLockedError, match=r"cannot be taken over safely here \(flock: No locks"):
        WriterLock(tmp_path / "ix").acquire()
    assert json.loads((tmp_path / "ix" / LOCK_NAME).read_text()) == stale
    assert sorted(p.name for p in (tmp_path / "ix").iterdir()) == [LOCK_NAME]
