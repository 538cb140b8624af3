"""Walking: files and folders on disk to :class:`~ragidx.read.document.Document` objects.

This is the entry point of the read stage (the first of load -> tokenize -> encode -> pool -> index
-> retrieve). It walks a file or folder (sorted, hidden entries and symlinked folders left out,
``include``/``exclude`` globs applied), sends each file to the reader its suffix has in
:data:`~ragidx.read.formats.FORMATS` (the one table of formats), and reports every file (or JSONL
line) it could not use as a :class:`Skipped` entry with a one-line reason instead of raising. The
readers of decoded text live here, as they share the streaming of large files: text and Markdown
(:func:`read_text`, :func:`read_markdown`), HTML (:func:`read_html`, parsed by
:mod:`~ragidx.read.html`) and JSONL (:func:`read_jsonl`, parsed by :mod:`~ragidx.read.jsonl`).

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
    Document,
    Skipped,
    control_character,
    os_reason,
)
from ragidx.read.formats import SUPPORTED_SUFFIXES, format_of, suffix_list
from ragidx.read.html import declared_charset, html_document
from ragidx.read.jsonl import parse_jsonl
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
    "read_html",
    "read_jsonl",
    "read_markdown",
    "read_text",
]

_NOT_REGULAR = "not a regular file (a FIFO, socket or device): not read"


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
            if format_of(name) is None:
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

    A file gives one document with ``doc_id``, except a JSONL file: one document per good record
    (ids come from the records, ``doc_id`` is unused). Bad JSONL lines are left out here;
    :func:`iter_documents` reports them as :class:`Skipped`.
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
    found = format_of(path)
    if found is None:
        suffix = path.suffix.lower()
        yield Skipped(
            source,
            f"unsupported file type {suffix or '(no suffix)'!r}: supported types are {suffix_list(', ')}",
        )
        return
    yield from found.load()(path, doc_id, source, stream_bytes)


def read_text(path: Path, doc_id: str, source: str, stream_bytes: int) -> Iterator[Document | Skipped]:
    """A plain text file as one document (streamed above ``stream_bytes``)."""
    return _read_text(path, doc_id, source, stream_bytes, "text")


def read_markdown(path: Path, doc_id: str, source: str, stream_bytes: int) -> Iterator[Document | Skipped]:
    """A Markdown file as one document, its markup kept (streamed above ``stream_bytes``)."""
    return _read_text(path, doc_id, source, stream_bytes, "markdown")


def read_html(path: Path, doc_id: str, source: str, stream_bytes: int) -> Iterator[Document | Skipped]:
    """An HTML page as one document: its title and readable text (without a tree above
    ``stream_bytes``; its ``<meta charset>`` decides the encoding where it has one)."""
    decoded = _decoded(path, source, html=True)
    if isinstance(decoded, Skipped):
        yield decoded
        return
    text, encoding, warning, size = decoded
    item = html_document(text, doc_id, source, encoding, large=size > stream_bytes)
    if warning and isinstance(item, Document):
        item.metadata["warning"] = warning
    yield item


def read_jsonl(path: Path, doc_id: str, source: str, stream_bytes: int) -> Iterator[Document | Skipped]:
    """A BEIR-style JSONL corpus: one document per good line and a :class:`Skipped` per bad one
    (read line by line above ``stream_bytes``; ``doc_id`` is unused: ids come from the records)."""
    try:
        large = path.stat().st_size > stream_bytes
    except OSError as exc:
        yield Skipped(source, f"cannot read file: {os_reason(exc)}")
        return
    if large:
        yield from _streamed_jsonl(path, source)
        return
    decoded = _decoded(path, source)
    if isinstance(decoded, Skipped):
        yield decoded
        return
    yield from parse_jsonl(decoded[0].split("\n"), source)


def _read_text(
    path: Path, doc_id: str, source: str, stream_bytes: int, kind: str
) -> Iterator[Document | Skipped]:
    try:
        size = path.stat().st_size
    except OSError as exc:
        yield Skipped(source, f"cannot read file: {os_reason(exc)}")
        return
    if size > stream_bytes:
        yield _streamed_text(path, doc_id, source, kind, size)
        return
    decoded = _decoded(path, source)
    if isinstance(decoded, Skipped):
        yield decoded
        return
    text, encoding, warning, _ = decoded
    if not text.strip():
        yield Skipped(source, EMPTY_REASON)
        return
    meta = {"format": kind, "encoding": encoding}
    if warning:
        meta["warning"] = warning
    yield Document(doc_id=doc_id, text=text, source=source, metadata=meta)


def _decoded(path: Path, source: str, html: bool = False) -> tuple[str, str, str | None, int] | Skipped:
    """A whole file's text, encoding, repair warning and size in bytes, or why it has none
    (``html``: a ``<meta charset>`` in its first 4 KiB decides the encoding)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return Skipped(source, f"cannot read file: {os_reason(exc)}")
    declared = declared_charset(data) if html else None
    try:
        text, encoding, warning = decode_with_warning(data, declared)
    except ValueError as exc:
        return Skipped(source, str(exc))
    return text, encoding, warning, len(data)


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
