"""Tests for ragidx.read.documents: loading files on disk into Documents."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from fpdf import FPDF

from ragidx.errors import InputError
from ragidx.read.documents import (
    SUPPORTED_SUFFIXES,
    Document,
    Skipped,
    decode_bytes,
    iter_documents,
    read_file,
)

ACCENTED = (
    "Nous avons mangé une crème brûlée à Zürich, près de la naïve façade du café. "
    "Le garçon était très aimable et la soirée fut délicieuse. "
    "Après le dîner, nous sommes allés au théâtre voir une pièce française."
)


def _docs(items: list[Document | Skipped]) -> list[Document]:
    return [item for item in items if isinstance(item, Document)]


def _skips(items: list[Document | Skipped]) -> list[Skipped]:
    return [item for item in items if isinstance(item, Skipped)]


def _one_doc(path: Path) -> Document:
    items = list(iter_documents(path))
    assert len(items) == 1, items
    assert isinstance(items[0], Document), items
    return items[0]


def _one_skip(path: Path) -> Skipped:
    items = list(iter_documents(path))
    assert len(items) == 1, items
    assert isinstance(items[0], Skipped), items
    return items[0]


def _touch(root: Path, rel: str, text: str = "some text") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _make_pdf(path: Path, pages: list[str], title: str | None = None) -> None:
    pdf = FPDF()
    if title:
        pdf.set_title(title)
    for page_text in pages:
        pdf.add_page()
        pdf.set_font("Helvetica", size=12)
        pdf.multi_cell(0, 10, text=page_text)
    path.write_bytes(bytes(pdf.output()))


# --- plain text and Markdown ---------------------------------------------------------------


def test_supported_suffixes() -> None:
    assert SUPPORTED_SUFFIXES == (".txt", ".md", ".markdown", ".html", ".htm", ".pdf", ".jsonl")


def test_text_file_given_directly(tmp_path: Path) -> None:
    path = _touch(tmp_path / "sub", "notes.txt", "line one\r\nline two\r\n")
    doc = _one_doc(path)
    assert doc.doc_id == "notes.txt"
    assert doc.text == "line one\nline two\n"
    assert doc.source == str(path.resolve())
    assert Path(doc.source).is_absolute()
    assert doc.title is None
    assert doc.metadata == {"format": "text", "encoding": "utf-8"}


def test_markdown_format(tmp_path: Path) -> None:
    for name in ("a.md", "b.markdown"):
        doc = _one_doc(_touch(tmp_path, name, "# Heading\n\nBody text."))
        assert doc.text == "# Heading\n\nBody text."
        assert doc.metadata["format"] == "markdown"
        assert doc.title is None


def test_read_file_returns_list_or_skipped(tmp_path: Path) -> None:
    path = _touch(tmp_path, "a.txt", "hello")
    result = read_file(path, "custom-id")
    assert isinstance(result, list)
    assert [d.doc_id for d in result] == ["custom-id"]
    empty = _touch(tmp_path, "e.txt", "")
    skipped = read_file(empty, "e.txt")
    assert isinstance(skipped, Skipped)
    assert skipped.source == str(empty.resolve())


# --- encodings ------------------------------------------------------------------------------


def test_cp1252_text_is_decoded(tmp_path: Path) -> None:
    path = tmp_path / "latin.txt"
    path.write_bytes(ACCENTED.encode("cp1252"))
    doc = _one_doc(path)
    assert doc.text == ACCENTED
    assert "crème brûlée" in doc.text
    assert "Zürich" in doc.text
    assert "naïve façade" in doc.text
    assert doc.metadata["encoding"] != "utf-8"


def test_utf16_bom_file(tmp_path: Path) -> None:
    path = tmp_path / "wide.txt"
    path.write_bytes(("Grüße aus Köln.\r\nZweite Zeile.").encode("utf-16"))  # BOM + native order
    doc = _one_doc(path)
    assert doc.text == "Grüße aus Köln.\nZweite Zeile."
    assert doc.metadata["encoding"].startswith("utf-16")


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        ("\ufeffhé".encode("utf-16-le"), "utf-16-le"),
        ("\ufeffhé".encode("utf-16-be"), "utf-16-be"),
        ("\ufeffhé".encode("utf-32-le"), "utf-32-le"),
        ("\ufeffhé".encode("utf-32-be"), "utf-32-be"),
        ("\ufeffhé".encode(), "utf-8-sig"),
        ("hé".encode(), "utf-8"),
    ],
)
def test_decode_bytes_boms(data: bytes, encoding: str) -> None:
    assert decode_bytes(data) == ("hé", encoding)


def test_decode_bytes_rejects_binary() -> None:
    with pytest.raises(ValueError, match="binary"):
        decode_bytes(b"PK\x03\x04\x00\x00\xff\xfe\x12")
    with pytest.raises(ValueError, match="binary"):
        decode_bytes(bytes(range(1, 8)) * 50)


def test_binary_file_with_txt_suffix_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "image.txt"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    skip = _one_skip(path)
    assert skip.source == str(path.resolve())
    assert "binary" in skip.reason


@pytest.mark.parametrize("content", ["", "  \n\t\n  "])
def test_empty_file_is_skipped(tmp_path: Path, content: str) -> None:
    path = _touch(tmp_path, "empty.md", content)
    assert _one_skip(path) == Skipped(str(path.resolve()), "empty document (no text after extraction)")


def test_unreadable_file_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _touch(tmp_path, "locked.txt", "secret")

    def deny(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", deny)
    skip = _one_skip(path)
    assert "Permission denied" in skip.reason


# --- HTML -----------------------------------------------------------------------------------

HTML_PAGE = """<!DOCTYPE html>
<html><head>
  <meta charset="utf-8">
  <title>  Quarterly   Report </title>
  <style>body { color: qqstylecolor; }</style>
  <script>var zyxwvscript = 1;</script>
