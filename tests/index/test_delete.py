"""delete by id and by source glob; unknown ids reported; a new generation is committed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragidx.errors import IndexFormatError, InputError
from ragidx.index.delete import delete
from ragidx.index.directory import Index
from ragidx.ingestion.pipeline import ingest
from tests.conftest import tiny_config, write_docs


def test_delete_by_id_and_glob(tmp_path: Path, tiny_model: Path) -> None:
    docs = write_docs(tmp_path / "docs", 5)
    ingest(docs, tmp_path / "ix", tiny_config(tiny_model))
    dry = delete(tmp_path / "ix", ids=["doc-00.txt"], dry_run=True)
    assert dry.removed == ["doc-00.txt"] and len(Index.open(tmp_path / "ix")) == 5
    report = delete(tmp_path / "ix", ids=["doc-00.txt", "nope"], sources=["*/doc-0[34].txt"])
    assert report.removed == ["doc-00.txt", "doc-03.txt", "doc-04.txt"] and report.not_found == ["nope"]
    index = Index.open(tmp_path / "ix")
    assert sorted(index.store.doc_ids()) == ["doc-01.txt", "doc-02.txt"]
    assert index.vectors.ntotal == index.store.n_vectors == 2 and index.manifest.generation == 2
    again = ingest(docs, tmp_path / "ix", tiny_config(tiny_model))
    assert (again.added, again.unchanged) == (3, 2)


def test_delete_needs_a_target_and_an_index(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--id ID or --source GLOB"):
        delete(tmp_path / "ix")
    with pytest.raises(IndexFormatError, match="no such index directory"):
        delete(tmp_path / "ix", ids=["a"])
    assert not (tmp_path / "ix").exists()
