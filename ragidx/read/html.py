"""HTML: the title and readable text of a page.

Two parsers give the same text: BeautifulSoup over lxml builds a tree (ordinary pages), and an
event-driven lxml parser builds none (pages larger than ``stream_bytes``, or nested too deeply for
a tree), so memory stays bounded. Code and page chrome (``script``, ``style``, ``nav``, …) are
dropped with everything inside them; whitespace is tidied line by line; the title leads the text
unless the body already starts with it. :func:`declared_charset` reads a page's ``<meta charset>``.
"""

from __future__ import annotations

import re
from typing import cast

from bs4 import BeautifulSoup
from lxml import etree

from ragidx.read.document import EMPTY_REASON, STREAM_BLOCK, Document, Skipped

__all__ = ["declared_charset", "html_document"]

# Markup that is code or page chrome, not content: dropped with everything inside it.
_HTML_DROP_TAGS = ("script", "style", "noscript", "template", "svg", "iframe", "nav")
_META_CHARSET_RE = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]+)""", re.IGNORECASE)
_BLOCK_TAGS = frozenset(
    [
        "p",
        "div",
        "br",
        "li",
        "ul",
        "ol",
        "tr",
        "td",
        "th",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "section",
        "article",
        "header",
        "footer",
        "pre",
        "blockquote",
        "table",
        "dt",
        "dd",
        "hr",
    ]
)


def declared_charset(data: bytes) -> str | None:
    """The encoding a page declares in a ``<meta charset>`` within its first 4 KiB, if any."""
    match = _META_CHARSET_RE.search(data[:4096])
    return match.group(1).decode("ascii") if match else None


def html_document(
    text: str, doc_id: str, source: str, encoding: str, large: bool = False
) -> Document | Skipped:
    """The page as a document (``large``: parsed without a tree), or why it has no text."""
    try:
        title, body = _html_events(text) if large else _html_soup(text)
    except RecursionError:
        title, body = _html_events(text)
    if not body.strip():
        return Skipped(source, EMPTY_REASON)
    return Document(
        doc_id=doc_id,
        text=body,
        source=source,
        title=title or None,
        metadata={"format": "html", "encoding": encoding},
    )


def _html_soup(text: str) -> tuple[str, str]:
    soup = BeautifulSoup(text, "lxml")
    for tag in soup.find_all(_HTML_DROP_TAGS):
        tag.decompose()
    title_tag = soup.find("title")
    title = " ".join(title_tag.get_text().split()) if title_tag is not None else ""
    for tag in soup.find_all(["head", "title"]):
        tag.decompose()
    return title, _with_title(title, _tidy_lines(soup.get_text("\n")))


class _TextEvents:
    """lxml parser target: collects text in document order, builds no tree (bounded memory)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.title: list[str] = []
        self.dropped = 0  # depth inside script/style/nav/…
        self.in_title = False

    def start(self, tag: str, attrib: object) -> None:
        if tag in _HTML_DROP_TAGS or tag == "head":
            self.dropped += 1
        self.in_title = self.in_title or tag == "title"
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def end(self, tag: str) -> None:
        if tag in _HTML_DROP_TAGS or tag == "head":
            self.dropped -= 1
        if tag == "title":
            self.in_title = False
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def data(self, text: str) -> None:
        if self.in_title:
            self.title.append(text)
        elif not self.dropped:
            self.parts.append(text)

    def close(self) -> None:
        pass


def _html_events(text: str) -> tuple[str, str]:
    """Title and text of HTML too large (or too deeply nested) for a tree, fed in blocks."""
    target = _TextEvents()
    # lxml calls an HTML parser's target with str; its stubs also allow bytes.
    parser = etree.HTMLParser(target=cast("etree.ParserTarget", target), recover=True, huge_tree=True)
    for at in range(0, len(text), STREAM_BLOCK):
        parser.feed(text[at : at + STREAM_BLOCK])
    parser.close()
    title = " ".join("".join(target.title).split())
    return title, _with_title(title, _tidy_lines("".join(target.parts)))


def _with_title(title: str, body: str) -> str:
    if title and not body.startswith(title):
        return f"{title}\n\n{body}" if body else title
    return body


def _tidy_lines(raw: str) -> str:
    """Collapse whitespace within lines and runs of blank lines into one blank line."""
    out: list[str] = []
    for raw_line in raw.split("\n"):
        line = " ".join(raw_line.split())
        if line or (out and out[-1]):
            out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)
