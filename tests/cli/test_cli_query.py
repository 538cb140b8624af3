"""``ragidx query`` and ``ragidx info`` through Typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.search.trec import read_run

runner = CliRunner()


@pytest.fixture()
def index_dir(tmp_path: Path, tiny_model: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in {
        "a.txt": "alpha river stone",
        "b.txt": "beta garden music",
        "c.txt": "gamma winter",
    }.items():
        (docs / name).write_text(text)
    result = runner.invoke(
        app, ["ingest", str(docs), "-i", str(tmp_path / "ix"), "-m", str(tiny_model), "-q"]
    )
    assert result.exit_code == 0, result.output
    return tmp_path / "ix"


def test_query_table(index_dir: Path) -> None:
    result = runner.invoke(app, ["query", "beta garden music", "-i", str(index_dir), "-k", "2"])
    assert result.exit_code == 0, result.output
    assert "top 2 for: beta garden music" in result.stdout
    assert "b.txt" in result.stdout and "beta garden music" in result.stdout


def test_query_json(index_dir: Path) -> None:
    result = runner.invoke(
        app, ["query", "beta garden music", "-i", str(index_dir), "--json", "-k", "3", "--mode", "dense"]
    )
    hits = json.loads(result.stdout)
    assert [h["rank"] for h in hits] == [1, 2, 3]
    assert hits[0]["doc_id"] == "b.txt" and hits[0]["score"] == pytest.approx(1.0, abs=1e-4)
    assert {"rank", "score", "doc_id", "source", "snippet", "metadata", "embed_mode"} <= hits[0].keys()
    assert "text" not in hits[0]
    with_text = json.loads(
        runner.invoke(app, ["query", "beta", "-i", str(index_dir), "--json", "--with-text"]).stdout
    )
    assert "text" in with_text[0]


def test_batch_queries_write_a_trec_run(index_dir: Path, tmp_path: Path) -> None:
    queries = tmp_path / "q.tsv"
    queries.write_text("id\ttext\nq1\talpha river stone\nq2\tgamma winter\n")
    run = tmp_path / "run.trec"
    result = runner.invoke(
        app, ["query", "--queries", str(queries), "-i", str(index_dir), "-k", "2", "--run-out", str(run)]
    )
    assert result.exit_code == 0, result.output
    lines = run.read_text().splitlines()
    assert len(lines) == 4 and lines[0].startswith("q1 Q0 a.txt 1 ")
    parsed = read_run(lines)
    assert max(parsed["q2"], key=parsed["q2"].get) == "c.txt"
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text('{"_id": "x", "text": "beta garden music"}\n')
    as_json = runner.invoke(app, ["query", "--queries", str(jsonl), "-i", str(index_dir), "--json"])
    assert json.loads(as_json.stdout)["x"][0]["doc_id"] == "b.txt"


def test_query_errors(index_dir: Path, tmp_path: Path, tiny_other_model: Path) -> None:
    neither = runner.invoke(app, ["query", "-i", str(index_dir)])
    assert neither.exit_code == 2 and "give a query TEXT or --queries FILE, e.g." in neither.stderr
    assert "not both" not in neither.stderr
    both = runner.invoke(app, ["query", "x", "--queries", "q.tsv", "-i", str(index_dir)])
    assert both.exit_code == 2 and "give a query TEXT or --queries q.tsv, not both" in both.stderr
    not_index = runner.invoke(app, ["query", "x", "-i", str(tmp_path)])
    assert not_index.exit_code == 1 and "not a ragidx index" in not_index.stderr
    wrong_model = runner.invoke(app, ["query", "x", "-i", str(index_dir), "--model", str(tiny_other_model)])
    assert wrong_model.exit_code == 1 and "was built with" in wrong_model.stderr
    bad_queries = tmp_path / "bad.jsonl"
    bad_queries.write_text("{not json\n")
    result = runner.invoke(app, ["query", "--queries", str(bad_queries), "-i", str(index_dir)])
    assert result.exit_code == 1 and "bad.jsonl:1" in result.stderr


def test_info(index_dir: Path, tmp_path: Path) -> None:
    table = runner.invoke(app, ["info", str(index_dir)])
    assert table.exit_code == 0
    for text in (
        "model",
        "dim",
        "32",
        "pooling",
        "mean",
        "long documents",
        "chunk",
        "Flat",
        "3 whole",
        "ragidx",
    ):
        assert text in table.stdout
    data = json.loads(runner.invoke(app, ["info", str(index_dir), "--json"]).stdout)
    assert data["counts"]["documents"] == 3 and data["encoder"]["dim"] == 32
    assert data["faiss"]["factory"] == "Flat" and data["long_doc"]["policy"] == "chunk"
    listing = runner.invoke(app, ["info", str(index_dir), "--documents"])
    assert listing.exit_code == 0 and "3 documents in" in listing.stdout and "whole" in listing.stdout
    rows = json.loads(runner.invoke(app, ["info", str(index_dir), "--documents", "--json"]).stdout)
    assert sorted(r["doc_id"] for r in rows) == ["a.txt", "b.txt", "c.txt"]
    assert all(r["embed_mode"] == "whole" and r["n_vectors"] == 1 and r["n_tokens"] > 0 for r in rows)
    missing = runner.invoke(app, ["info", str(tmp_path / "none")])
    assert missing.exit_code == 1 and "no such index directory" in missing.stderr


def test_query_a_hybrid_index_shows_both_cosines_and_takes_another_fusion(hybrid_index: Path) -> None:
    query = ["query", "Sentence 3 says river stone", "-i", str(hybrid_index), "-k", "8", "--mode", "dense"]
    table = runner.invoke(app, query)
    assert table.exit_code == 0, table.output
    assert "best chunk" in table.stdout and "late chunk" in table.stdout
    hits = json.loads(runner.invoke(app, [*query, "--json"]).stdout)
    assert len(hits) == 8 and all({"document_score", "chunk_score"} <= hit.keys() for hit in hits)
    by_document = json.loads(runner.invoke(app, [*query, "--json", "--hybrid", "1"]).stdout)
    assert [h["score"] for h in by_document] == pytest.approx([h["document_score"] for h in by_document])
    assert [h["score"] for h in by_document] == sorted((h["score"] for h in by_document), reverse=True)
    by_chunk = json.loads(runner.invoke(app, [*query, "--json", "--hybrid", "0"]).stdout)
    assert [h["score"] for h in by_chunk] == pytest.approx([h["chunk_score"] for h in by_chunk])
    assert [h["doc_id"] for h in by_document] != [h["doc_id"] for h in by_chunk]


def test_query_hybrid_option_errors(index_dir: Path, hybrid_index: Path) -> None:
    plain = runner.invoke(app, ["query", "alpha", "-i", str(index_dir), "--hybrid", "rrf"])
    assert (
        plain.exit_code == 2 and plain.output.startswith("error: ") and "not a hybrid index" in plain.output
    )
    assert len(plain.output.strip().splitlines()) == 1
    bad = runner.invoke(app, ["query", "alpha", "-i", str(hybrid_index), "--hybrid", "x"])
    assert bad.exit_code == 2 and "--hybrid x: use rrf or a weight w in [0, 1]" in bad.output


def test_best_chunks_at_ingest_and_query(tmp_path: Path, tiny_model: Path, index_dir: Path) -> None:
    from tests.conftest import long_text

    docs = tmp_path / "long"
    docs.mkdir()
    for i in range(4):
        (docs / f"l{i}.txt").write_text(f"Document {i}. " + long_text(70, seed=20 + i))
    ingest = ["ingest", str(docs), "-i", str(tmp_path / "best"), "-m", str(tiny_model), "-q"]
    flags = ["--long-doc", "chunk", "--chunk-size", "16", "--overlap", "0", "--best-chunks", "2"]
    result = runner.invoke(app, [*ingest, *flags])
    assert result.exit_code == 0, result.output
    info = runner.invoke(app, ["info", str(tmp_path / "best")])
    assert "documents score by the mean of their 2 best chunks" in " ".join(
        w for w in info.stdout.split() if w != "│"
    )
    query = ["query", "Document 2", "-i", str(tmp_path / "best"), "-k", "4", "--json", "--mode", "dense"]
    by_two = json.loads(runner.invoke(app, query).stdout)
    by_one = json.loads(runner.invoke(app, [*query, "--best-chunks", "1"]).stdout)
    assert all(hit["chunk"] is not None for hit in by_two)
    assert [h["score"] for h in by_two] != [h["score"] for h in by_one]
    assert all(
        two["score"] <= one["score"] + 1e-6
        for two, one in zip(
            sorted(by_two, key=lambda h: h["doc_id"]), sorted(by_one, key=lambda h: h["doc_id"]), strict=True
        )
    )  # a mean of the best two never beats the best one
    changed = runner.invoke(app, [*ingest, *flags[:-1], "3"])
    assert changed.exit_code == 2 and "best_chunks = 2" in changed.output
    refused = runner.invoke(app, ["query", "alpha", "-i", str(index_dir), "--best-chunks", "2"])
    assert refused.exit_code == 0  # a chunk-policy index whose documents all fit one window
    bad = runner.invoke(app, ["query", "alpha", "-i", str(index_dir), "--best-chunks", "0"])
    assert bad.exit_code == 2


def test_query_rerank(hybrid_index: Path, tiny_cross_encoder: Path) -> None:
    query = ["query", "Sentence 3 says river stone", "-i", str(hybrid_index), "-k", "3"]
    reranked = runner.invoke(app, [*query, "--json", "--rerank", f"{tiny_cross_encoder}:8"])
    assert reranked.exit_code == 0, reranked.output
    hits = json.loads(reranked.stdout)
    assert len(hits) == 3 and [h["rank"] for h in hits] == [1, 2, 3]
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    for hit in hits:
        info = hit["rerank"]
        assert info["score"] == hit["score"] and info["model"] == str(tiny_cross_encoder) and info["ms"] > 0
        assert 1 <= info["first_stage_rank"] <= 8 and "first_stage_score" in info
        assert hit["passage_span"] == {"char_start": info["char_start"], "char_end": info["char_end"]}
    table = runner.invoke(app, [*query, "--rerank", str(tiny_cross_encoder)])
    assert table.exit_code == 0, table.output
    assert "reranked by" in table.stdout and "first stage #" in table.stdout
    plain = json.loads(runner.invoke(app, [*query, "--json"]).stdout)
    assert all("rerank" not in h for h in plain)


def test_query_rerank_errors(hybrid_index: Path, tiny_cross_encoder: Path, tiny_model: Path) -> None:
    query = ["query", "river", "-i", str(hybrid_index), "--rerank"]
    zero = runner.invoke(app, [*query, f"{tiny_cross_encoder}:0"])
    assert zero.exit_code == 2 and "give 1 or more (MODEL[:N]" in zero.stderr
    missing = runner.invoke(app, [*query, "./no-such-reranker:5"])
    assert missing.exit_code == 2  # as the embedding model's missing folder
    assert missing.stderr.strip().startswith("error: rerank model ./no-such-reranker: no such folder;")
    assert len(missing.stderr.strip().splitlines()) == 1
    bi_encoder = runner.invoke(app, [*query, str(tiny_model)])
    assert bi_encoder.exit_code == 1 and "not a cross-encoder" in bi_encoder.stderr
