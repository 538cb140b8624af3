"""Walking: files and folders on disk to :class:`~ragidx.read.document.Document` objects.

This is the entry point of the read stage (the first of load -> tokenize -> encode -> pool -> index
-> retrieve). It walks a file or folder (sorted, hidden entries and symlinked folders left out,
``include``/``exclude`` globs applied), sends each file to the reader of its type (text and
Markdown here, :mod:`~ragidx.read.html`, :mod:`~ragidx.read.pdf`, :mod:`~ragidx.read.jsonl`), and
reports every file (or JSONL line) it could not use as a :class:`Skipped` entry with a one-line
reason instead of raising.

Hostile input is bounded: text files larger than ``stream_bytes`` are not read into memory but
*streamed* (the :class:`Document` holds the first characters; :meth:`Document.pieces` yields the
whole text block by block), and JSONL files larger than it are read line by line; FIFOs, sockets
and devices are never opened; symbolic-link loops are named as such; file names that are not valid
UTF-8 are kept readable (undecodable bytes as ``\\xNN``). The old ``ragidx.documents`` path names
this module, so it also offers the names that module exported.
"""

from __future__ import annotations

import codecs
import errno
import os
from collections.abc import Iterator, Sequence
from fnmatch import fnmatch
from pathlib import Path

from ragidx.errors import InputError
from ragidx.read.document import (
    EMPTY_REASON,
    HEAD_CHARS,
    STREAM_BLOCK,
    STREAM_BYTES,
    SUPPORTED_SUFFIXES,
    Document,
    Skipped,
    control_character,
    os_reason,
)
from ragidx.read.html import declared_charset, html_document
from ragidx.read.jsonl import parse_jsonl
from ragidx.read.pdf import read_pdf
from ragidx.read.text import decode_bytes, decode_with_warning, stream_encoding

__all__ = [
    "SUPPORTED_SUFFIXES",
    "Document",
    "Skipped",
    "decode_bytes",
    "iter_documents",
    "list_files",
    "read_documents",
    "read_file",
]

_TEXT_FORMATS: dict[str, str] = {".txt": "text", ".md": "markdown", ".markdown": "markdown"}
_NOT_REGULAR = "not a regular file (a FIFO, socket or device): not read"
_HTML_SUFFIXES = (".html", ".htm")


def iter_documents(
    path: str | Path,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    stream_bytes: int = STREAM_BYTES,
) -> Iterator[Document | Skipped]:
    """Yield the documents under ``path`` (a file or a folder), and a :class:`Skipped` per failure.

    Folders are walked recursively in sorted order; hidden entries (names starting with ".") and
    symlinked directories are not entered; only files with a suffix in :data:`SUPPORTED_SUFFIXES`
    are read. ``include``/``exclude`` are :mod:`fnmatch` patterns tested against both the relative
    POSIX path and the file name; filtered files are dropped silently. A folder whose relative path
    or name matches an ``exclude`` pattern is not entered. Text files above ``stream_bytes`` are
    streamed (see the module docstring).

    Raises :class:`InputError` at call time when ``path`` does not exist.
    """
    files = list_files(path, include, exclude)
    return _read_listed(files, stream_bytes)


def _read_listed(
    files: Iterator[tuple[Path, str] | Skipped], stream_bytes: int
) -> Iterator[Document | Skipped]:
    for item in files:
        if isinstance(item, Skipped):
            yield item
        else:
            yield from read_documents(*item, stream_bytes)


def list_files(
    path: str | Path, include: Sequence[str] = (), exclude: Sequence[str] = ()
) -> Iterator[tuple[Path, str] | Skipped]:
    """The files :func:`iter_documents` reads under ``path``, in its order, as ``(file, doc_id)``,
    with a :class:`Skipped` where a directory or link cannot be used. Reads no file contents:
    a distributed ingest lists on the driver and reads with :func:`read_documents` in workers.

    Raises :class:`InputError` at call time when ``path`` does not exist.
    """
    root = Path(path)
    if not root.exists():
        raise InputError(f"{path}: no such file or directory")
    include = tuple(include)
    exclude = tuple(exclude)
    if root.is_dir():
        return _walk_dir(root, include, exclude)
    return _single_file(root, include, exclude)


