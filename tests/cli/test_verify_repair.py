"""``ragidx verify`` says how to repair, ``ragidx verify --repair`` repairs: exit codes, what it
prints, JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragidx.cli import app

runner = CliRunner()


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-3])


def test_repair_re_embeds_what_a_damaged_vector_file_lost_and_exits_0(index: Path) -> None:
    (index / "vectors-000001.faiss").unlink()
    found = runner.invoke(app, ["verify", str(index)])
    hint = f"repair it with: ragidx verify --repair {index} (it would keep 0, re-embed 3, drop 0;"
    assert found.exit_code == 1 and hint in found.stderr
    planned = runner.invoke(app, ["verify", "--repair", "--dry-run", str(index)])
    assert planned.exit_code == 0, planned.output
    for doc_id in ("doc-00.txt", "doc-01.txt", "doc-02.txt"):
        assert f"re-embed: {doc_id}: its vectors were lost" in planned.stdout, planned.output
    assert f"dry run: {index}: repair would keep 0, re-embed 3, drop 0; nothing was changed" in planned.stdout
    assert runner.invoke(app, ["verify", str(index)]).exit_code == 1  # the dry run changed nothing
    repaired = runner.invoke(app, ["verify", "--repair", str(index)])
    assert repaired.exit_code == 0, repaired.output
    assert "damaged: " in repaired.stderr and "vectors-000001.faiss" in repaired.stderr
    assert f"quarantine: {index / 'quarantine' / 'generation-000001'}" in repaired.stderr
    summary = f"repaired: {index} generation 2, 0 documents kept, 3 re-embedded, 0 dropped"
    assert summary in repaired.stdout
    assert runner.invoke(app, ["verify", str(index)]).exit_code == 0


def test_repair_that_drops_documents_exits_3_and_names_them_safely(index: Path) -> None:
    """The ids a repair prints go through the console's escaping (markup, control characters)."""
    (index / "lexical-000001.npz").unlink()
    (index / "documents-000001.parquet").unlink()  # every text: only the vector rows name them
    planned = runner.invoke(app, ["verify", "--repair", "--dry-run", "--json", str(index)])
    assert planned.exit_code == 3, planned.output
    plan = json.loads(planned.stdout)
    assert (
        plan["dry_run"] is True
        and plan["repaired"] is False
        and sorted(plan["dropped"])
        == [
            "doc-00.txt",
            "doc-01.txt",
            "doc-02.txt",
        ]
    )
    repaired = runner.invoke(app, ["verify", "--repair", str(index)])
    assert repaired.exit_code == 3, repaired.output
    assert "dropped: doc-00.txt: its record (text) was lost with the documents file" in repaired.stderr
    assert "0 documents kept, 0 re-embedded, 3 dropped; ingest their files again" in repaired.stdout
    assert (index / "quarantine" / "generation-000001" / "chunks-000001.parquet").is_file()


def test_dry_run_needs_repair(index: Path) -> None:
    result = runner.invoke(app, ["verify", "--dry-run", str(index)])
    assert result.exit_code == 2 and "--dry-run goes with --repair" in result.output


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
    assert runner.invoke(app, ["verify", "--repair", "--dry-run", str(index)]).exit_code == 1


def test_dry_run_of_a_sound_index_has_nothing_to_do(index: Path) -> None:
    result = runner.invoke(app, ["verify", "--repair", "--dry-run", "--json", str(index)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["dry_run"] is True and report["repaired"] is False and report["generation"] is None
    assert report["kept"] == ["doc-00.txt", "doc-01.txt", "doc-02.txt"] and report["reembedded"] == {}
    shown = runner.invoke(app, ["verify", "--repair", "--dry-run", str(index)])
    assert shown.exit_code == 0 and f"ok: {index}: nothing to repair, 3 documents" in shown.stdout


def test_ctrl_c_after_the_repaired_generation_landed_says_it_was_committed(
    index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (index / "vectors-000001.faiss").unlink()

    def interrupted(index: Path, report: object) -> None:
        raise KeyboardInterrupt  # the summary, after the switch

    monkeypatch.setattr("ragidx.cli.verify._print_repair", interrupted)
    result = runner.invoke(app, ["verify", "--repair", str(index)])
    assert result.exit_code == 130
    assert f"interrupted: {index}: generation 2 was committed" in result.stderr
    assert "nothing was committed" not in result.stderr
