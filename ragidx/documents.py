"""Loading: turn files on disk into :class:`Document` objects.

This is the first stage of the pipeline (load -> tokenize -> encode -> pool -> index -> retrieve).
It walks a file or folder, detects text encodings, extracts text from plain text, Markdown, HTML,
PDF and BEIR-style JSONL corpora, and reports every file (or JSONL line) it could not use as a
:class:`Skipped` entry with a one-line reason instead of raising.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import charset_normalizer
import pypdf
from bs4 import BeautifulSoup

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


@dataclass(frozen=True)
class Document:
    """One retrievable unit of text.

    ``doc_id`` is the path relative to the ingest root in POSIX form (a file given directly: its
    file name; a JSONL record: its ``_id``/``id``). ``source`` is the file's absolute path.
    ``metadata`` holds JSON-serialisable values only.
    """

    doc_id: str
    text: str
    source: str
    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Skipped:
    """A file (or ``path:LINE`` of a JSONL file) that produced no document, and why."""

    source: str
    reason: str


# --------------------------------------------------------------------------------------------
# Walking


def iter_documents(
    path: str | Path, include: Sequence[str] = (), exclude: Sequence[str] = ()
) -> Iterator[Document | Skipped]:
    """Yield the documents under ``path`` (a file or a folder), and a :class:`Skipped` per failure.

    Folders are walked recursively in sorted order; hidden entries (names starting with ".") and
    symlinked directories are not entered; only files with a suffix in :data:`SUPPORTED_SUFFIXES`
    are read. ``include``/``exclude`` are :mod:`fnmatch` patterns tested against both the relative
    POSIX path and the file name; filtered files are dropped silently. A folder whose relative path
    or name matches an ``exclude`` pattern is not entered.

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


def _single_file(
    file: Path, include: tuple[str, ...], exclude: tuple[str, ...]
) -> Iterator[Document | Skipped]:
    name = file.name
    if not _selected(name, name, include, exclude):
        return
    if not file.is_file():
        yield Skipped(_abs(file), "not a regular file")
        return
    yield from _iter_file(file, name)


def _walk_dir(root: Path, include: tuple[str, ...], exclude: tuple[str, ...]) -> Iterator[Document | Skipped]:
    def walk(folder: Path, rel_parts: tuple[str, ...]) -> Iterator[Document | Skipped]:
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
                yield Skipped(_abs(entry_path), "broken symbolic link: its target does not exist")
                continue
            if not entry_path.is_file():
                continue
            yield from _iter_file(entry_path, rel)

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
    items = list(_iter_file(Path(path), doc_id))
    docs = [item for item in items if isinstance(item, Document)]
    if not docs and len(items) == 1:
        only = items[0]
        if isinstance(only, Skipped) and only.source == _abs(Path(path)):
            return only  # a whole-file failure (not a bad JSONL line)
    return docs


def _iter_file(path: Path, doc_id: str) -> Iterator[Document | Skipped]:
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
        data = path.read_bytes()
    except OSError as exc:
        yield Skipped(source, f"cannot read file: {_os_reason(exc)}")
        return
    declared = _html_declared_charset(data) if suffix in _HTML_SUFFIXES else None
    try:
        text, encoding = decode_bytes(data, declared=declared)
    except ValueError as exc:
        yield Skipped(source, str(exc))
        return
    del data
    if suffix == ".jsonl":
        yield from _parse_jsonl(text, source)
    elif suffix in _HTML_SUFFIXES:
        yield _html_document(text, doc_id, source, encoding)
    else:
        if not text.strip():
            yield Skipped(source, EMPTY_REASON)
            return
        meta = {"format": _TEXT_FORMATS[suffix], "encoding": encoding}
        yield Document(doc_id=doc_id, text=text, source=source, metadata=meta)


# --------------------------------------------------------------------------------------------
# Encoding


def decode_bytes(data: bytes, *, declared: str | None = None) -> tuple[str, str]:
    """Decode file bytes to text; return ``(text, encoding name)``.

    Order: a byte-order mark (UTF-8, UTF-16, UTF-32); a binary check (a NUL byte or a high share
    of control bytes in the first 8 KiB raises ``ValueError("binary file ...")``); strict UTF-8;
    the ``declared`` encoding (e.g. an HTML ``<meta charset>``) if it decodes strictly;
    ``charset_normalizer`` detection. Raises ``ValueError`` when no encoding fits. The text has
    any leading BOM removed and ``\\r\\n`` turned into ``\\n``.
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            codec = "utf-8" if encoding == "utf-8-sig" else encoding
            return _normalise(data[len(bom) :].decode(codec, errors="replace")), encoding
    _check_not_binary(data[:_SNIFF_BYTES])
    try:
        return _normalise(data.decode("utf-8")), "utf-8"
    except UnicodeDecodeError:
        pass
    if declared:
        codec = _lookup_codec(declared)
        if codec is not None:
            try:
                return _normalise(data.decode(codec)), codec
            except UnicodeDecodeError:
                pass
    best = _detect(data)
    if best is None:
        raise ValueError(
            "unknown text encoding: not UTF-8 and no other encoding fits; convert the file to UTF-8"
        )
    return _normalise(str(best)), best.encoding


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


def _html_document(text: str, doc_id: str, source: str, encoding: str) -> Document | Skipped:
    soup = BeautifulSoup(text, "lxml")
    for tag in soup.find_all(_HTML_DROP_TAGS):
        tag.decompose()
    title_tag = soup.find("title")
    title = " ".join(title_tag.get_text().split()) if title_tag is not None else ""
    for tag in soup.find_all(["head", "title"]):
        tag.decompose()
    body = _tidy_lines(soup.get_text("\n"))
    if title and not body.startswith(title):
        body = f"{title}\n\n{body}" if body else title
    if not body.strip():
        return Skipped(source, EMPTY_REASON)
    return Document(
        doc_id=doc_id,
        text=body,
        source=source,
        title=title or None,
        metadata={"format": "html", "encoding": encoding},
    )


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
    return os.path.abspath(path)


def _os_reason(exc: OSError) -> str:
    reason = exc.strerror or str(exc) or type(exc).__name__
    if isinstance(exc, PermissionError):
        reason += " (check the file's permissions)"
    return reason


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= _REASON_MAX else text[: _REASON_MAX - 3] + "..."
