"""An interrupt (Ctrl-C) at every step of a commit: before the manifest switch nothing changes;
from the switch on the new generation is kept whole and the interrupt says it was committed.

The steps are those of :meth:`Index.commit` on a dense + lexical index: each atomic file write
(``write:k``, before its rename; the manifest is the 5th, its backup, after the switch, the 6th),
the directory fsync after each rename (``fsync:k``: the 5th is the one just after the manifest
switch), ``mid-commit``, ``after-commit`` and the removal of the previous generation's files
(``cleanup``). They are exercised for the three
writers: an ingest into an index, an ingest creating one, and a delete.
"""

from __future__ import annotations

import errno
import functools
import shutil
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragidx import faults
from ragidx.cli import app
from ragidx.errors import RagidxError
from ragidx.index import manifest as manifest_module
from ragidx.index.delete import delete
from ragidx.index.directory import Index, InterruptedAfterCommit
from ragidx.index.manifest import MANIFEST_NAME, Manifest
from ragidx.index.verify import verify
from ragidx.ingestion.pipeline import ingest
from tests.conftest import tiny_config, write_docs

N_FILES = 6  # vectors, documents, chunks, lexical, manifest.json (the switch), manifest.backup.json
SWITCH = 5  # the write of manifest.json
STEPS = [
    *(f"write:{k}" for k in range(1, N_FILES + 1)),
    *(f"fsync:{k}" for k in range(1, N_FILES + 1)),
    "mid-commit:1",
    "after-commit:1",
    "cleanup:1",
]
LANDED = {  # the manifest was already switched
    *(f"fsync:{k}" for k in range(SWITCH, N_FILES + 1)),
    *(f"write:{k}" for k in range(SWITCH + 1, N_FILES + 1)),
    "after-commit:1",
    "cleanup:1",
}
OPERATIONS = ["ingest", "fresh", "delete"]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """``docs`` (3 files, then 2 more under ``docs/new``) and ``ix``, an index of the first 3."""
    root = tmp_path_factory.mktemp("interrupt")
    ingest(write_docs(root / "docs", 3), root / "ix", tiny_config(tiny_model))
    write_docs(root / "docs" / "new", 2, seed=1)
    return root


def _run(operation: str, root: Path, tiny_model: Path) -> None:
    if operation == "delete":
        delete(root / "ix", ids=["doc-00.txt"])
    else:
        ingest(root / "docs", root / "ix", tiny_config(tiny_model))


def _expected(operation: str, committed: bool) -> tuple[int, list[str]]:
    """(generation, document ids) of the index after the operation did, or did not, commit."""
    old = ["doc-00.txt", "doc-01.txt", "doc-02.txt"]
    new = sorted([*old, "new/doc-00.txt", "new/doc-01.txt"])
    if operation == "fresh":
        return (1, new) if committed else (0, [])
    if operation == "delete":
        return (2, old[1:]) if committed else (1, old)
    return (2, new) if committed else (1, old)


def _setup(operation: str, base: Path, tmp_path: Path) -> Path:
    shutil.copytree(base / "docs", tmp_path / "docs")
    if operation != "fresh":
        shutil.copytree(base / "ix", tmp_path / "ix")
    return tmp_path


class _Steps:
    """Counts the steps of commits (only inside ``Index.commit``) and interrupts at one of them."""

    def __init__(self, stop_at: str | None = None):
        self.stop_at = stop_at
        self.seen: Counter[str] = Counter()
        self.armed = False

    def reach(self, name: str) -> None:
        if not self.armed:
            return
        self.seen[name] += 1
        if f"{name}:{self.seen[name]}" == self.stop_at:
            raise KeyboardInterrupt

    @contextmanager
    def installed(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Steps]:
        commit, fsync_dir, remove = Index.commit, manifest_module._fsync_dir, Index._remove_stale_files

        def armed_commit(index: Index, directory: str | Path | None = None) -> None:
            self.armed = True
            try:
                commit(index, directory)
            finally:
                self.armed = False

        def counted_fsync(directory: Path) -> None:
            self.reach("fsync")
            fsync_dir(directory)

        def counted_remove(index: Index, keep: set[str]) -> None:
            self.reach("cleanup")
            remove(index, keep)

        monkeypatch.setattr(Index, "commit", armed_commit)
        monkeypatch.setattr(manifest_module, "_fsync_dir", counted_fsync)
        monkeypatch.setattr(Index, "_remove_stale_files", counted_remove)
        with ExitStack() as stack:
            for name in ("write", "mid-commit", "after-commit"):
                stack.enter_context(faults.hook(name, functools.partial(self.reach, name)))
            yield self


