"""``ragidx info`` exits 1 on a damaged index (a data file or the manifest), 0 on a sound one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.ingestion.pipeline import ingest
from tests.conftest import tiny_config, write_docs

runner = CliRunner()


@pytest.fixture()
def index(tmp_path: Path, tiny_model: Path) -> Path:
    ingest(write_docs(tmp_path / "docs", 2), tmp_path / "ix", tiny_config(tiny_model))
    return tmp_path / "ix"


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_info_exits_1_on_a_damaged_data_file(index: Path, damage: str, as_json: bool) -> None:
    args = ["info", str(index), *(["--json"] if as_json else [])]
    sound = runner.invoke(app, args)
    assert sound.exit_code == 0, sound.output
    path = index / "documents-000001.parquet"
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(bytes(data[:-4]))
    else:
        path.unlink()
    damaged = runner.invoke(app, args)
    assert damaged.exit_code == 1
    assert f"error: {path}:" in damaged.stderr and f"ragidx verify --repair {index}" in damaged.stderr
    if as_json:
        assert json.loads(damaged.stdout)["counts"]["documents"] == 2  # what the manifest says, still shown
    else:
        assert "generation" in damaged.stdout


def test_info_exits_1_on_a_manifest_that_fails_its_checksum(index: Path) -> None:
    manifest = index / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"window": 64', '"window": 24'))
    result = runner.invoke(app, ["info", str(index)])
    assert result.exit_code == 1 and "fails its checksum" in result.stderr and result.stdout == ""
    assert "Exit status" in runner.invoke(app, ["info", "--help"]).stdout
