"""Indexes written by the previous release open, verify and answer the same with this code.

``tests/fixtures/index-0.1`` holds two small indexes built by ragidx 0.1 in its flat layout (commit
eced329): ``chunk`` (128-token chunks) and ``hybrid`` (late chunks + the document vector, RRF), and
``expected.json``, what that release's ``ragidx query --json`` answered (see the fixture's README).
Each test works on a copy, and checks that reading and searching wrote nothing into it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ragidx
from ragidx.cli import app
from ragidx.embed.encoder import Encoder

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "index-0.1"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))
INDEXES = ("chunk", "hybrid")
SCORE_TOLERANCE = 1e-5

runner = CliRunner()


def _copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURE / name, tmp_path / name))


def _files(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("name", INDEXES)
def test_an_old_index_verifies_and_its_manifest_reads(name: str, tmp_path: Path) -> None:
    directory = _copy(name, tmp_path)
    before = _files(directory)
    report = ragidx.verify(directory)
    assert report.ok, report.problems
    info = ragidx.Index.open(directory).info()
    assert info["ragidx_version"] == EXPECTED["built_with"]["ragidx_version"]
    assert info["counts"] == EXPECTED["counts"][name]
    expected_long_doc = EXPECTED["long_doc"][name]
    assert {key: info["long_doc"][key] for key in expected_long_doc} == expected_long_doc
    assert info["encoder"]["name"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert _files(directory) == before


@pytest.mark.slow
@pytest.mark.parametrize(
    "case", EXPECTED["queries"], ids=[f"{c['index']}-q{i % 3}" for i, c in enumerate(EXPECTED["queries"])]
)
def test_an_old_index_answers_as_the_old_release_did(
    case: dict, tmp_path: Path, default_encoder: Encoder
) -> None:
    directory = _copy(case["index"], tmp_path)
    before = _files(directory)
    hits = ragidx.Index.open(directory, encoder=default_encoder).search(case["query"], k=case["k"])
    got = [hit.to_dict() for hit in hits]
    want = case["hits"]
    assert [(h["rank"], h["doc_id"]) for h in got] == [(h["rank"], h["doc_id"]) for h in want]
    for ours, theirs in zip(got, want, strict=True):
        for key in ("score", "document_score", "chunk_score"):
            assert (key in ours) == (key in theirs), key
            if key in theirs:
                assert ours[key] == pytest.approx(theirs[key], abs=SCORE_TOLERANCE), (ours["doc_id"], key)
        assert (ours["embed_mode"], ours["chunk"], ours["title"]) == (
            theirs["embed_mode"],
            theirs["chunk"],
            theirs["title"],
        )
    assert _files(directory) == before


@pytest.mark.parametrize("name", INDEXES)
def test_info_and_verify_commands_read_an_old_index(name: str, tmp_path: Path) -> None:
    directory = str(_copy(name, tmp_path))
    verified = runner.invoke(app, ["verify", directory])
    assert verified.exit_code == 0 and "ok:" in verified.stdout, verified.output
    shown = runner.invoke(app, ["info", directory])
    assert shown.exit_code == 0 and "all-MiniLM-L6-v2" in shown.stdout, shown.output
    as_json = runner.invoke(app, ["info", directory, "--json"])
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)["counts"] == EXPECTED["counts"][name]
    listed = runner.invoke(app, ["info", directory, "--documents", "--json"])
    assert listed.exit_code == 0, listed.output
    assert len(json.loads(listed.stdout)) == EXPECTED["counts"][name]["documents"]