@pytest.fixture()
def steps(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[_Steps]:
    with _Steps(getattr(request, "param", None)).installed(monkeypatch) as counter:
        yield counter


def _state(directory: Path) -> tuple[int, list[str]]:
    if not Index.exists(directory):
        return 0, []
    index = Index.open(directory)
    return index.manifest.generation, sorted(index.doc_ids())


def _generation_files(directory: Path, generation: int) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if f"-{generation:06d}" in p.name)


@pytest.mark.parametrize("operation", OPERATIONS)
def test_the_steps_listed_are_every_step_of_a_commit(
    operation: str, base: Path, tmp_path: Path, tiny_model: Path, steps: _Steps
) -> None:
    root = _setup(operation, base, tmp_path)
    _run(operation, root, tiny_model)
    assert sorted(f"{name}:{n}" for name, count in steps.seen.items() for n in range(1, count + 1)) == sorted(
        STEPS
    )


@pytest.mark.parametrize("steps", STEPS, indirect=True)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_an_interrupt_at_any_step_loses_nothing(
    operation: str, base: Path, tmp_path: Path, tiny_model: Path, steps: _Steps
) -> None:
    root = _setup(operation, base, tmp_path)
    landed = steps.stop_at in LANDED
    with pytest.raises(KeyboardInterrupt) as raised:
        _run(operation, root, tiny_model)
    assert isinstance(raised.value, InterruptedAfterCommit) == landed
    generation, doc_ids = _expected(operation, committed=landed)
    assert _state(root / "ix") == (generation, doc_ids)
    if landed:
        assert f"generation {generation} was committed" in str(raised.value)
        assert _generation_files(root / "ix", generation)  # nothing of the new generation deleted
    else:
        assert _generation_files(root / "ix", generation + 1) == []  # the unswitched files: removed
    if generation:
        assert verify(root / "ix").ok

    steps.stop_at = None
    _run(operation, root, tiny_model)  # the same command again finishes the job
    final_generation, final_ids = _expected(operation, committed=True)
    if landed and operation == "delete":
        assert _state(root / "ix") == (final_generation, final_ids)  # nothing left to delete
    else:
        assert _state(root / "ix")[1] == final_ids
    report = verify(root / "ix")
    assert report.ok and report.notes == [], (report.problems, report.notes)


def test_ctrl_c_just_after_the_manifest_switch_says_the_ingest_was_committed(
    base: Path, tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reproduction in the issue: ``_fsync_dir`` raises KeyboardInterrupt on the call that
    follows the manifest's rename; the CLI must not say "nothing was committed"."""
    root = _setup("ingest", base, tmp_path)
    fsync_dir = manifest_module._fsync_dir

    def interrupted(directory: Path) -> None:
        if _switched(directory):
            raise KeyboardInterrupt
        fsync_dir(directory)

    monkeypatch.setattr(manifest_module, "_fsync_dir", interrupted)
    args = ["ingest", str(root / "docs"), "-i", str(root / "ix"), "-m", str(tiny_model), "-q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 130
    assert "nothing was committed" not in result.stderr
    assert f"interrupted: {root / 'ix'}: generation 2 was committed" in result.stderr
    assert _state(root / "ix") == _expected("ingest", committed=True)
    monkeypatch.setattr(manifest_module, "_fsync_dir", fsync_dir)
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert verify(root / "ix").ok


@pytest.mark.parametrize("failing", ["fsync", "cleanup"])
def test_a_failure_after_the_switch_says_the_commit_stands(
    base: Path, tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """An OSError after the manifest switch (its directory fsync, removing the old files) is not
    "nothing was committed": the new generation is kept and the error says it was committed."""
    root = _setup("ingest", base, tmp_path)
    fsync_dir, remove = manifest_module._fsync_dir, Index._remove_stale_files

    def broken_fsync(directory: Path) -> None:
        if failing == "fsync" and _switched(directory):
            raise OSError(errno.EIO, "injected: I/O error")
        fsync_dir(directory)

    def broken_remove(index: Index, keep: set[str]) -> None:
        if failing == "cleanup" and _switched(root / "ix"):
            raise OSError(errno.EACCES, "injected: permission denied")
        remove(index, keep)

    monkeypatch.setattr(manifest_module, "_fsync_dir", broken_fsync)
    monkeypatch.setattr(Index, "_remove_stale_files", broken_remove)
    landed = r"generation 2 was committed, but finishing it failed \(.*injected"
    with pytest.raises(RagidxError, match=landed):
        _run("ingest", root, tiny_model)
    assert _state(root / "ix") == _expected("ingest", committed=True)


def _switched(directory: Path) -> bool:
    """Whether the ingest's commit has switched the manifest to generation 2."""
    return (directory / MANIFEST_NAME).exists() and Manifest.read(directory).generation == 2
