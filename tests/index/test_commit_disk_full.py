"""A commit that cannot write (issue 39, item 8): the error says what failed, that nothing was
committed, and what to do; before, a full disk printed ``error: [Errno 28] cannot write …`` alone."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragidx import faults
from ragidx.cli import app
from ragidx.index import directory as directory_module
from ragidx.index.directory import Index
from ragidx.index.verify import verify


@pytest.fixture()
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first file a commit writes fails as a full disk does."""
    monkeypatch.setenv(faults.ENV, "write:1:oserror")
    faults.reset()


def test_a_full_disk_says_nothing_was_committed_and_to_free_space(built: Path, full_disk: None) -> None:
    index = Index.open(built)
    index.remove({"doc-00.txt"})
    with pytest.raises(OSError, match="no space left on device") as failed:
        index.commit()
    message = str(failed.value)
    assert failed.value.errno == errno.ENOSPC and f"cannot write {built}" in message
    assert "nothing was committed: free space on the disk of" in message and "\n" not in message
    assert Index.open(built).manifest.generation == 1 and verify(built).ok


def test_the_command_prints_it_as_one_error_line(built: Path, full_disk: None) -> None:
    result = CliRunner().invoke(app, ["delete", str(built), "--id", "doc-00.txt"])
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: [Errno 28] cannot write")
    assert "nothing was committed: free space" in line and "run the command again" in line


def test_a_permission_error_names_the_file_and_says_to_make_it_writable(
    built: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(path: Path, data: bytes) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(directory_module, "write_atomic", refused)
    index = Index.open(built)
    index.remove({"doc-00.txt"})
    with pytest.raises(PermissionError) as failed:
        index.commit()
    assert f"cannot write {built}/vectors-000002.faiss (Permission denied)" in str(failed.value)
    assert f"nothing was committed: make {built} writable" in str(failed.value)
