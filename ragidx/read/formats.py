"""File formats: the one table from a file's suffix to the reader that turns it into documents.

:data:`FORMATS` is the only list of the formats ragidx reads. The walk (:mod:`~ragidx.read.walk`)
lists the files whose suffix is in it and hands each to its row's reader; the ingest pipeline, the
CLI's help and the probe's messages name the suffixes from it (:data:`SUPPORTED_SUFFIXES`,
:func:`suffix_list`). Adding a format is one reader module in ``ragidx/read/`` plus one row here.

A row names its reader as ``"module:function"``, imported on first use, so this module (and with
it ``ragidx --help``) loads no parser. Every reader has the signature of :class:`Reader`: it yields
the file's documents, or a :class:`~ragidx.read.document.Skipped` with a one-line reason, and never
raises on a bad file.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from ragidx.read.document import Document, Skipped

__all__ = ["FORMATS", "SUPPORTED_SUFFIXES", "Format", "Reader", "format_of", "suffix_list"]


class Reader(Protocol):
    """Turns one file into documents: ``path`` to read, ``doc_id`` for a file that gives one
    document, ``source`` (the absolute path every :class:`Skipped` names), ``stream_bytes`` (above
    this size a reader that can streams instead of holding the file)."""

    def __call__(
        self, path: Path, doc_id: str, source: str, stream_bytes: int
    ) -> Iterator[Document | Skipped]: ...


@dataclass(frozen=True)
class Format:
    """One row: ``name`` (what its documents' ``metadata["format"]`` says), ``label`` (a few words
    for help texts) and ``reader`` (``"module:function"``, a :class:`Reader`)."""

    name: str
    label: str
    reader: str

    def load(self) -> Reader:
        """The reader function (its module imported now, once)."""
        module, _, function = self.reader.partition(":")
        return cast("Reader", getattr(importlib.import_module(module), function))


FORMATS: Mapping[str, Format] = MappingProxyType(
    {
        ".txt": Format("text", "plain text", "ragidx.read.walk:read_text"),
        ".md": Format("markdown", "Markdown", "ragidx.read.walk:read_markdown"),
        ".markdown": Format("markdown", "Markdown", "ragidx.read.walk:read_markdown"),
        ".html": Format("html", "HTML", "ragidx.read.walk:read_html"),
        ".htm": Format("html", "HTML", "ragidx.read.walk:read_html"),
        ".pdf": Format("pdf", "PDF", "ragidx.read.pdf:pdf_documents"),
        ".jsonl": Format("jsonl", "BEIR-style corpus, one document a line", "ragidx.read.walk:read_jsonl"),
        ".docx": Format("docx", "Word", "ragidx.read.docx:read_docx"),
        ".epub": Format("epub", "EPUB book", "ragidx.read.epub:read_epub"),
    }
)
"""Suffix (lower case, with its dot) → :class:`Format`; suffixes are matched case-insensitively."""

SUPPORTED_SUFFIXES: tuple[str, ...] = tuple(FORMATS)


def format_of(path: str | Path) -> Format | None:
    """The row of ``path``'s suffix (any case), or None when ragidx does not read that type."""
    return FORMATS.get(Path(path).suffix.lower())


def suffix_list(separator: str = " ") -> str:
    """The supported suffixes as one string for messages and help (``.txt .md … .epub``)."""
    return separator.join(SUPPORTED_SUFFIXES)
