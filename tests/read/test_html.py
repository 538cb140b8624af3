"""Tests for ragidx.read.html: the text and title of HTML pages."""

from __future__ import annotations

from pathlib import Path

from ragidx.read.document import Document
from ragidx.read.walk import iter_documents
from tests.read.files import ACCENTED, one_doc, one_skip, touch

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
    path = touch(tmp_path, "report.html", HTML_PAGE)
    doc = one_doc(path)
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
    same = touch(tmp_path, "same.htm", "<title>Intro</title><body><h1>Intro</h1><p>x y</p></body>")
    doc = one_doc(same)
    assert doc.title == "Intro"
    assert doc.text == "Intro\nx y"
    untitled = touch(tmp_path, "untitled.html", "<html><body><p>Just text.</p></body></html>")
    doc = one_doc(untitled)
    assert doc.title is None
    assert doc.text == "Just text."


def test_html_navigation_menus_are_dropped(tmp_path: Path) -> None:
    page = "<html><body><nav><a href='/'>Home</a> <a>navxmenu</a></nav><p>Body text.</p></body></html>"
    doc = one_doc(touch(tmp_path, "nav.html", page))
    assert "navxmenu" not in doc.text
    assert doc.text == "Body text."


def test_html_script_only_is_empty(tmp_path: Path) -> None:
    path = touch(tmp_path, "s.html", "<html><body><script>var a = 1;</script></body></html>")
    assert "empty document" in one_skip(path).reason


def test_html_non_utf8_with_and_without_meta(tmp_path: Path) -> None:
    body = f"<html><body><p>{ACCENTED}</p></body></html>"
    plain = tmp_path / "plain.html"
    plain.write_bytes(body.encode("cp1252"))
    assert ACCENTED in one_doc(plain).text
    declared = tmp_path / "declared.html"
    markup = '<html><head><meta charset="iso-8859-1"></head><body><p>Zürich\u2019s café</p></body>'
    declared.write_bytes(markup.encode("cp1252"))
    doc = one_doc(declared)
    assert doc.text == "Zürich\u2019s café"
    assert doc.metadata["encoding"] == "cp1252"


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
