"""Loading: turn files on disk into :class:`Document` objects.

This is the first stage of the pipeline (load -> tokenize -> encode -> pool -> index -> retrieve).
It walks a file or folder, detects text encodings, extracts text from plain text, Markdown, HTML,
PDF and BEIR-style JSONL corpora, and reports every file (or JSONL line) it could not use as a
:class:`Skipped` entry with a one-line reason instead of raising.

Hostile input is bounded: text files larger than ``stream_bytes`` are not read into memory but
*streamed* (the :class:`Document` holds the first characters; :meth:`Document.pieces` yields the
whole text block by block); large HTML is parsed by an event-driven lxml parser that builds no tree;
a PDF page whose drawing instructions expand beyond a limit (a decompression bomb) is refused;
mostly-UTF-8 files with a few invalid bytes are read with U+FFFD replacements and a warning;
symbolic-link loops are named as such; file names that are not valid UTF-8 are kept readable
(undecodable bytes as ``\\xNN``).
"""

from __future__ import annotations

import codecs
import errno
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import charset_normalizer
import pypdf
from bs4 import BeautifulSoup
from lxml import etree

from ragidx.errors import InputError

__all__ = [
    "SUPPORTED_SUFFIXES",
    "Document",
    "Skipped",
    "decode_bytes",
    "iter_documents",
    "read_file",
]

SUPPORTED_SUFFIXES: tuple[str, ...] = (
    ".txt",
    ".md",
    ".markdown",
    ".html",
    ".htm",
    ".pdf",
    ".jsonl",
)

EMPTY_REASON = "empty document (no text after extraction)"

