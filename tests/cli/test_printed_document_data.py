"""Document data reaches the terminal as text (issue 39, item 5): ``info --documents`` printed ids
as rich markup (a JSONL id ``[link=…]x[/link]`` became a clickable ``x``) and raw ESC characters
(an id added through the Python API, which did not check ids as ingest does)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.index.directory import Index
from ragidx.ingestion.pipeline import add_documents, ingest
from ragidx.read.document import Document
from tests.conftest import tiny_config

runner = CliRunner()
LINK = "[link=http://evil.example]x[/link]"
ESCAPE = "bold\x1b[1mtext"


def _corpus(root: Path) -> Path:
    root.mkdir()
    lines = [
        {"_id": LINK, "text": "river stone light"},
        {"_id": "[bold]plain[/bold]", "text": "garden paper"},
    ]
    (root / "corpus.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return root


def test_info_documents_prints_ids_as_text_not_markup(tmp_path: Path, tiny_model: Path) -> None:
    ingest(_corpus(tmp_path / "docs"), tmp_path / "ix", tiny_config(tiny_model))
    result = runner.invoke(app, ["info", str(tmp_path / "ix"), "--documents"])
    assert result.exit_code == 0, result.output
    assert LINK in result.stdout
    assert "[bold]plain[/bold]" in result.stdout


def test_info_documents_escapes_control_characters_of_an_older_index(
    tmp_path: Path, tiny_model: Path, tiny_encoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index written before ids were checked may hold an ESC: it is shown as ``\\x1b``."""
    monkeypatch.setattr("ragidx.index.directory.ID_CONTROL", re.compile("(?!)"), raising=False)  # unchecked
    index = Index.create(tmp_path / "ix", tiny_encoder)
    add_documents(index, [Document(ESCAPE, "river stone", "")])
    index.commit()
    monkeypatch.undo()
    result = runner.invoke(app, ["info", str(tmp_path / "ix"), "--documents"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout
    assert "bold\\x1b[1mtext" in result.stdout