def read_documents(file: Path, doc_id: str, stream_bytes: int = STREAM_BYTES) -> Iterator[Document | Skipped]:
    """The documents of one listed file (see :func:`list_files`), and a :class:`Skipped` per failure."""
    return _iter_file(file, doc_id, stream_bytes)


def _single_file(
    file: Path, include: tuple[str, ...], exclude: tuple[str, ...]
) -> Iterator[tuple[Path, str] | Skipped]:
    name = file.name
    if not _selected(name, name, include, exclude):
        return
    yield _listed(file, _printable(name))


def _walk_dir(
    root: Path, include: tuple[str, ...], exclude: tuple[str, ...]
) -> Iterator[tuple[Path, str] | Skipped]:
    def walk(folder: Path, rel_parts: tuple[str, ...]) -> Iterator[tuple[Path, str] | Skipped]:
        try:
            with os.scandir(folder) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError as exc:
            yield Skipped(_abs(folder), f"cannot read directory: {os_reason(exc)}")
            return
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue
            rel = "/".join((*rel_parts, name))
            entry_path = Path(entry.path)
            try:
                is_link = entry.is_symlink()
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if not any(fnmatch(rel, p) or fnmatch(name, p) for p in exclude):
                    yield from walk(entry_path, (*rel_parts, name))
                continue
            if Path(name).suffix.lower() not in SUPPORTED_SUFFIXES:
                continue
            if not _selected(rel, name, include, exclude):
                continue
            if is_link and entry_path.is_dir():
                continue  # symlinked directory with a document-like name: never followed
            if is_link and not entry_path.exists():
                yield Skipped(_abs(entry_path), _link_problem(entry_path))
                continue
            yield _listed(entry_path, _printable(rel))

    return walk(root, ())


def _listed(file: Path, doc_id: str) -> tuple[Path, str] | Skipped:
    """``(file, doc_id)``, or why the file is not read: not a regular file (a FIFO would block),
    or a name with a control character (see :func:`~ragidx.read.document.control_character`)."""
    if not file.is_file():
        return Skipped(_abs(file), _NOT_REGULAR)
    control = control_character(doc_id)
    if control is not None:
        return Skipped(
            _abs(file),
            f"file name has a control character ({control}), which would break every line that shows "
            "its document id: rename the file",
        )
    return file, doc_id


def _selected(rel: str, name: str, include: tuple[str, ...], exclude: tuple[str, ...]) -> bool:
    def matches(pattern: str) -> bool:
        return fnmatch(rel, pattern) or fnmatch(name, pattern)

    if include and not any(matches(p) for p in include):
        return False
    return not any(matches(p) for p in exclude)


# --------------------------------------------------------------------------------------------
# Reading one file


def read_file(path: Path, doc_id: str) -> list[Document] | Skipped:
    """Read one file as documents, or say why it cannot be used.

    Text, Markdown, HTML and PDF files give one document with ``doc_id``; a JSONL file gives one
    document per good record (ids come from the records, ``doc_id`` is unused). Bad JSONL lines
    are left out here; :func:`iter_documents` reports them as :class:`Skipped`.
    """
    items = list(_iter_file(Path(path), doc_id, STREAM_BYTES))
    docs = [item for item in items if isinstance(item, Document)]
    if not docs and len(items) == 1:
        only = items[0]
        if isinstance(only, Skipped) and only.source == _abs(Path(path)):
            return only  # a whole-file failure (not a bad JSONL line)
    return docs