_TEXT_FORMATS: dict[str, str] = {".txt": "text", ".md": "markdown", ".markdown": "markdown"}
_HTML_SUFFIXES = (".html", ".htm")
# Markup that is code or page chrome, not content: dropped with everything inside it.
_HTML_DROP_TAGS = ("script", "style", "noscript", "template", "svg", "iframe", "nav")
_SNIFF_BYTES = 8192
_CONTROL_SHARE_LIMIT = 0.10
# C0 control bytes not found in ordinary text (BS, tab, LF, VT, FF, CR and ESC are allowed).
_BINARY_CONTROL_BYTES = frozenset(range(0x20)) - {0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1B}
# Longest first: the UTF-32 LE BOM starts with the UTF-16 LE BOM.
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_META_CHARSET_RE = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]+)""", re.IGNORECASE)
# HTML5 (WHATWG) decodes these labels as windows-1252.
_WINDOWS_1252_LABELS = frozenset(
    {
        "iso-8859-1",
        "iso8859-1",
        "latin1",
        "latin-1",
        "l1",
        "ascii",
        "us-ascii",
        "iso_8859-1",
        "cp819",
    }
)
_TIE_PREFERENCE = "cp1252"
_REASON_MAX = 160
STREAM_BYTES = 32 << 20  # text files larger than this are streamed, HTML parsed without a tree
STREAM_BLOCK = 1 << 20  # bytes read at a time from a streamed file
HEAD_CHARS = 65536  # characters of a streamed file kept in Document.text (titles, snippets)
PDF_PAGE_CONTENT_LIMIT = 16 << 20  # decompressed drawing instructions per PDF page
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


# --------------------------------------------------------------------------------------------
# Walking


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
    if not file.is_file():
        yield Skipped(_abs(file), "not a regular file")
        return
    yield file, _printable(name)


def _walk_dir(
    root: Path, include: tuple[str, ...], exclude: tuple[str, ...]
) -> Iterator[tuple[Path, str] | Skipped]:
    def walk(folder: Path, rel_parts: tuple[str, ...]) -> Iterator[tuple[Path, str] | Skipped]:
        try:
            with os.scandir(folder) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError as exc:
            yield Skipped(_abs(folder), f"cannot read directory: {_os_reason(exc)}")
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
            if not entry_path.is_file():
                continue
            yield entry_path, _printable(rel)

    return walk(root, ())


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
        yield _read_pdf(path, doc_id, source)
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
        data = path.read_bytes()
    except OSError as exc:
        yield Skipped(source, f"cannot read file: {_os_reason(exc)}")
        return
    declared = _html_declared_charset(data) if suffix in _HTML_SUFFIXES else None
    try:
        text, encoding, warning = _decode(data, declared)
    except ValueError as exc:
        yield Skipped(source, str(exc))
        return
    del data
    if suffix == ".jsonl":
        yield from _parse_jsonl(text, source)
        return
    if suffix in _HTML_SUFFIXES:
        item = _html_document(text, doc_id, source, encoding, large=size > stream_bytes)
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
    with path.open("rb") as handle:
        sample = handle.read(STREAM_BLOCK)
    skip, codec = 0, "utf-8"
    bom = next(((b, e) for b, e in _BOMS if sample.startswith(b)), None)
    if bom is not None:
        skip, codec = len(bom[0]), "utf-8" if bom[1] == "utf-8-sig" else bom[1]
    else:
        try:
            _check_not_binary(sample[:_SNIFF_BYTES])
            codecs.getincrementaldecoder("utf-8")().decode(sample, final=False)
        except ValueError as exc:
            if not isinstance(exc, UnicodeDecodeError):
                return Skipped(source, str(exc))
            best = _detect(sample)
            if best is None:
                return Skipped(source, "unknown text encoding: convert the file to UTF-8")
            codec = best.encoding

    def stream() -> Iterator[str]:
        decoder = codecs.getincrementaldecoder(codec)(errors="replace")
        carry = ""
        with path.open("rb") as handle:
            handle.seek(skip)
            while block := handle.read(STREAM_BLOCK):
                text = carry + decoder.decode(block)
                text, carry = (text[:-1], "\r") if text.endswith("\r") else (text, "")
                yield text.replace("\r\n", "\n")
        yield carry + decoder.decode(b"", final=True)

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


# --------------------------------------------------------------------------------------------
# Encoding


def decode_bytes(data: bytes, *, declared: str | None = None) -> tuple[str, str]:
    """Decode file bytes to text; return ``(text, encoding name)``.

    Order: a byte-order mark (UTF-8, UTF-16, UTF-32); a binary check (a NUL byte or a high share
    of control bytes in the first 8 KiB raises ``ValueError("binary file ...")``); strict UTF-8;
    the ``declared`` encoding (e.g. an HTML ``<meta charset>``) if it decodes strictly;
    ``charset_normalizer`` detection. Raises ``ValueError`` when no encoding fits. The text has
    any leading BOM removed and ``\\r\\n`` turned into ``\\n``. Text that is mostly UTF-8 with a few
    invalid bytes (mixed encodings) decodes as UTF-8 with U+FFFD in their place.
    """
    text, encoding, _ = _decode(data, declared)
    return text, encoding


def _decode(data: bytes, declared: str | None) -> tuple[str, str, str | None]:
    """:func:`decode_bytes`, plus a warning when bytes had to be replaced."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            codec = "utf-8" if encoding == "utf-8-sig" else encoding
            return _normalise(data[len(bom) :].decode(codec, errors="replace")), encoding, None
    _check_not_binary(data[:_SNIFF_BYTES])
    try:
        return _normalise(data.decode("utf-8")), "utf-8", None
    except UnicodeDecodeError:
        pass
    if declared:
        codec = _lookup_codec(declared)
        if codec is not None:
            try:
                return _normalise(data.decode(codec)), codec, None
            except UnicodeDecodeError:
                pass
    repaired = _mostly_utf8(data)
    if repaired is not None:
        text, bad = repaired
        return _normalise(text), "utf-8", f"{bad} invalid UTF-8 byte sequences replaced with U+FFFD"
    best = _detect(data)
    if best is None:
        raise ValueError(
            "unknown text encoding: not UTF-8 and no other encoding fits; convert the file to UTF-8"
        )
    return _normalise(str(best)), best.encoding, None


def _mostly_utf8(data: bytes) -> tuple[str, int] | None:
    """UTF-8 with replacements, when valid multi-byte UTF-8 characters outnumber invalid bytes
    (a UTF-8 file with a few pasted cp1252 bytes); None for text in another encoding."""
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - data.count("\ufffd".encode())
    valid = sum(1 for ch in text if ord(ch) > 0x7F) - text.count("\ufffd")
    return (text, bad) if 0 < bad <= valid else None


def _detect(data: bytes) -> charset_normalizer.CharsetMatch | None:
    """``charset_normalizer``'s best match; on an exact tie, prefer windows-1252.

    Markup-heavy Western text often scores the same under cp1250, cp1252 and cp1257; like the
    WHATWG default for Western locales, take cp1252 then.
    """
    matches = charset_normalizer.from_bytes(data)
    best = matches.best()
    if best is None or best.encoding == _TIE_PREFERENCE:
        return best
    for match in matches:
        if (match.chaos, match.coherence) != (best.chaos, best.coherence):
            break
        if match.encoding == _TIE_PREFERENCE:
            return match
    return best


