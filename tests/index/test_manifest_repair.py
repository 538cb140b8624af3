"""``repair`` of a damaged ``manifest.json`` (garbage, truncated, a flip that keeps valid JSON but
fails its checksum, deleted): rebuilt from ``manifest.backup.json``, the copy each commit writes
after its switch, into an index that answers queries as before the damage. Refused, touching
nothing, where that copy cannot be trusted (damaged too, absent as in indexes written before it
existed); a crash on either side of the switch never brings back a generation that was not
committed."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from ragidx import faults
from ragidx.embed.encoder import Encoder
from ragidx.errors import IndexFormatError
from ragidx.index.delete import delete
from ragidx.index.directory import Index
from ragidx.index.lock import LOCK_NAME
from ragidx.index.manifest import BACKUP_NAME, MANIFEST_NAME, Manifest
from ragidx.index.verify import repair, verify
from ragidx.ingestion.pipeline import ingest
from tests.conftest import tiny_config

DOC_IDS = [f"doc-{i:02d}.txt" for i in range(4)]
QUERIES = ["Document 1.", "Document 3. river", "stone light"]
HINT = "ragidx verify --repair"
NO_REPAIR = "restore manifest.json from a backup, or ingest into a new index directory"


def _garbage(path: Path) -> None:
    path.write_bytes(b"\x00\x13garbage{")


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _checksum(path: Path) -> None:
    """The issue's case for the tiny model: ``"window": 64`` read as ``24``, still valid JSON."""
    text = path.read_text(encoding="utf-8")
    assert text.count('"window": 64') == 1
    path.write_text(text.replace('"window": 64', '"window": 24'), encoding="utf-8")


def _delete(path: Path) -> None:
    path.unlink()


DAMAGE: dict[str, Callable[[Path], None]] = {
    "garbage": _garbage,
    "truncated": _truncate,
    "checksum": _checksum,
    "deleted": _delete,
}


def _results(directory: Path, encoder: Encoder) -> list[list[tuple[str, float]]]:
    index = Index.open(directory, encoder=encoder)
    return [[(h.doc_id, round(h.score, 5)) for h in index.search(q, k=4)] for q in QUERIES]


