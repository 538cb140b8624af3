"""Ctrl-C after the commit (issue 39, item 4): between ``commit()`` returning and the command's end
(staging clean-up, lock release, summary) an interrupt said ``nothing was committed`` although the
generation was; an interrupt inside the lock release left ``.ragidx-lock`` behind. Every step
after the switch now reports the generation committed, and the lock is always removed.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.index.lock import LOCK_NAME, WriterLock
from ragidx.index.manifest import Manifest
from ragidx.ingestion.checkpoints import Checkpoints
from tests.conftest import write_docs

runner = CliRunner()


def _interrupt() -> None:
    raise KeyboardInterrupt


def _real_sigint_in_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real SIGINT delivered just before the lock file is unlinked (between two bytecodes of
    the release, where a Ctrl-C can land)."""
    unlink = Path.unlink

    def interrupted_unlink(path: Path, missing_ok: bool = False) -> None:
        if path.name == LOCK_NAME:
            os.kill(os.getpid(), signal.SIGINT)
        unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", interrupted_unlink)


def _staging(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Checkpoints, "clear", lambda self: _interrupt())


def _summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ragidx.cli.ingest._summary", lambda report: _interrupt())


def _twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first interrupt in the staging clean-up, a second while it unwinds (the lock release)."""
    _staging(monkeypatch)
    release = WriterLock.release

    def interrupted_release(lock: WriterLock) -> None:
        release(lock)
        raise KeyboardInterrupt

    monkeypatch.setattr(WriterLock, "release", interrupted_release)


STEPS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "staging clean-up": _staging,
    "lock release": _real_sigint_in_release,
    "summary": _summary,
    "a second interrupt": _twice,
}


@pytest.mark.parametrize("step", STEPS)
def test_ingest_interrupted_after_the_commit_reports_the_generation(
    step: str, index: Path, sound: Path, tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = Path(shutil.copytree(sound.parent / "docs", tmp_path / "docs"))
    write_docs(docs / "new", 1, seed=5)
    STEPS[step](monkeypatch)
    result = runner.invoke(app, ["ingest", str(docs), "-i", str(index), "-m", str(tiny_model), "-q"])
    monkeypatch.undo()
    assert result.exit_code == 130, result.output
    assert "nothing was committed" not in result.stderr
    assert f"interrupted: {index}: generation 2 was committed" in result.stderr
    assert Manifest.read(index).generation == 2
    assert not (index / LOCK_NAME).exists()


def test_delete_interrupted_after_the_commit_reports_the_generation(
    index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ragidx.cli.delete.plural", lambda *args: _interrupt())
    result = runner.invoke(app, ["delete", str(index), "--id", "doc-00.txt"])
    assert result.exit_code == 130, result.output
    assert f"interrupted: {index}: generation 2 was committed" in result.stderr
    assert "nothing was committed" not in result.stderr


def test_an_interrupt_before_the_commit_still_says_nothing_was_committed(
    index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ragidx.index.directory.Index.commit", lambda self, *a, **k: _interrupt())
    result = runner.invoke(app, ["delete", str(index), "--id", "doc-00.txt"])
    assert result.exit_code == 130, result.output
    assert "interrupted: nothing was committed" in result.stderr
    assert Manifest.read(index).generation == 1
    assert not (index / LOCK_NAME).exists()


def test_a_sigint_during_the_lock_release_is_raised_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = WriterLock(tmp_path / "ix").acquire()
    _real_sigint_in_release(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        lock.release()
    assert not (tmp_path / "ix" / LOCK_NAME).exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
