"""PDF: the text of a PDF file, page by page, with pypdf.

Pages are joined by a blank line, and ``metadata["page_starts"]`` records where each page's text
begins; the document title comes from the PDF's ``/Title``. A malformed file, an encrypted one that
does not open with the empty password, and a page whose drawing instructions expand beyond
:data:`PDF_PAGE_CONTENT_LIMIT` (a decompression bomb) are skipped with a one-line reason. pypdf's
own log lines and warnings ("EOF marker not found"…) are silenced while a file is read: that reason,
or the document, is all a user sees.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pypdf

from ragidx.read.document import EMPTY_REASON, Document, Skipped, os_reason

__all__ = ["PDF_PAGE_CONTENT_LIMIT", "pdf_documents", "read_pdf"]

PDF_PAGE_CONTENT_LIMIT = 16 << 20  # decompressed drawing instructions per PDF page
_REASON_MAX = 160


def read_pdf(path: Path, doc_id: str, source: str) -> Document | Skipped:
    """The PDF at ``path`` as one document, or why it cannot be used."""
    try:
        with _quiet_pypdf(), path.open("rb") as handle:
            return _pdf_document(pypdf.PdfReader(handle), doc_id, source)
    except OSError as exc:
        return Skipped(source, f"cannot read file: {os_reason(exc)}")
    except Exception as exc:  # pypdf raises many types on malformed input
        return Skipped(source, f"malformed PDF: {_short(exc)}")


def pdf_documents(path: Path, doc_id: str, source: str, stream_bytes: int) -> Iterator[Document | Skipped]:
    """:func:`read_pdf` as a :class:`~ragidx.read.formats.Reader` (a PDF is never streamed)."""
    yield read_pdf(path, doc_id, source)


def _pdf_document(reader: pypdf.PdfReader, doc_id: str, source: str) -> Document | Skipped:
    if reader.is_encrypted:
        try:
            ok = reader.decrypt("") != pypdf.PasswordType.NOT_DECRYPTED
        except Exception as exc:  # e.g. a missing crypto dependency
            return Skipped(source, f"encrypted PDF: cannot decrypt ({_short(exc)})")
        if not ok:
            return Skipped(source, "encrypted PDF: cannot decrypt without a password")
    for number, page in enumerate(reader.pages, start=1):
        contents = page.get_contents()
        expanded = len(contents.get_data()) if contents is not None else 0
        if expanded > PDF_PAGE_CONTENT_LIMIT:
            return Skipped(
                source,
                f"PDF page {number} expands to {expanded / 2**20:.0f} MiB of drawing instructions (limit "
                f"{PDF_PAGE_CONTENT_LIMIT >> 20} MiB): a decompression bomb or a damaged file",
            )
    pages = [page.extract_text() or "" for page in reader.pages]
    page_starts: list[int] = []
    offset = 0
    for page_text in pages:
        page_starts.append(offset)
        offset += len(page_text) + 2
    text = "\n\n".join(pages)
    if not text.strip():
        return Skipped(source, EMPTY_REASON)
    title: str | None = None
    info = reader.metadata
    if info is not None:
        raw_title = info.get("/Title")
        if raw_title is not None:
            title = " ".join(str(raw_title).split()) or None
    return Document(
        doc_id=doc_id,
        text=text,
        source=source,
        title=title,
        metadata={"format": "pdf", "pages": len(pages), "page_starts": page_starts},
    )


@contextmanager
def _quiet_pypdf() -> Iterator[None]:
    """pypdf's logger and warnings silenced; both restored afterwards."""
    logger = logging.getLogger("pypdf")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= _REASON_MAX else text[: _REASON_MAX - 3] + "..."
