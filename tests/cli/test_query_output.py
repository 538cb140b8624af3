"""``ragidx query`` output: --per chunk, --where, the matched sentence highlighted in the table and
given in --json, and text from documents and queries made safe for a terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.cli.console import one_line
from ragidx.cli.query import highlighted
from ragidx.index.directory import Index
from tests.conftest import long_text

runner = CliRunner()
ESCAPES = "\x1b[2J\x1b]0;pwned\x07\x1b[31mred\x1b[0m \x9b1m [bold]not markup[/bold] \u202eevil"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    root = tmp_path_factory.mktemp("query-output")
    docs = root / "docs"
    docs.mkdir()
    (docs / "long.txt").write_text(long_text(200, seed=1))
    (docs / "notes.md").write_text("# Notes\n\nThe granite tower stood on the rock for a century.")
    records = [
        {"_id": "p1", "text": "Granite quarries near the coast. " + long_text(20, seed=2), "year": 2009},
        {"_id": "p2", "text": "A granite bridge over the river.", "year": 2010, "tags": ["stone", "old"]},
        {"_id": "p3", "text": f"Granite with escapes {ESCAPES} inside.", "draft": True},
    ]
    (docs / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    flags = ["--long-doc", "chunk", "--chunk-size", "24", "--overlap", "0"]
    ingest = ["ingest", str(docs), "-i", str(root / "ix"), "-m", str(tiny_model), "-q", *flags]
    result = runner.invoke(app, ingest)
    assert result.exit_code == 0, result.output
    return root / "ix"


def _json(index_dir: Path, *args: str) -> list[dict]:
    result = runner.invoke(app, ["query", *args, "-i", str(index_dir), "--json"])
    assert result.exit_code == 0, result.output
    hits: list[dict] = json.loads(result.stdout)
    return hits


def test_per_chunk_ranks_chunks_and_per_document_each_document_once(index_dir: Path) -> None:
    query = long_text(200, seed=1)[:80]
    chunks = _json(index_dir, query, "--per", "chunk", "-k", "6")
    assert len(chunks) == 6 and len({h["doc_id"] for h in chunks}) < 6  # several chunks of long.txt
    long = [h for h in chunks if h["doc_id"] == "long.txt"]
    assert len({h["chunk"]["ordinal"] for h in long}) == len(long) > 1
    documents = _json(index_dir, query, "-k", "6")
    assert len({h["doc_id"] for h in documents}) == len(documents) == 5  # every document, once
    refused = runner.invoke(app, ["query", "x", "-i", str(index_dir), "--per", "chunk", "--mode", "hybrid"])
    assert refused.exit_code == 2 and "per='chunk' needs mode dense" in refused.stderr


def test_where_keeps_documents_with_the_metadata_value(index_dir: Path) -> None:
    everything = _json(index_dir, "granite", "-k", "10")
    assert len(everything) == 5
    by_format = _json(index_dir, "granite", "--where", "format=jsonl")
    assert sorted(h["doc_id"] for h in by_format) == ["p1", "p2", "p3"]
    by_number = _json(index_dir, "granite", "--where", "year=2009")
    assert [h["doc_id"] for h in by_number] == ["p1"]
    by_list = _json(index_dir, "granite", "--where", "tags=stone", "--where", "format=jsonl")
    assert [h["doc_id"] for h in by_list] == ["p2"]
    assert [h["doc_id"] for h in _json(index_dir, "granite", "--where", "draft=true")] == ["p3"]
    assert [h["doc_id"] for h in _json(index_dir, "granite", "--where", "doc_id=notes.md")] == ["notes.md"]
    chunks = _json(index_dir, "granite", "--per", "chunk", "--where", "doc_id=long.txt", "-k", "3")
    assert len(chunks) == 3 and {h["doc_id"] for h in chunks} == {"long.txt"}  # still k when k match
    assert _json(index_dir, "granite", "--where", "year=1999") == []
    empty = runner.invoke(app, ["query", "granite", "-i", str(index_dir), "--where", "year=1999"])
    assert empty.exit_code == 0 and "nothing matched --where" in empty.stdout
    bad = runner.invoke(app, ["query", "granite", "-i", str(index_dir), "--where", "format"])
    assert bad.exit_code == 2 and "--where format: give key=value" in bad.stderr


def test_json_gives_the_matched_sentence_its_terms_and_the_passage(index_dir: Path) -> None:
    (hit,) = _json(index_dir, "granite tower", "--where", "doc_id=notes.md", "-k", "1")
    text = Index.open(index_dir).document("notes.md").text
    match = hit["match"]
    assert match["text"] == "The granite tower stood on the rock for a century."
    assert text[match["char_start"] : match["char_end"]] == match["text"]
    assert match["by"] == "lexical" and match["score"] == 2  # the only sentence with both words
    assert match["terms"] == ["granite", "tower"]
    lo, hi = match["snippet_sentence"]
    assert hit["snippet"][lo:hi] == match["text"]
    assert [hit["snippet"][a:b] for a, b in match["snippet_terms"]] == ["granite", "tower"]
    assert hit["passage_span"] == {"char_start": 0, "char_end": len(text)}
    unknown = ["zebra xylophone", "--where", "doc_id=long.txt"]  # no word in common: the model decides
    assert _json(index_dir, *unknown)[0]["match"]["by"] == "dense"
    assert _json(index_dir, *unknown, "--sentences", "lexical")[0]["match"]["by"] == "lexical"
    batch = Path(index_dir).parent / "q.tsv"
    batch.write_text("q1\tgranite tower\n")
    result = runner.invoke(app, ["query", "--queries", str(batch), "-i", str(index_dir), "--json"])
    assert {h["match"]["by"] for h in json.loads(result.stdout)["q1"]} == {"lexical"}  # batches: lexical


def test_the_table_highlights_the_sentence_and_the_terms() -> None:
    from ragidx.search.retriever import SearchResult

    snippet = "The granite tower stood. Rain fell."
    result = SearchResult(
        rank=1,
        score=1.0,
        doc_id="d",
        source="d",
        title=None,
        snippet=snippet,
        text=snippet,
        embed_mode="whole",
        n_tokens=8,
        match={
            "text": "The granite tower stood.",
            "char_start": 0,
            "char_end": 24,
            "by": "lexical",
            "score": 2.0,
            "terms": ["granite", "tower"],
            "snippet_sentence": [0, 24],
            "snippet_terms": [[4, 11], [12, 17]],
        },
    )
    shown = highlighted(result)
    assert shown.plain == snippet
    styles = {(span.start, span.end): str(span.style) for span in shown.spans}
    assert styles == {
        (0, 4): "bold",
        (4, 11): "bold underline",
        (11, 12): "bold",
        (12, 17): "bold underline",
        (17, 24): "bold",
    }


def test_escape_sequences_are_shown_not_obeyed_and_json_stays_exact(index_dir: Path) -> None:
    query = "granite \x1b[31mescapes"
    table = runner.invoke(app, ["query", query, "-i", str(index_dir), "--where", "doc_id=p3"])
    assert table.exit_code == 0, table.output
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in table.stdout
    flat = "".join(line.strip("│ ") for line in table.stdout.splitlines())
    assert "\\x07\\x1b[31mred\\x1b[0m" in flat and "\\x9b1m" in flat and "\\u202eevil" in flat
    assert "[bold]not" in flat and "markup[/bold]" in flat  # text, not rich markup
    assert "top 1 for: granite \\x1b[31mescapes" in table.stdout
    (hit,) = _json(index_dir, query, "--where", "doc_id=p3", "--with-text")
    match = hit["match"]
    assert ESCAPES in hit["text"] and "\x07\x1b[31mred\x1b[0m \x9b1m" in match["text"]  # raw, exact
    assert hit["text"][match["char_start"] : match["char_end"]] == match["text"]


def test_one_line_keeps_text_and_escapes_control_characters() -> None:
    assert one_line("Ünïcödé text, 日本語, emoji 🙂") == "Ünïcödé text, 日本語, emoji 🙂"
    assert one_line("a\x1b[0mb\tc\u200bd\x7f") == "a\\x1b[0mb\\tc\\u200bd\\x7f"
    assert one_line("id\x9b1m\u202eevil\nnext") == "id\\x9b1m\\u202eevil\\nnext"  # C1, bidi, newline
