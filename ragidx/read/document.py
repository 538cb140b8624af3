"""What the read stage produces: :class:`Document` (one retrievable unit of text) and
:class:`Skipped` (a file, or a JSONL line, that gave no document, and why).

It also holds what every reader shares: the streaming limits (:data:`STREAM_BYTES`,
:data:`STREAM_BLOCK`, :data:`HEAD_CHARS`), the wording of common skip reasons, and the check that
refuses ids with control characters (:func:`control_character`: a newline in an id would break
every line that shows it); :data:`SUPPORTED_SUFFIXES` is :mod:`ragidx.read.formats`' table's,
named here for older imports. It imports no parser or charset detector: :mod:`ragidx.config` reads
:data:`STREAM_BYTES` from here, and ``ragidx --help`` must start fast.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ragidx.read.formats import SUPPORTED_SUFFIXES  # the table of formats is ragidx.read.formats

__all__ = [
    "EMPTY_REASON",
    "HEAD_CHARS",
    "STREAM_BLOCK",
    "STREAM_BYTES",
    "SUPPORTED_SUFFIXES",
    "Document",
    "Skipped",
    "control_character",
    "os_reason",
]


EMPTY_REASON = "empty document (no text after extraction)"
STREAM_BYTES = 32 << 20  # text files larger than this are streamed, HTML parsed without a tree
STREAM_BLOCK = 1 << 20  # bytes read at a time from a streamed file
HEAD_CHARS = 65536  # characters of a streamed file kept in Document.text (titles, snippets)
# C0 and C1 controls, DEL, and the Unicode line and paragraph separators
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


@dataclass(frozen=True)
class Document:
    """One retrievable unit of text.

    ``doc_id`` is the path relative to the ingest root in POSIX form (a file given directly: its
    file name; a JSONL record: its ``_id``/``id``). ``source`` is the file's absolute path.
    ``metadata`` holds JSON-serialisable values only; ``metadata["warning"]``, when present, says
    what was repaired (e.g. invalid bytes replaced). Streamed files have ``metadata["streamed"]``.
    """

    doc_id: str
    text: str
    source: str
    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # A streamed file: ``text`` is its first HEAD_CHARS characters and this yields all of it.
    stream: Callable[[], Iterator[str]] | None = field(default=None, repr=False, compare=False)

    def pieces(self) -> Iterator[str]:
        """The whole text, in order: ``text`` itself, or a streamed file's decoded blocks."""
        if self.stream is None:
            yield self.text
        else:
            yield from self.stream()


@dataclass(frozen=True)
class Skipped:
    """A file (or ``path:LINE`` of a JSONL file) that produced no document, and why."""

    source: str
    reason: str


def control_character(text: str) -> str | None:
    """The first control character in ``text`` (a newline, a tab…) as Python writes it
    (``'\\n'``), or None. Document ids holding one are refused: tables, TREC runs and warnings
    show one id per line."""
    match = _CONTROL.search(text)
    return repr(match.group()) if match else None


def os_reason(exc: OSError) -> str:
    """Why a file or folder could not be read, in a few words (with a hint for permissions)."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if isinstance(exc, PermissionError):
        reason += " (check the file's permissions)"
    return reason