def _files(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def _settings(manifest: Manifest) -> dict:
    return manifest.model_dump(mode="json", include={"encoder", "long_doc", "faiss", "lexical", "created"})


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_manifest_is_rebuilt_from_its_backup(
    built: Path, tiny_model: Path, tiny_encoder: Encoder, damage: str
) -> None:
    before, settings = _results(built, tiny_encoder), _settings(Manifest.read(built))
    DAMAGE[damage](built / MANIFEST_NAME)
    with pytest.raises(IndexFormatError, match=f"{HINT} {built}"):  # readers point to the repair
        Index.open(built)
    with pytest.raises(IndexFormatError, match=HINT):  # an ingest neither embeds nor wipes anything
        ingest(built.parent / "docs", built, tiny_config(tiny_model))
    assert (built / "vectors-000001.faiss").is_file()
    found = verify(built)
    assert not found.ok and found.repairable

    report = repair(built)
    assert report.repaired and report.generation == 2 and report.documents == 4
    assert report.dropped == {} and report.dropped_unnamed == 0
    assert report.manifest_from == str(built / BACKUP_NAME)
    assert report.rebuilt == [f"the manifest, from {built / BACKUP_NAME} (generation 1)"]
    assert str(built / MANIFEST_NAME) in report.damage[0]
    after = verify(built)
    notes = [note for note in after.notes if "quarantine" not in note]  # the damaged files, kept
    assert after.ok and notes == [], (after.problems, after.notes)  # the backup follows
    assert _settings(Manifest.read(built)) == settings
    assert _results(built, tiny_encoder) == before
    assert ingest(built.parent / "docs", built, tiny_config(tiny_model)).unchanged == 4


def test_documents_of_a_damaged_data_file_are_salvaged_too(built: Path, tiny_encoder: Encoder) -> None:
    _checksum(built / MANIFEST_NAME)
    _truncate(built / "vectors-000001.faiss")
    report = repair(built)
    assert report.manifest_from == str(built / BACKUP_NAME)
    assert report.dropped == {} and sorted([*report.kept, *report.reembedded]) == DOC_IDS
    assert "vectors-000001.faiss" in report.damage[1]
    assert verify(built).ok and len(Index.open(built)) == 4


@pytest.mark.parametrize("backup_damage", ["garbage", "truncated", "checksum"])
def test_a_damaged_manifest_with_a_damaged_backup_is_refused_and_left_alone(
    built: Path, backup_damage: str
) -> None:
    _checksum(built / MANIFEST_NAME)
    DAMAGE[backup_damage](built / BACKUP_NAME)
    before = _files(built)
    with pytest.raises(IndexFormatError) as refused:
        repair(built)
    message = str(refused.value)
    assert "\n" not in message and f"{built / BACKUP_NAME} is damaged too" in message
    assert message.endswith(NO_REPAIR) and HINT not in message
    assert _files(built) == before
    found = verify(built)
    assert not found.repairable and HINT not in found.problems[0]  # no hint that would not help


@pytest.mark.parametrize("damage", ["garbage", "checksum"])
def test_an_index_without_a_backup_says_it_cannot_be_repaired(built: Path, damage: str) -> None:
    """Indexes written before the backup existed: simulated by deleting it."""
    (built / BACKUP_NAME).unlink(missing_ok=True)
    DAMAGE[damage](built / MANIFEST_NAME)
    before = _files(built)
    with pytest.raises(IndexFormatError) as refused:
        repair(built)
    message = str(refused.value)
    assert f"there is no {BACKUP_NAME} to rebuild it from" in message and message.endswith(NO_REPAIR)
    assert "\n" not in message and HINT not in message
    assert _files(built) == before and not verify(built).repairable


def test_an_ingest_never_starts_over_on_data_files_without_a_manifest(built: Path, tiny_model: Path) -> None:
    """An index from before backups whose manifest.json was deleted: the ingest is refused, naming
    what to do, and its data files are left as they were (it used to start a new index there and
    delete them as leftovers)."""
    (built / BACKUP_NAME).unlink()
    (built / MANIFEST_NAME).unlink()
    before = _files(built)
    with pytest.raises(IndexFormatError, match="holds an index's data files") as refused:
        ingest(built.parent / "docs", built, tiny_config(tiny_model))
    assert "nothing was changed" in str(refused.value) and "\n" not in str(refused.value)
    assert _files(built) == before


def test_a_backup_whose_files_are_gone_is_not_used(built: Path) -> None:
    """A backup left behind by a writer that kept none (it committed on, its files went)."""
    stale = (built / BACKUP_NAME).read_bytes()
    delete(built, ids=["doc-00.txt"])
    (built / BACKUP_NAME).write_bytes(stale)
    _garbage(built / MANIFEST_NAME)
    before = _files(built)
    with pytest.raises(IndexFormatError, match="of generation 1, none of whose files are here"):
        repair(built)
    assert _files(built) == before


def test_a_sound_index_s_outdated_backup_is_noted_and_rewritten_by_the_next_writer(built: Path) -> None:
    (built / BACKUP_NAME).unlink(missing_ok=True)
    found = verify(built)
    assert found.ok and found.notes == [
        f"{built / BACKUP_NAME}: missing; the next ingest, delete or repair writes it"
    ]
    assert not repair(built).repaired
    assert (built / BACKUP_NAME).read_bytes() == (built / MANIFEST_NAME).read_bytes()
    assert verify(built).notes == []


# ----------------------------------------------------------------------------- crashes
def _crash_at_write(built: Path, nth: int, crashed: Path) -> None:
    """Delete doc-00.txt from ``built``, copying the directory as it is on disk at the ``nth``
    atomic write of the commit (before its rename): what a SIGKILL there leaves."""
    writes = []

    def snapshot() -> None:
        writes.append(1)
        if len(writes) == nth:
            shutil.copytree(built, crashed)
            (crashed / LOCK_NAME).unlink()  # this process's: a dead writer's lock is taken over

    with faults.hook("write", snapshot):
        delete(built, ids=["doc-00.txt"])
    assert crashed.is_dir(), f"the commit made {len(writes)} writes"


def test_a_crash_before_the_switch_keeps_the_old_generation_even_through_repair(
    built: Path, tmp_path: Path, tiny_encoder: Encoder
) -> None:
    """Killed writing manifest.json (the 5th write: vectors, documents, chunks, lexical, then the
    manifest): the new generation's files are there, complete, but were never committed."""
    before = _results(built, tiny_encoder)
    crashed = tmp_path / "crashed"
    _crash_at_write(built, 5, crashed)
    assert (crashed / "documents-000002.parquet").is_file()
    opened = Index.open(crashed)
    assert opened.manifest.generation == 1 and sorted(opened.doc_ids()) == DOC_IDS
    damaged = Path(shutil.copytree(crashed, tmp_path / "damaged"))

    assert not repair(crashed).repaired  # the manifest is sound: only the leftovers go
    assert Index.open(crashed).manifest.generation == 1 and verify(crashed).notes == []
    assert not (crashed / "documents-000002.parquet").exists()

    _garbage(damaged / MANIFEST_NAME)
    report = repair(damaged)
    assert report.manifest_from == str(damaged / BACKUP_NAME) and report.dropped == {}
    assert any("generation 2" in note and "not restored" in note for note in report.notes)
    after = Index.open(damaged)
    assert sorted(after.doc_ids()) == DOC_IDS  # the delete that never committed stays undone
    assert after.manifest.generation == 3 and verify(damaged).ok  # numbers are not reused
    assert _results(damaged, tiny_encoder) == before


def test_a_crash_between_the_switch_and_the_backup_leaves_the_new_generation(
    built: Path, tmp_path: Path
) -> None:
    """Killed writing the backup (the 6th write): the new generation is committed, the backup is
    still the previous one's; the next writer brings it up to date."""
    crashed = tmp_path / "crashed"
    _crash_at_write(built, 6, crashed)
    opened = Index.open(crashed)
    assert opened.manifest.generation == 2 and sorted(opened.doc_ids()) == DOC_IDS[1:]
    found = verify(crashed)
    assert found.ok and any("of generation 1, not the current 2" in note for note in found.notes)
    damaged = Path(shutil.copytree(crashed, tmp_path / "damaged"))

    assert not repair(crashed).repaired
    assert (crashed / BACKUP_NAME).read_bytes() == (crashed / MANIFEST_NAME).read_bytes()
    assert verify(crashed).notes == []

    # Damaged before any writer came: the backup names generation 1, whose files are still there
    # (the old generation goes after the backup is written). That committed generation is what a
    # repair can prove; it says that generation 2's files were not restored.
    _garbage(damaged / MANIFEST_NAME)
    report = repair(damaged)
    assert any("generation 2" in note and "not restored" in note for note in report.notes)
    after = Index.open(damaged)
    assert sorted(after.doc_ids()) == DOC_IDS and after.manifest.generation == 3
