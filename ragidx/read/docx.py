"""DOCX (Word): the text of a .docx file, paragraphs and tables in document order.

Read with lxml and :mod:`zipfile` (no Word library: python-docx holds the whole document as a tree
and reads the archive unbounded; this reader streams the main part and bounds the archive, see
:mod:`~ragidx.read.container`). The main part is found through the package's relationships
(``word/document.xml`` when they are missing). Each paragraph is a line (tabs and line breaks
kept, deleted revisions and field codes left out); each table row is a line of its non-empty cells
joined by ``" | "``, nested tables inside their cell; content controls and text boxes are read in
place, and the fallback copy of alternate content is not read twice. The body is parsed as a
stream and each top-level paragraph or table is dropped once read, so memory is the text, not the
XML tree. The title is the document property ``dc:title``, else the first paragraph in the
``Title`` style. A file that is not a ZIP container (an old .doc, a password-protected file), a
damaged part or a decompression bomb is a :class:`~ragidx.read.document.Skipped` with one line.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from pathlib import Path

from lxml import etree

from ragidx.read.container import Container, iterparse_xml, parse_xml, read_container
from ragidx.read.document import EMPTY_REASON, Document, Skipped

__all__ = ["read_docx"]

_W = (
    "http://schemas.openxmlformats.org/wordprocessingml/2006/main",
    "http://purl.oclc.org/ooxml/wordprocessingml/main",  # Strict Open XML
)
_KINDS = ("body", "p", "tbl", "tr", "tc", "t", "tab", "br", "cr", "noBreakHyphen", "pPr", "pStyle")
_TAGS = {f"{{{ns}}}{kind}": kind for ns in _W for kind in _KINDS}
_VAL = tuple(f"{{{ns}}}val" for ns in _W)
_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
_RELATIONSHIP = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"
_OFFICE_DOCUMENT = "/officeDocument"  # the end of the main part's relationship type (both schemas)
_CORE_PROPERTIES = "/metadata/core-properties"
_DC_TITLE = "{http://purl.org/dc/elements/1.1/}title"
_TABLE_PARTS = ("tbl", "tr", "tc", "p")  # not entered while looking for rows or cells
_TITLE_STYLE = "Title"


def read_docx(path: Path, doc_id: str, source: str, stream_bytes: int) -> Iterator[Document | Skipped]:
    """The .docx file at ``path`` as one document, or why it cannot be used (a
    :class:`~ragidx.read.formats.Reader`; the main part is always streamed)."""
    return read_container(path, "DOCX", source, lambda box: _document(box, doc_id, source))


def _document(box: Container, doc_id: str, source: str) -> Document | Skipped:
    relationships = _relationships(box)
    main = relationships.get(_OFFICE_DOCUMENT, "word/document.xml")
    lines: list[str] = []
    paragraphs = tables = 0
    styled_title: str | None = None
    body: etree._Element | None = None
    with box.open(main) as stream:
        for event, element in iterparse_xml(stream):
            if body is None:
                if event == "start" and _TAGS.get(element.tag) == "body":
                    body = element
                continue
            if event != "end" or element.getparent() is not body:
                continue
            kind = _TAGS.get(element.tag)
            before = len(lines)
            lines.extend(_blocks(element))
            tables += kind == "tbl"
            paragraphs += kind == "p" and len(lines) > before
            if kind == "p" and styled_title is None and _style(element) == _TITLE_STYLE:
                styled_title = " ".join(_paragraph(element).split()) or None
            element.clear()
            while element.getprevious() is not None:
                del body[0]  # the blocks already read
    if body is None:
        return Skipped(source, f"malformed DOCX: {main!r} has no document body")
    text = "\n".join(lines)
    if not text.strip():
        return Skipped(source, EMPTY_REASON)
    title = _core_title(box, relationships.get(_CORE_PROPERTIES, "docProps/core.xml")) or styled_title
    return Document(
        doc_id=doc_id,
        text=text,
        source=source,
        title=title,
        metadata={"format": "docx", "paragraphs": paragraphs, "tables": tables},
    )


def _relationships(box: Container) -> dict[str, str]:
    """The package's relationships, by the end of their type (``/officeDocument`` …) → part name."""
    if not box.has("_rels/.rels"):
        return {}
    found: dict[str, str] = {}
    for rel in parse_xml(box.read("_rels/.rels")).iter(_RELATIONSHIP):
        kind, target = rel.get("Type") or "", rel.get("Target") or ""
        if rel.get("TargetMode") == "External" or not target:
            continue
        name = posixpath.normpath(target.lstrip("/"))
        for end in (_OFFICE_DOCUMENT, _CORE_PROPERTIES):
            if kind.endswith(end):
                found.setdefault(end, name)
    return found


def _core_title(box: Container, name: str) -> str | None:
    if not box.has(name):
        return None
    for element in parse_xml(box.read(name)).iter(_DC_TITLE):
        title = " ".join((element.text or "").split())
        if title:
            return title
    return None


def _blocks(element: etree._Element) -> Iterator[str]:
    """The lines of a body-level element: a paragraph's text, a table's rows, or those of the
    paragraphs and tables inside a wrapper (a content control, custom XML)."""
    kind = _TAGS.get(element.tag)
    if kind == "p":
        text = _paragraph(element)
        if text.strip():
            yield text
    elif kind == "tbl":
        yield from _rows(element)
    elif element.tag != _FALLBACK:
        for child in element:
            yield from _blocks(child)


def _paragraph(paragraph: etree._Element) -> str:
    """A paragraph's text: its runs' text, tabs and breaks, in order (a text box inside it on
    lines of its own)."""
    parts: list[str] = []

    def visit(element: etree._Element) -> None:
        for child in element:
            kind = _TAGS.get(child.tag)
            if kind == "t":
                parts.append(child.text or "")
            elif kind == "tab":
                parts.append("\t")
            elif kind in ("br", "cr"):
                parts.append("\n")
            elif kind == "noBreakHyphen":
                parts.append("-")
            elif kind in ("p", "tbl"):  # inside a text box
                parts.extend(f"\n{line}" for line in _blocks(child))
            elif kind != "pPr" and child.tag != _FALLBACK:
                visit(child)

    visit(paragraph)
    return "".join(parts)


def _rows(table: etree._Element) -> Iterator[str]:
    for row in _find(table, "tr"):
        cells = (" ".join(" ".join(_blocks(cell)).split()) for cell in _find(row, "tc"))
        line = " | ".join(cell for cell in cells if cell)
        if line:
            yield line


def _find(element: etree._Element, kind: str) -> Iterator[etree._Element]:
    """The ``kind`` elements under ``element``, through wrappers but not into another table part."""
    for child in element:
        found = _TAGS.get(child.tag)
        if found == kind:
            yield child
        elif found not in _TABLE_PARTS and child.tag != _FALLBACK:
            yield from _find(child, kind)


def _style(paragraph: etree._Element) -> str | None:
    for child in paragraph:
        if _TAGS.get(child.tag) == "pPr":
            for prop in child:
                if _TAGS.get(prop.tag) == "pStyle":
                    return next((v for v in map(prop.get, _VAL) if v is not None), None)
    return None
