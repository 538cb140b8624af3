"""Fixtures of the index tests: a sound tiny index (4 documents, with the folder they came from) built
once per session, and a fresh copy of it per test to damage and repair."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ragidx.ingestion.pipeline import ingest
from tests.conftest import tiny_config, write_docs


@pytest.fixture(scope="session")
def sound(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """A folder holding ``docs/`` (4 documents) and ``ix/``, their index; never modified."""
    root = tmp_path_factory.mktemp("sound-index")
    ingest(write_docs(root / "docs", 4), root / "ix", tiny_config(tiny_model))
    return root


@pytest.fixture()
def built(sound: Path, tmp_path: Path) -> Path:
    """A copy of the sound index (and its documents beside it) that a test may damage."""
    shutil.copytree(sound / "docs", tmp_path / "docs")
    return Path(shutil.copytree(sound / "ix", tmp_path / "ix"))
