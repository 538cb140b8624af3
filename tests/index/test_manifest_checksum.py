"""The manifest's checksum: a change that leaves valid JSON is refused by every reader and writer;
format 1 manifests (no checksum) still open, and gain one at their next commit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.errors import IndexFormatError
from ragidx.index.directory import Index
from ragidx.index.manifest import CHECKSUM_KEY, MANIFEST_NAME, Manifest, manifest_checksum
from ragidx.index.verify import verify
from ragidx.ingestion.pipeline import ingest
from tests.conftest import tiny_config, write_docs
from tests.index.test_manifest import _manifest

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "index-0.1" / "chunk"
REFUSED = "fails its checksum: it was changed or is corrupt"


@pytest.fixture()
def built(tmp_path: Path, tiny_model: Path) -> Path:
    ingest(write_docs(tmp_path / "docs", 3), tmp_path / "ix", tiny_config(tiny_model))
    return tmp_path / "ix"


def _flip(path: Path, before: str, after: str) -> None:
    """Change one character of the manifest's text, leaving valid JSON."""
    assert len(before) == len(after)
    text = path.read_text(encoding="utf-8")
    assert text.count(before) == 1, before
    path.write_text(text.replace(before, after), encoding="utf-8")
    json.loads(path.read_text(encoding="utf-8"))


def test_the_issue_case_window_512_read_as_112_is_refused(tmp_path: Path) -> None:
    _manifest().write(tmp_path)
    _flip(tmp_path / MANIFEST_NAME, '"window": 512', '"window": 112')
    with pytest.raises(IndexFormatError, match=rf"{MANIFEST_NAME}: {REFUSED}.*ingest into a new index"):
        Manifest.read(tmp_path)


@pytest.mark.parametrize(
    "before, after",
    [
        ('"window": 64', '"window": 24'),
        ('"overlap": 32', '"overlap": 12'),
        ('"next_vid": 3', '"next_vid": 7'),
    ],
)
def test_every_reader_and_writer_refuses_a_flipped_manifest(
    built: Path, tiny_model: Path, before: str, after: str
) -> None:
    _flip(built / MANIFEST_NAME, before, after)
    flipped = (built / MANIFEST_NAME).read_bytes()
    with pytest.raises(IndexFormatError, match=REFUSED):
        Index.open(built)
    report = verify(built)
    assert not report.ok and REFUSED in report.problems[0]
    info = CliRunner().invoke(app, ["info", str(built)])
    assert info.exit_code == 1 and REFUSED in info.stderr
    write_docs(built.parent / "docs" / "more", 1, seed=3)
    with pytest.raises(IndexFormatError, match=REFUSED):  # nothing embedded with the wrong settings
        ingest(built.parent / "docs", built, tiny_config(tiny_model))
    assert (built / MANIFEST_NAME).read_bytes() == flipped


def test_the_checksum_is_of_the_content_not_the_layout(built: Path) -> None:
    raw = json.loads((built / MANIFEST_NAME).read_text())
    assert list(raw)[-1] == CHECKSUM_KEY
    assert raw[CHECKSUM_KEY] == manifest_checksum({k: v for k, v in raw.items() if k != CHECKSUM_KEY})
    reordered = dict(reversed(list(raw.items())))
    (built / MANIFEST_NAME).write_text(json.dumps(reordered, separators=(",", ":")))
    assert Index.open(built).manifest.generation == 1


def test_a_format_2_manifest_without_its_checksum_is_refused(built: Path) -> None:
    raw = json.loads((built / MANIFEST_NAME).read_text())
    del raw[CHECKSUM_KEY]
    (built / MANIFEST_NAME).write_text(json.dumps(raw))
    with pytest.raises(IndexFormatError, match="has no checksum \\(format 2 manifests carry one\\)"):
        Manifest.read(built)


def test_a_format_1_index_opens_without_one_and_gains_it_at_its_next_commit(tmp_path: Path) -> None:
    directory = Path(shutil.copytree(FIXTURE, tmp_path / "old"))
    raw = json.loads((directory / MANIFEST_NAME).read_text())
    assert raw["format_version"] == 1 and CHECKSUM_KEY not in raw
    index = Index.open(directory)
    index.commit()
    raw = json.loads((directory / MANIFEST_NAME).read_text())
    assert raw["format_version"] == 2 and CHECKSUM_KEY in raw
    assert len(Index.open(directory)) == len(index) and verify(directory).ok
