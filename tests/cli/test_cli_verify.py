"""``ragidx verify`` through CliRunner: a sound index, a damaged one, JSON."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.ingestion.pipeline import ingest
from tests.conftest import tiny_config, write_docs

runner = CliRunner()


def test_verify_command(tmp_path: Path, tiny_model: Path) -> None:
    ingest(write_docs(tmp_path / "docs", 2), tmp_path / "ix", tiny_config(tiny_model))
    ok = runner.invoke(app, ["verify", str(tmp_path / "ix")])
    assert ok.exit_code == 0 and "ok:" in ok.stdout and "2 documents, 2 vectors" in ok.stdout
    faiss_file = tmp_path / "ix" / "vectors-000001.faiss"
    faiss_file.write_bytes(faiss_file.read_bytes()[:-3])
    bad = runner.invoke(app, ["verify", str(tmp_path / "ix")])
    assert bad.exit_code == 1 and "problem:" in bad.stderr and "vectors-000001.faiss" in bad.stderr
    as_json = runner.invoke(app, ["verify", str(tmp_path / "ix"), "--json"])
    data = json.loads(as_json.stdout)
    assert as_json.exit_code == 1 and data["ok"] is False and "truncated" in data["problems"][0]
    assert "Exit status" in runner.invoke(app, ["verify", "--help"]).stdout
