"""Stage 1, read: files on disk → :class:`~ragidx.read.document.Document` objects.

Walks files and folders, detects text encodings, extracts text from every format in the table of
:mod:`~ragidx.read.formats`, streams large files, and reports every file it cannot use as a
``Skipped`` entry with a one-line reason. Imports nothing from the later stages. One module per concept:

- :mod:`~ragidx.read.formats`: the one table of formats, suffix → reader (``FORMATS``,
  ``SUPPORTED_SUFFIXES``; light: readers are imported on first use);
- :mod:`~ragidx.read.document`: ``Document``, ``Skipped``, streaming limits (light: no parser is
  imported);
- :mod:`~ragidx.read.walk`: walking folders, include/exclude globs, dispatch through the table,
  the readers of decoded text (text, Markdown, HTML, JSONL) and streaming of large files
  (``iter_documents``, ``list_files``, ``read_documents``, ``read_file``);
- :mod:`~ragidx.read.text`: text encodings (byte-order marks, binary check, detection);
- :mod:`~ragidx.read.html`: HTML text and title (a tree parser, and an event parser for large pages);
- :mod:`~ragidx.read.pdf`: PDF text per page, with a limit against decompression bombs;
- :mod:`~ragidx.read.jsonl`: BEIR-style JSONL corpora, one document per line;
- :mod:`~ragidx.read.docx`: Word documents, paragraphs and tables in order;
- :mod:`~ragidx.read.epub`: EPUB books, chapters in reading order;
- :mod:`~ragidx.read.container`: the ZIP containers of Word and EPUB files, bounded against bombs.

The public names are importable from here too, lazily: ``import ragidx.read`` loads no parser.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "Document": "ragidx.read.document",
    "Skipped": "ragidx.read.document",
    "STREAM_BYTES": "ragidx.read.document",
    "FORMATS": "ragidx.read.formats",
    "SUPPORTED_SUFFIXES": "ragidx.read.formats",
    "decode_bytes": "ragidx.read.text",
    "iter_documents": "ragidx.read.walk",
    "list_files": "ragidx.read.walk",
    "read_documents": "ragidx.read.walk",
    "read_file": "ragidx.read.walk",
}
__all__ = list(_EXPORTS)

if TYPE_CHECKING:
    from ragidx.read.document import STREAM_BYTES as STREAM_BYTES
    from ragidx.read.document import Document as Document
    from ragidx.read.document import Skipped as Skipped
    from ragidx.read.formats import FORMATS as FORMATS
    from ragidx.read.formats import SUPPORTED_SUFFIXES as SUPPORTED_SUFFIXES
    from ragidx.read.text import decode_bytes as decode_bytes
    from ragidx.read.walk import iter_documents as iter_documents
    from ragidx.read.walk import list_files as list_files
    from ragidx.read.walk import read_documents as read_documents
    from ragidx.read.walk import read_file as read_file


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ragidx.read' has no attribute {name!r}")
