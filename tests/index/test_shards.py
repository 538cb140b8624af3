"""Sharded FAISS indexes: the same results as one index over the same vectors, through the index
directory, the incremental ingest and ``ragidx query``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.index.config import FaissConfig
from ragidx.index.directory import Index
from ragidx.index.faiss_index import FaissIndex
from ragidx.index.shards import ShardedFaissIndex
from ragidx.ingestion.pipeline import ingest
from tests.conftest import long_text, tiny_config, write_docs
from tests.index.test_faiss_index import _unit

runner = CliRunner()


@pytest.mark.parametrize(
    ("factory", "params"), [("Flat", ""), ("IVF8,Flat", "nprobe=3"), ("IVF8,PQ4x4", "nprobe=8")]
)
def test_shards_search_like_one_index(factory: str, params: str) -> None:
    vectors, ids = _unit(600, seed=3), np.arange(1000, 1600, dtype=np.int64)
    queries = _unit(20, seed=4)
    one = FaissIndex.create(16, FaissConfig(factory=factory, search_params=params))
    sharded = ShardedFaissIndex.create(16, FaissConfig(factory=factory, search_params=params, shards=3))
    for index in (one, sharded):
        index.add(vectors[:400], ids[:400])  # trains on the first vectors, as a first commit does
        index.add(vectors[400:], ids[400:])
        index.remove(ids[::7])
    assert [s.ntotal for s in sharded.shards] == [172, 171, 171]  # vector id v in shard v % 3
    assert sharded.ntotal == one.ntotal == 514
    np.testing.assert_array_equal(np.sort(sharded.ids()), np.sort(one.ids()))
    scores_one, ids_one = one.search(queries, 10)
    scores_sharded, ids_sharded = sharded.search(queries, 10)
    np.testing.assert_array_equal(ids_sharded, ids_one)
    np.testing.assert_allclose(scores_sharded, scores_one, atol=1e-6)
    some = ids[1:50:7]  # not removed
    np.testing.assert_allclose(sharded.reconstruct(some), one.reconstruct(some), atol=1e-6)


def test_sharded_index_directory_answers_like_the_unsharded_one(tmp_path: Path, tiny_model: Path) -> None:
    docs = write_docs(tmp_path / "docs", 12)
    (docs / "long.md").write_text(long_text(400, seed=5))
    chunked = {"policy": "chunk", "chunk_size": 40, "overlap": 8}
    ingest(docs, tmp_path / "one", tiny_config(tiny_model, chunked))
    sharded_config = tiny_config(tiny_model, chunked).override(index={"shards": 4})
    ingest(docs, tmp_path / "sharded", sharded_config)
    (docs / "doc-03.txt").write_text("Changed after the first commit.")  # remove + add on the shards
    for name, config in (("one", tiny_config(tiny_model, chunked)), ("sharded", sharded_config)):
        assert ingest(docs, tmp_path / name, config).updated == 1

    files = sorted(p.name for p in (tmp_path / "sharded").glob("vectors-*"))
    assert files == [f"vectors-000002-s00{n}.faiss" for n in range(4)]  # the old generation removed
    one, sharded = Index.open(tmp_path / "one"), Index.open(tmp_path / "sharded")
    assert isinstance(sharded.vectors, ShardedFaissIndex) and isinstance(one.vectors, FaissIndex)
    assert sorted(sharded.manifest.files) == [
        "chunks",
        "documents",
        "faiss.0",
        "faiss.1",
        "faiss.2",
        "faiss.3",
        "lexical",  # one lexical index beside the shards
    ]
    for query in ("Document 3", "Changed after", long_text(10, seed=5)):
        for per in ("document", "chunk"):
            a, b = one.search(query, k=6, per=per), sharded.search(query, k=6, per=per)
            assert [(h.doc_id, h.chunk) for h in a] == [(h.doc_id, h.chunk) for h in b]
            np.testing.assert_allclose([h.score for h in a], [h.score for h in b], atol=1e-6)

    def query(name: str) -> list[dict]:
        result = runner.invoke(app, ["query", "Document 7", "-i", str(tmp_path / name), "-k", "5", "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    assert query("sharded") == query("one")
    verify = runner.invoke(app, ["verify", str(tmp_path / "sharded")])
    assert verify.exit_code == 0, verify.output


def test_a_missing_shard_is_a_format_error(tmp_path: Path, tiny_model: Path) -> None:
    docs = write_docs(tmp_path / "docs", 4)
    ingest(docs, tmp_path / "ix", tiny_config(tiny_model).override(index={"shards": 2}))
    (tmp_path / "ix" / "vectors-000001-s001.faiss").unlink()
    result = runner.invoke(app, ["query", "Document", "-i", str(tmp_path / "ix")])
    assert result.exit_code != 0
    assert "vectors-000001-s001.faiss: missing" in result.output
