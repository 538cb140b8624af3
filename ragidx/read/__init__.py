"""Stage 1, read: files on disk → :class:`~ragidx.read.document.Document` objects.

Walks files and folders, detects text encodings, extracts text from plain text, Markdown, HTML,
PDF and JSONL, streams large files, and reports every file it cannot use as a ``Skipped`` entry
with a one-line reason. Imports nothing from the later stages. One module per concept:

- :mod:`~ragidx.read.document`: ``Document``, ``Skipped``, the supported suffixes and streaming
  limits (light: no parser is imported);
- :mod:`~ragidx.read.walk`: walking folders, include/exclude globs, dispatch by file type,
  streaming of large text files (``iter_documents``, ``list_files``, ``read_documents``,
  ``read_file``);
- :mod:`~ragidx.read.text`: text encodings (byte-order marks, binary check, detection);
- :mod:`~ragidx.read.html`: HTML text and title (a tree parser, and an event parser for large pages);
- :mod:`~ragidx.read.pdf`: PDF text per page, with a limit against decompression bombs;
- :mod:`~ragidx.read.jsonl`: BEIR-style JSONL corpora, one document per line.

The public names are importable from here too, lazily: ``import ragidx.read`` loads no parser.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "Document": "ragidx.read.document",
    "Skipped": "ragidx.read.document",
    "STREAM_BYTES": "ragidx.read.document",
    "SUPPORTED_SUFFIXES": "ragidx.read.document",
    "decode_bytes": "ragidx.read.text",
    "iter_documents": "ragidx.read.walk",
    "list_files": "ragidx.read.walk",
    "read_documents": "ragidx.read.walk",
    "read_file": "ragidx.read.walk",
}
__all__ = list(_EXPORTS)

if TYPE_CHECKING:
    from ragidx.read.document import STREAM_BYTES as STREAM_BYTES
    from ragidx.read.document import SUPPORTED_SUFFIXES as SUPPORTED_SUFFIXES
    from ragidx.read.document import Document as Document
    from ragidx.read.document import Skipped as Skipped
    from ragidx.read.text import decode_bytes as decode_bytes
    from ragidx.read.walk import iter_documents as iter_documents
    from ragidx.read.walk import list_files as list_files
    from ragidx.read.walk import read_documents as read_documents
    from ragidx.read.walk import read_file as read_file


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ragidx.read' has no attribute {name!r}")