def _iter_file(path: Path, doc_id: str, stream_bytes: int) -> Iterator[Document | Skipped]:
    """Documents of one file, plus Skipped entries in file order (one for a whole-file failure)."""
    source = _abs(path)
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        yield read_pdf(path, doc_id, source)
        return
    if suffix not in SUPPORTED_SUFFIXES:
        yield Skipped(
            source,
            f"unsupported file type {suffix or '(no suffix)'!r}: "
            f"supported types are {', '.join(SUPPORTED_SUFFIXES)}",
        )
        return
    try:
        size = path.stat().st_size
        if suffix in _TEXT_FORMATS and size > stream_bytes:
            yield _streamed_text(path, doc_id, source, _TEXT_FORMATS[suffix], size)
            return
        if suffix == ".jsonl" and size > stream_bytes:
            yield from _streamed_jsonl(path, source)
            return
        data = path.read_bytes()
    except OSError as exc:
        yield Skipped(source, f"cannot read file: {os_reason(exc)}")
        return
    declared = declared_charset(data) if suffix in _HTML_SUFFIXES else None
    try:
        text, encoding, warning = decode_with_warning(data, declared)
    except ValueError as exc:
        yield Skipped(source, str(exc))
        return
    del data
    if suffix == ".jsonl":
        yield from parse_jsonl(text.split("\n"), source)
        return
    if suffix in _HTML_SUFFIXES:
        item = html_document(text, doc_id, source, encoding, large=size > stream_bytes)
    elif not text.strip():
        item = Skipped(source, EMPTY_REASON)
    else:
        meta = {"format": _TEXT_FORMATS[suffix], "encoding": encoding}
        item = Document(doc_id=doc_id, text=text, source=source, metadata=meta)
    if warning and isinstance(item, Document):
        item.metadata["warning"] = warning
    yield item


def _streamed_text(path: Path, doc_id: str, source: str, kind: str, size: int) -> Document | Skipped:
    """A text file too large to hold: its encoding is settled on the first block, then it is
    decoded block by block whenever :meth:`Document.pieces` is read."""
    encoding = _stream_encoding(path, source)
    if isinstance(encoding, Skipped):
        return encoding
    skip, codec = encoding

    def stream() -> Iterator[str]:
        return _decoded_blocks(path, skip, codec)

    head: list[str] = []
    kept = 0
    blank = True
    for piece in stream():
        if kept < HEAD_CHARS:
            head.append(piece[: HEAD_CHARS - kept])
            kept += len(head[-1])
        blank = blank and not piece.strip()
        if kept >= HEAD_CHARS and not blank:
            break
    if blank:
        return Skipped(source, EMPTY_REASON)
    meta = {"format": kind, "encoding": codec, "streamed": True, "bytes": size}
    return Document(doc_id=doc_id, text="".join(head), source=source, metadata=meta, stream=stream)


def _streamed_jsonl(path: Path, source: str) -> Iterator[Document | Skipped]:
    """A JSONL file too large to hold, read line by line (memory: its longest line)."""
    encoding = _stream_encoding(path, source)
    if isinstance(encoding, Skipped):
        yield encoding
        return
    yield from parse_jsonl(_lines(_decoded_blocks(path, *encoding)), source)


def _stream_encoding(path: Path, source: str) -> tuple[int, str] | Skipped:
    """``(bytes to skip, codec)`` of a file too large to hold, settled on its first block."""
    with path.open("rb") as handle:
        sample = handle.read(STREAM_BLOCK)
    try:
        return stream_encoding(sample)
    except ValueError as exc:
        return Skipped(source, str(exc))


def _decoded_blocks(path: Path, skip: int, codec: str) -> Iterator[str]:
    """The file's text block by block (invalid bytes replaced, ``\\r\\n`` as ``\\n``)."""
    decoder = codecs.getincrementaldecoder(codec)(errors="replace")
    carry = ""
    with path.open("rb") as handle:
        handle.seek(skip)
        while block := handle.read(STREAM_BLOCK):
            text = carry + decoder.decode(block)
            text, carry = (text[:-1], "\r") if text.endswith("\r") else (text, "")
            yield text.replace("\r\n", "\n")
    yield carry + decoder.decode(b"", final=True)


def _lines(blocks: Iterator[str]) -> Iterator[str]:
    """Text given in blocks, line by line (without the newline)."""
    parts: list[str] = []
    for block in blocks:
        *done, rest = block.split("\n")
        if done:
            yield "".join([*parts, done[0]])
            yield from done[1:]
            parts = []
        parts.append(rest)
    yield "".join(parts)


# --------------------------------------------------------------------------------------------
# File names


def _abs(path: Path) -> str:
    # abspath, not resolve(): keep the name the user sees (symlinks are not resolved).
    return _printable(os.path.abspath(path))


def _printable(name: str) -> str:
    """A file name as valid UTF-8: bytes that did not decode (surrogate escapes) become ``\\xNN``."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _link_problem(path: Path) -> str:
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop: the link points (through others) back to itself"
    return "broken symbolic link: its target does not exist"
