"""Fixtures of the command-line tests: a sound tiny index (3 documents) built once per session, and a
fresh copy of it per test for the commands that damage or repair it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ragidx.ingestion.pipeline import ingest
from tests.conftest import tiny_config, write_docs


@pytest.fixture(scope="session")
def sound(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """A tiny index of 3 documents; never modified."""
    root = tmp_path_factory.mktemp("sound-cli-index")
    ingest(write_docs(root / "docs", 3), root / "ix", tiny_config(tiny_model))
    return root / "ix"


@pytest.fixture()
def index(sound: Path, tmp_path: Path) -> Path:
    """A copy of the sound index that a test may damage."""
    return Path(shutil.copytree(sound, tmp_path / "ix"))
