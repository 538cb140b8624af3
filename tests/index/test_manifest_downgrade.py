"""A downgrade cannot bypass the manifest's checksum (issue 39, item 6): deleting ``checksum`` and
setting ``format_version: 1`` made any edit pass (``open``, ``verify`` ok) although
``manifest.backup.json``, a sound format 2 copy, differed. Format 1 writers never wrote a backup, so
a format 1 manifest beside one, or a format 1 backup, is refused; a genuine ragidx 0.1 index (no
backup) still opens."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.index.directory import Index
from ragidx.index.manifest import (
    BACKUP_NAME,
    CHECKSUM_KEY,
    FORMAT_2_MARK,
    MANIFEST_NAME,
    ManifestDamagedError,
    read_backup,
)
from ragidx.index.store import DOCUMENTS_FOOTER_KEY
from ragidx.index.verify import repair, verify

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "index-0.1" / "chunk"
DOWNGRADED = "format 1 (no checksum), but manifest.backup.json beside it was written by a format 2 commit"


def _downgrade(path: Path, window: int) -> dict[str, Any]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    del raw[CHECKSUM_KEY]
    raw["format_version"] = 1
    raw["encoder"]["window"] = window
    path.write_text(json.dumps(raw, indent=2), encoding="utf-8")
    return raw


def test_a_downgraded_manifest_beside_its_backup_is_refused_and_repaired(built: Path) -> None:
    window = json.loads((built / MANIFEST_NAME).read_text())["encoder"]["window"]
    _downgrade(built / MANIFEST_NAME, window // 2)
    with pytest.raises(ManifestDamagedError, match="downgraded or edited") as raised:
        Index.open(built)
    assert DOWNGRADED in str(raised.value) and "ragidx verify --repair" in str(raised.value)
    report = verify(built)
    assert not report.ok and report.repairable and DOWNGRADED in report.problems[0]
    info = CliRunner().invoke(app, ["info", str(built)])
    assert info.exit_code == 1 and "downgraded" in info.stderr
    repair(built)
    assert Index.open(built).manifest.encoder.window == window and verify(built).ok


def test_a_format_1_backup_is_not_trusted(built: Path) -> None:
    _downgrade(built / BACKUP_NAME, 8)
    with pytest.raises(
        Exception, match=r"manifest.backup.json is damaged too \(format 1, without a checksum\)"
    ):
        read_backup(built)
    (built / MANIFEST_NAME).write_text("{}")
    assert not verify(built).repairable


def test_a_genuine_format_1_index_still_opens(tmp_path: Path) -> None:
    directory = Path(shutil.copytree(FIXTURE, tmp_path / "old"))
    assert not (directory / BACKUP_NAME).exists()
    assert Index.open(directory).manifest.format_version == 1 and verify(directory).ok


def test_a_downgrade_with_its_backup_deleted_is_refused_by_the_store_it_lists(built: Path) -> None:
    window = json.loads((built / MANIFEST_NAME).read_text())["encoder"]["window"]
    _downgrade(built / MANIFEST_NAME, window // 2)
    (built / BACKUP_NAME).unlink()  # the evidence the first check reads is gone too
    with pytest.raises(ManifestDamagedError, match="was written by a format 2 commit"):
        Index.open(built)
    assert not verify(built).ok


def test_the_format_2_mark_is_the_key_the_store_writes() -> None:
    assert FORMAT_2_MARK.decode() == DOCUMENTS_FOOTER_KEY