def _check_not_binary(sample: bytes) -> None:
    if b"\x00" in sample:
        raise ValueError("binary file (NUL bytes): not text")
    if sample:
        controls = sum(1 for byte in sample if byte in _BINARY_CONTROL_BYTES)
        if controls / len(sample) > _CONTROL_SHARE_LIMIT:
            raise ValueError("binary file (control characters): not text")


def _normalise(text: str) -> str:
    return text.removeprefix("\ufeff").replace("\r\n", "\n")


def _lookup_codec(label: str) -> str | None:
    label = label.strip().lower()
    if label in _WINDOWS_1252_LABELS:
        label = "cp1252"
    try:
        return codecs.lookup(label).name
    except LookupError:
        return None


def _html_declared_charset(data: bytes) -> str | None:
    match = _META_CHARSET_RE.search(data[:4096])
    return match.group(1).decode("ascii") if match else None


# --------------------------------------------------------------------------------------------
# HTML


def _html_document(
    text: str, doc_id: str, source: str, encoding: str, large: bool = False
) -> Document | Skipped:
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
    parser = etree.HTMLParser(target=target, recover=True, huge_tree=True)
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


# --------------------------------------------------------------------------------------------
# PDF


def _read_pdf(path: Path, doc_id: str, source: str) -> Document | Skipped:
    try:
        with path.open("rb") as handle:
            return _pdf_document(pypdf.PdfReader(handle), doc_id, source)
    except OSError as exc:
        return Skipped(source, f"cannot read file: {_os_reason(exc)}")
    except Exception as exc:  # pypdf raises many types on malformed input
        return Skipped(source, f"malformed PDF: {_short(exc)}")


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


# --------------------------------------------------------------------------------------------
# JSONL (BEIR corpus form)


def _parse_jsonl(text: str, source: str) -> Iterator[Document | Skipped]:
    first_line: dict[str, int] = {}
    any_record = False
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        any_record = True
        where = f"{source}:{lineno}"
        result = _jsonl_record(line, lineno, source)
        if isinstance(result, str):
            yield Skipped(where, result)
            continue
        if result.doc_id in first_line:
            yield Skipped(
                where,
                f"duplicate id {result.doc_id!r} (first on line {first_line[result.doc_id]}); kept the first",
            )
            continue
        first_line[result.doc_id] = lineno
        yield result
    if not any_record:
        yield Skipped(source, EMPTY_REASON)


def _jsonl_record(line: str, lineno: int, source: str) -> Document | str:
    """One JSONL line as a Document, or a short reason why it is unusable."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        return f"invalid JSON: {exc.msg} (column {exc.colno})"
    if not isinstance(record, dict):
        return f"expected a JSON object, got {type(record).__name__}"
    id_key = "_id" if "_id" in record else "id" if "id" in record else None
    if id_key is None:
        return 'missing "_id" (or "id") field'
    raw_id = record[id_key]
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)) or raw_id == "":
        return f'"{id_key}" must be a non-empty string or integer, got {json.dumps(raw_id)}'
    if "text" not in record:
        return 'missing "text" field'
    body = record["text"]
    if not isinstance(body, str):
        return f'"text" must be a string, got {type(body).__name__}'
    raw_title = record.get("title")
    if raw_title is not None and not isinstance(raw_title, str):
        return f'"title" must be a string, got {type(raw_title).__name__}'
    title = raw_title.strip() if raw_title else ""
    full = f"{title} {body}".strip() if title else body.strip()
    if not full:
        return EMPTY_REASON
    metadata = {k: v for k, v in record.items() if k not in (id_key, "title", "text")}
    metadata.update({"format": "jsonl", "line": lineno})
    return Document(doc_id=str(raw_id), text=full, source=source, title=title or None, metadata=metadata)


# --------------------------------------------------------------------------------------------
# Small shared helpers


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


def _os_reason(exc: OSError) -> str:
    reason = exc.strerror or str(exc) or type(exc).__name__
    if isinstance(exc, PermissionError):
        reason += " (check the file's permissions)"
    return reason


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= _REASON_MAX else text[: _REASON_MAX - 3] + "..."
