"""Tests for ragidx.read.jsonl: BEIR-style JSONL corpora."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragidx.read.document import Document
from ragidx.read.walk import iter_documents, read_file
from tests.read.files import documents_of, skips_of, touch


def test_jsonl_records_and_bad_lines(tmp_path: Path) -> None:
    lines = [
        json.dumps({"_id": "d1", "title": "First", "text": "first body", "lang": "en"}),
        json.dumps({"id": 7, "text": "numeric id"}),
        "",
        "{not json",
        json.dumps({"_id": "d3"}),
        json.dumps({"_id": "d4", "text": 42}),
        json.dumps({"title": "no id", "text": "x"}),
        json.dumps({"_id": "d1", "text": "duplicate"}),
        json.dumps({"_id": "d5", "text": "last good", "extra": {"k": [1, 2]}}),
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    items = list(iter_documents(path))
    source = str(path.resolve())
    kinds = [(type(i).__name__, i.doc_id if isinstance(i, Document) else i.source) for i in items]
    assert kinds == [
        ("Document", "d1"),
        ("Document", "7"),
        ("Skipped", f"{source}:4"),
        ("Skipped", f"{source}:5"),
        ("Skipped", f"{source}:6"),
        ("Skipped", f"{source}:7"),
        ("Skipped", f"{source}:8"),
        ("Document", "d5"),
    ]
    d1, d7, d5 = documents_of(items)
    assert d1.text == "First first body"
    assert d1.title == "First"
    assert d1.source == source
    assert d1.metadata == {"lang": "en", "format": "jsonl", "line": 1}
    assert d7.title is None
    assert d7.text == "numeric id"
    assert d7.metadata["line"] == 2
    assert d5.metadata == {"extra": {"k": [1, 2]}, "format": "jsonl", "line": 9}
    reasons = [s.reason for s in skips_of(items)]
    assert "invalid JSON" in reasons[0]
    assert "text" in reasons[1]
    assert "text" in reasons[2]
    assert "string" in reasons[2]
    assert "id" in reasons[3]
    assert "duplicate" in reasons[4]
    assert "d1" in reasons[4]
    # read_file gives the good documents only
    result = read_file(path, "ignored")
    assert isinstance(result, list)
    assert [d.doc_id for d in result] == ["d1", "7", "d5"]
    assert all(isinstance(d, Document) for d in result)


def test_jsonl_in_folder_keeps_record_ids(tmp_path: Path) -> None:
    touch(tmp_path, "data/c.jsonl", json.dumps({"_id": "x", "text": "t"}) + "\n")
    assert [d.doc_id for d in documents_of(list(iter_documents(tmp_path)))] == ["x"]


def test_jsonl_ids_with_control_characters_are_refused(tmp_path: Path) -> None:
    lines = [json.dumps({"_id": i, "text": "body"}) for i in ("ok", "two\nlines", "tab\tid", "ok2")]
    items = list(iter_documents(touch(tmp_path, "c.jsonl", "\n".join(lines))))
    assert [d.doc_id for d in documents_of(items)] == ["ok", "ok2"]
    reasons = [(s.source.rsplit(":", 1)[1], s.reason) for s in skips_of(items)]
    assert [line for line, _ in reasons] == ["2", "3"]
    assert reasons[0][1].startswith("\"_id\" has a control character ('\\n')")
    assert reasons[1][1].startswith("\"_id\" has a control character ('\\t')")


def test_a_jsonl_file_above_the_streaming_size_is_read_line_by_line_to_the_same_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragidx.read import walk

    lines = [json.dumps({"_id": f"d{i}", "text": f"body {i} " * (i * 7)}) for i in range(1, 40)]
    lines[5], lines[9] = "not json", json.dumps({"_id": "d1", "text": "again"})
    path = touch(tmp_path, "c.jsonl", "\r\n".join(lines) + "\r\n\r\n")
    whole = list(iter_documents(path))
    monkeypatch.setattr(walk, "STREAM_BLOCK", 100)  # blocks end mid-line and between \r and \n
    streamed = list(iter_documents(path, stream_bytes=1000))
    assert streamed == whole and len(documents_of(whole)) == 37 and len(skips_of(whole)) == 2
    path.write_bytes(b"\x00\x01" * 1000)
    assert [s.reason for s in skips_of(list(iter_documents(path, stream_bytes=1000)))] == [
        "binary file (NUL bytes): not text"
    ]
