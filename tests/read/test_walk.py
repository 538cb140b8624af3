"""Tests for ragidx.read.walk: walking files and folders, dispatch by type, streaming large files."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ragidx.errors import InputError
from ragidx.read.document import Document, Skipped
from ragidx.read.walk import iter_documents, read_file
from tests.read.files import documents_of, one_doc, one_skip, skips_of, touch

# --- plain text and Markdown ---------------------------------------------------------------


def test_text_file_given_directly(tmp_path: Path) -> None:
    path = touch(tmp_path / "sub", "notes.txt", "line one\r\nline two\r\n")
    doc = one_doc(path)
    assert doc.doc_id == "notes.txt"
    assert doc.text == "line one\nline two\n"
    assert doc.source == str(path.resolve())
    assert Path(doc.source).is_absolute()
    assert doc.title is None
    assert doc.metadata == {"format": "text", "encoding": "utf-8"}


def test_markdown_format(tmp_path: Path) -> None:
    for name in ("a.md", "b.markdown"):
        doc = one_doc(touch(tmp_path, name, "# Heading\n\nBody text."))
        assert doc.text == "# Heading\n\nBody text."
        assert doc.metadata["format"] == "markdown"
        assert doc.title is None


def test_read_file_returns_list_or_skipped(tmp_path: Path) -> None:
    path = touch(tmp_path, "a.txt", "hello")
    result = read_file(path, "custom-id")
    assert isinstance(result, list)
    assert [d.doc_id for d in result] == ["custom-id"]
    empty = touch(tmp_path, "e.txt", "")
    skipped = read_file(empty, "e.txt")
    assert isinstance(skipped, Skipped)
    assert skipped.source == str(empty.resolve())


@pytest.mark.parametrize("content", ["", "  \n\t\n  "])
def test_empty_file_is_skipped(tmp_path: Path, content: str) -> None:
    path = touch(tmp_path, "empty.md", content)
    assert one_skip(path) == Skipped(str(path.resolve()), "empty document (no text after extraction)")


def test_unreadable_file_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = touch(tmp_path, "locked.txt", "secret")

    def deny(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", deny)
    skip = one_skip(path)
    assert "Permission denied" in skip.reason


# --- walking folders -----------------------------------------------------------------------


def test_folder_recursion_order_and_ids(tmp_path: Path) -> None:
    for rel in ("b.txt", "a/z.md", "a/b/c.txt", "c.html", "UP.TXT", "notes.rst", "README"):
        touch(tmp_path, rel, f"<p>text of {rel}</p>")
    items = list(iter_documents(tmp_path))
    assert all(isinstance(i, Document) for i in items)
    assert [i.doc_id for i in items] == ["UP.TXT", "a/b/c.txt", "a/z.md", "b.txt", "c.html"]
    by_id = {i.doc_id: i for i in documents_of(items)}
    assert by_id["a/b/c.txt"].source == str((tmp_path / "a" / "b" / "c.txt").resolve())
    assert list(iter_documents(str(tmp_path))) == items  # str path, same result


def test_hidden_files_and_dirs_skipped(tmp_path: Path) -> None:
    touch(tmp_path, "visible.txt")
    touch(tmp_path, ".hidden.txt")
    touch(tmp_path, ".git/config.txt")
    touch(tmp_path, "sub/.secret/deep.md")
    items = list(iter_documents(tmp_path))
    assert [i.doc_id for i in documents_of(items)] == ["visible.txt"]
    assert skips_of(items) == []


def test_include_exclude_globs(tmp_path: Path) -> None:
    for rel in ("a.md", "b.txt", "draft-1.txt", "sub/c.md", "sub/d.txt", "node_modules/e.md"):
        touch(tmp_path, rel)

    def ids(include: tuple[str, ...] = (), exclude: tuple[str, ...] = ()) -> list[str]:
        items = list(iter_documents(tmp_path, include=include, exclude=exclude))
        assert skips_of(items) == []  # filtered files are not reported
        return [d.doc_id for d in documents_of(items)]

    assert ids() == ["a.md", "b.txt", "draft-1.txt", "node_modules/e.md", "sub/c.md", "sub/d.txt"]
    assert ids(include=("*.md",)) == ["a.md", "node_modules/e.md", "sub/c.md"]
    assert ids(include=("sub/*",)) == ["sub/c.md", "sub/d.txt"]
    assert ids(include=("d.txt",)) == ["sub/d.txt"]  # file-name match
    assert ids(exclude=("draft*", "sub/*.md")) == [
        "a.md",
        "b.txt",
        "node_modules/e.md",
        "sub/d.txt",
    ]
    assert ids(include=("*.md",), exclude=("node_modules",)) == ["a.md", "sub/c.md"]


def test_single_file_unsupported_suffix(tmp_path: Path) -> None:
    path = touch(tmp_path, "data.csv", "a,b\n1,2\n")
    skip = one_skip(path)
    assert skip.source == str(path.resolve())
    assert ".txt" in skip.reason
    assert ".pdf" in skip.reason


def test_missing_path_raises_input_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(InputError, match="no such file or directory"):
        iter_documents(missing)


def test_symlinked_directory_loop_does_not_hang(tmp_path: Path) -> None:
    root = tmp_path / "root"
    touch(root, "a.txt")
    touch(root, "sub/b.txt")
    outside = tmp_path / "outside"
    touch(outside, "o.txt")
    try:
        (root / "sub" / "loop").symlink_to(root, target_is_directory=True)
        (root / "ext").symlink_to(outside, target_is_directory=True)
    except OSError:
        pytest.skip("symlinks not supported here")
    result: list[Document | Skipped] = []
    worker = threading.Thread(target=lambda: result.extend(iter_documents(root)), daemon=True)
    worker.start()
    worker.join(timeout=3)
    assert not worker.is_alive(), "walk did not finish"
    assert [d.doc_id for d in documents_of(result)] == ["a.txt", "sub/b.txt"]
    assert skips_of(result) == []


# --- hostile input -------------------------------------------------------------------------


def test_hostile_files_each_get_one_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ragidx.read import pdf
    from tests.hostile import hostile_folder

    monkeypatch.setattr(pdf, "PDF_PAGE_CONTENT_LIMIT", 1 << 20)
    expected = hostile_folder(tmp_path / "docs")
    items = list(iter_documents(tmp_path / "docs"))
    by_name: dict[str, list[Document | Skipped]] = {}
    for item in items:
        source = item.source.rsplit(":", 1)[0] if ".jsonl:" in item.source else item.source
        by_name.setdefault(Path(source).name, []).append(item)
    assert sorted(by_name) == sorted(expected)
    for name, outcome in expected.items():
        found = by_name[name]
        kind, _, text = outcome.partition(":")
        if kind == "skip":
            assert len(found) == 1 and isinstance(found[0], Skipped) and text in found[0].reason, (
                name,
                found,
            )
        elif name != "corpus.jsonl":
            doc = found[0]
            assert isinstance(doc, Document), (name, doc)
            assert doc.text.strip() and (text in doc.metadata.get("warning", "")), (name, doc.metadata)
            doc.doc_id.encode("utf-8")  # always valid UTF-8 (Parquet needs it)
    jsonl = [i for i in items if "corpus.jsonl" in i.source]
    assert [type(i).__name__ for i in jsonl] == ["Document", "Skipped", "Skipped", "Skipped"]
    assert "duplicate id 'j1'" in jsonl[2].reason
    deep = next(i for i in items if isinstance(i, Document) and i.doc_id == "deep.html")
    assert deep.title == "Deep" and "deep text" in deep.text


def test_streamed_binary_and_blank_files_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "bin.txt").write_bytes(b"\x00\x01" * 5000)
    (tmp_path / "blank.txt").write_bytes(b" \n" * 5000)
    (tmp_path / "ok.txt").write_bytes("h\u00e9llo w\u00f6rld ".encode("cp1252") * 1000)
    items = {Path(i.source).name: i for i in iter_documents(tmp_path, stream_bytes=1000)}
    assert isinstance(items["bin.txt"], Skipped) and "binary" in items["bin.txt"].reason
    assert isinstance(items["blank.txt"], Skipped) and "empty" in items["blank.txt"].reason
    streamed = items["ok.txt"]
    assert isinstance(streamed, Document) and streamed.metadata["streamed"]
    assert "".join(streamed.pieces()) == "h\u00e9llo w\u00f6rld " * 1000


def test_fifos_and_sockets_in_a_folder_are_skipped_with_a_reason(tmp_path: Path) -> None:
    """A FIFO named like a document is never opened (that would block) but named in a warning."""
    import os
    import socket

    touch(tmp_path, "a.txt", "a real file")
    os.mkfifo(tmp_path / "pipe.txt")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock.md"))
    try:
        items = list(iter_documents(tmp_path))
    finally:
        server.close()
    assert [d.doc_id for d in documents_of(items)] == ["a.txt"]
    assert [(Path(s.source).name, s.reason) for s in skips_of(items)] == [
        ("pipe.txt", "not a regular file (a FIFO, socket or device): not read"),
        ("sock.md", "not a regular file (a FIFO, socket or device): not read"),
    ]
    assert [s.reason for s in skips_of(list(iter_documents(tmp_path / "pipe.txt")))] == [
        "not a regular file (a FIFO, socket or device): not read"
    ]


@pytest.mark.parametrize("control", ["\n", "\t", "\x07", "\x85", "\u2028"])
def test_file_names_with_control_characters_are_refused(tmp_path: Path, control: str) -> None:
    """A newline in a document id would break every table row that shows it: such a file is
    skipped with a reason that says what to do, and nothing else changes."""
    touch(tmp_path, "fine.txt", "kept")
    touch(tmp_path / f"dir{control}x", "inner.txt", "also refused: its id holds the folder's name")
    path = touch(tmp_path, f"two{control}lines.txt", "some text")
    items = list(iter_documents(tmp_path))
    assert [d.doc_id for d in documents_of(items)] == ["fine.txt"]
    reasons = {s.source: s.reason for s in skips_of(items)}
    assert reasons[str(path)].startswith("file name has a control character")
    assert "rename" in reasons[str(path)]
    assert len(reasons) == 2
    assert [s.reason for s in skips_of(list(iter_documents(path)))] == [reasons[str(path)]]
