"""EPUB: the text of a book, its chapters in reading (spine) order.

Read with lxml and :mod:`zipfile`, the archive bounded against decompression bombs
(:mod:`~ragidx.read.container`); ebooklib is not used (AGPL, not compatible with Apache-2.0).
``META-INF/container.xml`` names the package document; its spine gives the chapters in order and
its manifest their parts. Each XHTML chapter goes through the HTML reader
(:func:`~ragidx.read.html.html_document`; a chapter larger than ``stream_bytes`` without a tree),
its ``<title>`` (it usually repeats the book's) and XML declaration left out. Chapters are joined
by a blank line and ``metadata["chapter_starts"]`` records where each begins; the title is the
package's first ``dc:title``. The navigation document (the table of contents) and non-XHTML spine
items (an image page) are not text of the book. A book whose chapters are encrypted (DRM), a spine
item missing from the archive, or a damaged part is a :class:`~ragidx.read.document.Skipped` with
one line.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

from lxml import etree

from ragidx.read.container import Container, ContainerError, parse_xml, read_container
from ragidx.read.document import EMPTY_REASON, Document, Skipped
from ragidx.read.html import declared_charset, html_document
from ragidx.read.text import decode_with_warning

__all__ = ["read_epub"]

_CONTAINER = "META-INF/container.xml"
_ENCRYPTION = "META-INF/encryption.xml"
_ROOTFILE = "{urn:oasis:names:tc:opendocument:xmlns:container}rootfile"
_OPF = "{http://www.idpf.org/2007/opf}"
_DC_TITLE = "{http://purl.org/dc/elements/1.1/}title"
_CIPHER_REFERENCE = "{http://www.w3.org/2001/04/xmlenc#}CipherReference"
_CHAPTER_TYPES = ("application/xhtml+xml", "text/html")
_XML_ENCODING = re.compile(rb"""^\s*<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9_.:\-]+)["']""")
_TITLE = re.compile(r"<title\b[^>]*>.*?</title\s*>", re.IGNORECASE | re.DOTALL)
_DECLARATION = re.compile(r"^\s*<\?xml[^>]*>")


def read_epub(path: Path, doc_id: str, source: str, stream_bytes: int) -> Iterator[Document | Skipped]:
    """The .epub file at ``path`` as one document, or why it cannot be used (a
    :class:`~ragidx.read.formats.Reader`)."""
    return read_container(path, "EPUB", source, lambda box: _document(box, doc_id, source, stream_bytes))


def _document(box: Container, doc_id: str, source: str, stream_bytes: int) -> Document | Skipped:
    package_name = _package_name(box)
    package = parse_xml(box.read(package_name))
    folder = posixpath.dirname(package_name)
    items = {item.get("id"): item for item in package.iter(f"{_OPF}item")}
    encrypted = _encrypted(box)
    chapters: list[str] = []
    warning: str | None = None
    for ref in package.iter(f"{_OPF}itemref"):
        idref = ref.get("idref")
        item = items.get(idref)
        if item is None:
            raise ContainerError(f"malformed EPUB: spine item {idref!r} is not in the manifest")
        properties = (item.get("properties") or "").split()
        if item.get("media-type") not in _CHAPTER_TYPES or "nav" in properties:
            continue
        name = posixpath.normpath(posixpath.join(folder, unquote((item.get("href") or "").split("#")[0])))
        if name in encrypted:
            return Skipped(source, f"encrypted EPUB (DRM): chapter {name!r} cannot be read without its key")
        data = box.read(name)
        declared = _declared(data)
        try:
            text, encoding, repaired = decode_with_warning(data, declared)
        except ValueError as exc:
            raise ContainerError(f"malformed EPUB: chapter {name!r}: {exc}") from exc
        markup = _TITLE.sub("", _DECLARATION.sub("", text, count=1), count=1)  # plain HTML to the parser
        chapter = html_document(markup, doc_id, source, encoding, len(data) > stream_bytes)
        del data, text, markup
        if isinstance(chapter, Document):
            chapters.append(chapter.text)
            if repaired and warning is None:
                warning = f"chapter {name!r}: {repaired}"
    if not chapters:
        return Skipped(source, EMPTY_REASON)
    starts: list[int] = []
    offset = 0
    for chapter_text in chapters:
        starts.append(offset)
        offset += len(chapter_text) + 2
    metadata: dict[str, object] = {"format": "epub", "chapters": len(chapters), "chapter_starts": starts}
    if warning is not None:
        metadata["warning"] = warning
    return Document(
        doc_id=doc_id, text="\n\n".join(chapters), source=source, title=_title(package), metadata=metadata
    )


def _package_name(box: Container) -> str:
    """The package document's part name, from ``META-INF/container.xml``."""
    for rootfile in parse_xml(box.read(_CONTAINER)).iter(_ROOTFILE):
        name = rootfile.get("full-path")
        if name:
            return posixpath.normpath(unquote(name).lstrip("/"))
    raise ContainerError(f"malformed EPUB: {_CONTAINER} names no package document")


def _encrypted(box: Container) -> set[str]:
    """The parts ``META-INF/encryption.xml`` lists as encrypted (fonts are, harmlessly, in many books)."""
    if not box.has(_ENCRYPTION):
        return set()
    return {
        posixpath.normpath(unquote(uri).lstrip("/"))
        for reference in parse_xml(box.read(_ENCRYPTION)).iter(_CIPHER_REFERENCE)
        if (uri := reference.get("URI"))
    }


def _title(package: etree._Element) -> str | None:
    for element in package.iter(_DC_TITLE):
        title = " ".join((element.text or "").split())
        if title:
            return title
    return None


def _declared(data: bytes) -> str | None:
    """The encoding a chapter declares: its XML declaration's, else its ``<meta charset>``."""
    match = _XML_ENCODING.match(data[:1024])
    return match.group(1).decode("ascii") if match else declared_charset(data)
