"""``ragidx verify --repair`` on a damaged manifest: rebuilt from ``manifest.backup.json`` (exit 0,
or 3 when documents were dropped), refused with one line and exit 1 where the backup cannot be
trusted; ``info`` and ``verify`` point to the repair only where it can work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragidx.cli import app

runner = CliRunner()
BACKUP = "manifest.backup.json"


def _flip_window(path: Path) -> None:
    path.write_text(path.read_text().replace('"window": 64', '"window": 24'))


def test_a_garbage_manifest_is_rebuilt_and_exits_0(index: Path) -> None:
    (index / "manifest.json").write_bytes(b"{garbage")
    info = runner.invoke(app, ["info", str(index)])
    assert info.exit_code == 1 and f"ragidx verify --repair {index}" in info.stderr
    found = runner.invoke(app, ["verify", str(index)])
    assert found.exit_code == 1 and f"repair it with: ragidx verify --repair {index}" in found.stderr
    repaired = runner.invoke(app, ["verify", "--repair", str(index)])
    assert repaired.exit_code == 0, repaired.output
    assert f"damaged: {index / 'manifest.json'}: unreadable manifest" in repaired.stderr
    assert f"rebuilt: the manifest, from {index / BACKUP} (generation 1)" in repaired.stderr
    summary = (
        f"repaired: {index} generation 2, manifest rebuilt from {index / BACKUP}, 3 documents kept, "
        "0 re-embedded, 0 dropped"
    )
    assert summary in repaired.stdout
    assert runner.invoke(app, ["verify", str(index)]).exit_code == 0
    assert runner.invoke(app, ["info", str(index)]).exit_code == 0


def test_a_flipped_manifest_and_a_damaged_file_exit_3_json(index: Path) -> None:
    _flip_window(index / "manifest.json")
    (index / "documents-000001.parquet").unlink()  # every text: only the vector rows name them
    result = runner.invoke(app, ["verify", "--repair", str(index), "--json"])
    assert result.exit_code == 3, result.output
    report = json.loads(result.stdout)
    assert report["manifest_from"] == str(index / BACKUP) and report["generation"] == 2
    assert sorted(report["dropped"]) == ["doc-00.txt", "doc-01.txt", "doc-02.txt"]
    assert "fails its checksum" in report["damage"][0]


@pytest.mark.parametrize("backup", ["damaged", "absent"])
def test_a_manifest_without_a_usable_backup_is_refused_with_exit_1(index: Path, backup: str) -> None:
    _flip_window(index / "manifest.json")
    if backup == "damaged":
        _flip_window(index / BACKUP)
    else:
        (index / BACKUP).unlink(missing_ok=True)
    found = runner.invoke(app, ["verify", str(index)])
    assert found.exit_code == 1 and "--repair" not in found.stderr  # it would not help
    result = runner.invoke(app, ["verify", "--repair", str(index)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {index / 'manifest.json'}: fails its checksum")
    why = (
        f"{index / BACKUP} is damaged too"
        if backup == "damaged"
        else f"there is no {BACKUP} to rebuild it from"
    )
    assert why in lines[0] and lines[0].endswith("or ingest into a new index directory")
    assert (index / "vectors-000001.faiss").is_file()


def test_the_repair_help_says_what_it_rebuilds() -> None:
    shown = runner.invoke(app, ["verify", "--help"], terminal_width=200).stdout
    assert BACKUP in shown and "manifest" in shown
