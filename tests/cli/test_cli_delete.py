"""``ragidx delete`` through CliRunner: removal, dry run, JSON, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.index.directory import Index
from ragidx.ingestion.pipeline import ingest
from tests.conftest import tiny_config, write_docs

runner = CliRunner()


def test_delete_command(tmp_path: Path, tiny_model: Path) -> None:
    ingest(write_docs(tmp_path / "docs", 3), tmp_path / "ix", tiny_config(tiny_model))
    dry = runner.invoke(app, ["delete", str(tmp_path / "ix"), "--source", "*doc-01*", "--dry-run"])
    assert dry.exit_code == 0 and "would remove 1 document from" in dry.stdout and "doc-01.txt" in dry.stdout
    result = runner.invoke(app, ["delete", str(tmp_path / "ix"), "--id", "doc-01.txt", "--id", "x", "--json"])
    assert result.exit_code == 3, result.output
    assert json.loads(result.stdout)["removed"] == ["doc-01.txt"]
    assert "warning:" in result.stderr and "'x'" in result.stderr
    assert sorted(Index.open(tmp_path / "ix").store.doc_ids()) == ["doc-00.txt", "doc-02.txt"]
    plain = runner.invoke(app, ["delete", str(tmp_path / "ix"), "--id", "doc-00.txt"])
    assert plain.exit_code == 0 and "removed 1 document from" in plain.stdout
    none = runner.invoke(app, ["delete", str(tmp_path / "ix"), "--source", "*nothing*"])
    assert none.exit_code == 0 and "removed 0 documents from" in none.stdout


def test_delete_errors(tmp_path: Path) -> None:
    result = runner.invoke(app, ["delete", str(tmp_path / "none"), "--id", "a"])
    assert result.exit_code == 1 and result.stderr.startswith("error: ") and "no such index" in result.stderr
    assert "--source" in runner.invoke(app, ["delete", "--help"]).stdout