</head>
<body>
  <script>console.log("zyxwvscript");</script>
  <noscript>nsxnoscript fallback</noscript>
  <template><p>tplxtemplate</p></template>
  <svg><text>svgxtext</text></svg>
  <h1>Results</h1>


  <p>Revenue    grew
     strongly.</p>



  <p>Costs fell.</p>
  <!-- cmtxcomment -->
</body></html>
"""


def test_html_extraction_drops_non_content(tmp_path: Path) -> None:
    path = _touch(tmp_path, "report.html", HTML_PAGE)
    doc = _one_doc(path)
    assert doc.title == "Quarterly Report"
    assert doc.text.startswith("Quarterly Report\n\nResults")
    for hidden in (
        "zyxwvscript",
        "qqstylecolor",
        "nsxnoscript",
        "tplxtemplate",
        "svgxtext",
        "cmtxcomment",
        "charset",
    ):
        assert hidden not in doc.text
    assert "Revenue grew\nstrongly." in doc.text
    assert "Costs fell." in doc.text
    assert "\n\n\n" not in doc.text
    assert all(line == line.strip() for line in doc.text.split("\n"))
    assert doc.metadata == {"format": "html", "encoding": "utf-8"}


def test_html_title_not_repeated_and_missing_title(tmp_path: Path) -> None:
    same = _touch(tmp_path, "same.htm", "<title>Intro</title><body><h1>Intro</h1><p>x y</p></body>")
    doc = _one_doc(same)
    assert doc.title == "Intro"
    assert doc.text == "Intro\nx y"
    untitled = _touch(tmp_path, "untitled.html", "<html><body><p>Just text.</p></body></html>")
    doc = _one_doc(untitled)
    assert doc.title is None
    assert doc.text == "Just text."


def test_html_navigation_menus_are_dropped(tmp_path: Path) -> None:
    page = "<html><body><nav><a href='/'>Home</a> <a>navxmenu</a></nav><p>Body text.</p></body></html>"
    doc = _one_doc(_touch(tmp_path, "nav.html", page))
    assert "navxmenu" not in doc.text
    assert doc.text == "Body text."


def test_html_script_only_is_empty(tmp_path: Path) -> None:
    path = _touch(tmp_path, "s.html", "<html><body><script>var a = 1;</script></body></html>")
    assert "empty document" in _one_skip(path).reason


def test_html_non_utf8_with_and_without_meta(tmp_path: Path) -> None:
    body = f"<html><body><p>{ACCENTED}</p></body></html>"
    plain = tmp_path / "plain.html"
    plain.write_bytes(body.encode("cp1252"))
    assert ACCENTED in _one_doc(plain).text
    declared = tmp_path / "declared.html"
    markup = '<html><head><meta charset="iso-8859-1"></head><body><p>Zürich\u2019s café</p></body>'
    declared.write_bytes(markup.encode("cp1252"))
    doc = _one_doc(declared)
    assert doc.text == "Zürich\u2019s café"
    assert doc.metadata["encoding"] == "cp1252"


# --- PDF ------------------------------------------------------------------------------------


def test_pdf_pages_and_title(tmp_path: Path) -> None:
    path = tmp_path / "two.pdf"
    _make_pdf(path, ["Alpha page one text.", "Beta page two text."], title="Two Page Test")
    doc = _one_doc(path)
    assert doc.doc_id == "two.pdf"
    assert doc.title == "Two Page Test"
    assert doc.metadata["format"] == "pdf"
    assert doc.metadata["pages"] == 2
    starts = doc.metadata["page_starts"]
    assert starts[0] == 0
    assert doc.text[starts[0] : starts[1]].strip() == "Alpha page one text."
    assert doc.text[starts[1] :].strip() == "Beta page two text."
    assert doc.text[starts[1] - 2 : starts[1]] == "\n\n"
    json.dumps(doc.metadata)


def test_pdf_without_title(tmp_path: Path) -> None:
    path = tmp_path / "plain.pdf"
    _make_pdf(path, ["Only page."])
    doc = _one_doc(path)
    assert doc.title is None
    assert doc.metadata["page_starts"] == [0]


def test_malformed_pdf_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "broken.pdf"
    path.write_bytes(os.urandom(2048))
    skip = _one_skip(path)
    assert skip.reason.startswith("malformed PDF: ")
    assert "\n" not in skip.reason


def test_encrypted_pdf_is_skipped(tmp_path: Path) -> None:
    pdf = FPDF()
    pdf.set_encryption(owner_password="owner", user_password="secret")
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    pdf.cell(text="hidden text")
    path = tmp_path / "locked.pdf"
    path.write_bytes(bytes(pdf.output()))
    assert _one_skip(path).reason == "encrypted PDF: cannot decrypt without a password"


# --- JSONL ----------------------------------------------------------------------------------


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
    d1, d7, d5 = _docs(items)
    assert d1.text == "First first body"
    assert d1.title == "First"
    assert d1.source == source
    assert d1.metadata == {"lang": "en", "format": "jsonl", "line": 1}
    assert d7.title is None
    assert d7.text == "numeric id"
    assert d7.metadata["line"] == 2
    assert d5.metadata == {"extra": {"k": [1, 2]}, "format": "jsonl", "line": 9}
    reasons = [s.reason for s in _skips(items)]
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
    _touch(tmp_path, "data/c.jsonl", json.dumps({"_id": "x", "text": "t"}) + "\n")
    assert [d.doc_id for d in _docs(list(iter_documents(tmp_path)))] == ["x"]


# --- walking folders ------------------------------------------------------------------------


def test_folder_recursion_order_and_ids(tmp_path: Path) -> None:
    for rel in ("b.txt", "a/z.md", "a/b/c.txt", "c.html", "UP.TXT", "notes.rst", "README"):
        _touch(tmp_path, rel, f"<p>text of {rel}</p>")
    items = list(iter_documents(tmp_path))
    assert all(isinstance(i, Document) for i in items)
    assert [i.doc_id for i in items] == ["UP.TXT", "a/b/c.txt", "a/z.md", "b.txt", "c.html"]
    by_id = {i.doc_id: i for i in _docs(items)}
    assert by_id["a/b/c.txt"].source == str((tmp_path / "a" / "b" / "c.txt").resolve())
    assert list(iter_documents(str(tmp_path))) == items  # str path, same result


def test_hidden_files_and_dirs_skipped(tmp_path: Path) -> None:
    _touch(tmp_path, "visible.txt")
    _touch(tmp_path, ".hidden.txt")
    _touch(tmp_path, ".git/config.txt")
    _touch(tmp_path, "sub/.secret/deep.md")
    items = list(iter_documents(tmp_path))
    assert [i.doc_id for i in _docs(items)] == ["visible.txt"]
    assert _skips(items) == []


def test_include_exclude_globs(tmp_path: Path) -> None:
    for rel in ("a.md", "b.txt", "draft-1.txt", "sub/c.md", "sub/d.txt", "node_modules/e.md"):
        _touch(tmp_path, rel)

    def ids(include: tuple[str, ...] = (), exclude: tuple[str, ...] = ()) -> list[str]:
        items = list(iter_documents(tmp_path, include=include, exclude=exclude))
        assert _skips(items) == []  # filtered files are not reported
        return [d.doc_id for d in _docs(items)]

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
    path = _touch(tmp_path, "data.csv", "a,b\n1,2\n")
    skip = _one_skip(path)
    assert skip.source == str(path.resolve())
    assert ".txt" in skip.reason
    assert ".pdf" in skip.reason


def test_missing_path_raises_input_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(InputError, match="no such file or directory"):
        iter_documents(missing)


def test_symlinked_directory_loop_does_not_hang(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _touch(root, "a.txt")
    _touch(root, "sub/b.txt")
    outside = tmp_path / "outside"
    _touch(outside, "o.txt")
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
    assert [d.doc_id for d in _docs(result)] == ["a.txt", "sub/b.txt"]
    assert _skips(result) == []


# --------------------------------------------------------------------------------------------
# Hostile input


def test_hostile_files_each_get_one_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ragidx import documents
    from tests.hostile import hostile_folder

    monkeypatch.setattr(documents, "PDF_PAGE_CONTENT_LIMIT", 1 << 20)
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


def test_large_html_is_parsed_without_a_tree(tmp_path: Path) -> None:
    page = (
        "<html><head><title>Big page</title><style>p {color: red}</style></head><body>"
        + "<nav>menu</nav><script>var x = 1;</script>"
        + "".join(f"<p>Paragraph {i} <b>bold</b> text.</p>" for i in range(2000))
        + "</body></html>"
    )
    (tmp_path / "big.html").write_text(page)
    small = next(iter(iter_documents(tmp_path / "big.html")))
    large = next(iter(iter_documents(tmp_path / "big.html", stream_bytes=1000)))
    assert isinstance(small, Document) and isinstance(large, Document)
    assert large.title == small.title == "Big page"
    assert large.text.split() == small.text.split()
    assert "menu" not in large.text and "color" not in large.text and "var x" not in large.text


def test_expanding_pdf_within_the_limit_is_read(tmp_path: Path) -> None:
    from tests.hostile import expanding_pdf

    doc = read_file(expanding_pdf(tmp_path / "ok.pdf", 2000), "ok.pdf")
    assert isinstance(doc, list) and doc[0].text.count("A") == 1000


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
