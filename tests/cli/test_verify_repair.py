"""``ragidx verify`` says how to repair, ``ragidx verify --repair`` repairs: exit codes, what it
prints, JSON."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ragidx.cli import app

runner = CliRunner()


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-3])


def test_repair_drops_the_documents_of_a_damaged_file_and_exits_3(index: Path) -> None:
    _truncate(index / "vectors-000001.faiss")
    found = runner.invoke(app, ["verify", str(index)])
    assert found.exit_code == 1 and f"repair it with: ragidx verify --repair {index}" in found.stderr
    repaired = runner.invoke(app, ["verify", "--repair", str(index)])
    assert repaired.exit_code == 3, repaired.output
    assert "damaged: " in repaired.stderr and "vectors-000001.faiss" in repaired.stderr
    for doc_id in ("doc-00.txt", "doc-01.txt", "doc-02.txt"):
        assert f"dropped: {doc_id}: its vectors were lost" in repaired.stderr
    summary = f"repaired: {index} generation 2, 0 documents kept, 3 dropped; ingest their files"
    assert summary in repaired.stdout
    assert runner.invoke(app, ["verify", str(index)]).exit_code == 0


def test_repair_that_drops_nothing_exits_0_and_json(index: Path) -> None:
    lexical = index / "lexical-000001.npz"
    _truncate(lexical)
    result = runner.invoke(app, ["verify", "--repair", str(index), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["repaired"] is True and report["generation"] == 2 and report["documents"] == 3
    assert report["dropped"] == {} and report["rebuilt"] == ["the lexical index, from the stored texts"]
    assert "lexical-000001.npz" in report["damage"][0]
    again = runner.invoke(app, ["verify", "--repair", str(index)])
    assert again.exit_code == 0 and f"ok: {index}: nothing to repair, 3 documents" in again.stdout


def test_an_unrepairable_manifest_exits_1_and_says_what_to_do(index: Path) -> None:
    """Without manifest.backup.json (indexes written before it; with it, see test_cli_verify_manifest.py)."""
    (index / "manifest.backup.json").unlink()
    manifest = index / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"next_vid": 3', '"next_vid": 4'))
    found = runner.invoke(app, ["verify", str(index)])
    assert found.exit_code == 1 and "--repair" not in found.stderr  # it would not help
    result = runner.invoke(app, ["verify", "--repair", str(index)])
    assert result.exit_code == 1
    assert "error: " in result.stderr and "restore manifest.json from a backup" in result.stderr
    assert "--repair" in runner.invoke(app, ["verify", "--help"]).stdout
