"""ZIP containers (Word and EPUB files): their parts read with bounds against decompression bombs.

A :class:`Container` opens the archive and hands out parts as streams. Every part is checked
before a byte of it is inflated: its stored size must fit in what is left of
:data:`CONTAINER_MAX_BYTES` (all parts read from one file together), a part larger than
:data:`RATIO_FLOOR` must not expand more than :data:`CONTAINER_MAX_RATIO` times, and only the
stored and deflate methods are accepted (deflate is inflated a block at a time; the others that
:mod:`zipfile` knows inflate a whole read at once). The stream also counts what it yields, so a
part whose stored size lies stops there (:mod:`zipfile` then fails its CRC). XML parts are parsed
by :func:`parse_xml` and :func:`iterparse_xml`: no DTD, no entity expansion, no network, libxml2's
default depth and text-node limits. Every failure is a :class:`ContainerError` whose message is one
line, ready for a :class:`~ragidx.read.document.Skipped` reason; :func:`read_container` turns every
failure of reading one container into that ``Skipped`` (what the Word and EPUB readers share).
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, cast

from lxml import etree

from ragidx.read.document import Document, Skipped, os_reason

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = [
    "CONTAINER_MAX_BYTES",
    "CONTAINER_MAX_RATIO",
    "RATIO_FLOOR",
    "Container",
    "ContainerError",
    "iterparse_xml",
    "parse_xml",
    "read_container",
    "short_reason",
]

CONTAINER_MAX_BYTES = 256 << 20  # uncompressed bytes read from one container, all parts together
CONTAINER_MAX_RATIO = 100  # a part may expand at most this many times its compressed size (Apache POI's)…
RATIO_FLOOR = 1 << 20  # …once it is larger than this (small parts compress well and are harmless)
_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
_REASON_MAX = 160


class ContainerError(ValueError):
    """The container, or one of its parts, cannot be used; ``str()`` is a one-line reason."""


class Container:
    """An open ZIP container of kind ``kind`` (``"DOCX"``, ``"EPUB"``: named in every reason)."""

    def __init__(self, path: Path, kind: str, max_bytes: int | None = None) -> None:
        self.kind = kind
        self.max_bytes = CONTAINER_MAX_BYTES if max_bytes is None else max_bytes
        self.left = self.max_bytes
        try:
            self._zip = zipfile.ZipFile(path)
        except zipfile.BadZipFile as exc:
            raise ContainerError(
                f"malformed {kind}: not a ZIP container ({short_reason(exc)}); an encrypted or damaged "
                "file, or another format under this suffix"
            ) from exc
        self._names = {info.filename: info for info in self._zip.infolist()}

    def __enter__(self) -> Container:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._zip.close()

    def has(self, name: str) -> bool:
        """Whether the archive holds a part of this name."""
        return name in self._names

    def open(self, name: str) -> IO[bytes]:
        """The part ``name`` as a stream of its uncompressed bytes, after the checks above."""
        info = self._names.get(name)
        if info is None:
            raise ContainerError(f"malformed {self.kind}: part {name!r} is missing")
        if info.compress_type not in _METHODS:
            raise ContainerError(
                f"{self.kind} part {name!r} uses ZIP compression method {info.compress_type}; "
                "only stored and deflate parts are read"
            )
        if info.flag_bits & 0x1:
            raise ContainerError(f"encrypted {self.kind}: part {name!r} needs a password")
        if info.file_size > self.left:
            raise ContainerError(
                f"{self.kind} expands beyond {_mib(self.max_bytes)} (part {name!r}: "
                f"{_mib(info.file_size)}): a decompression bomb, or too large to read"
            )
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > RATIO_FLOOR and ratio > CONTAINER_MAX_RATIO:
            raise ContainerError(
                f"{self.kind} part {name!r} expands {ratio:.0f}x ({_mib(info.compress_size)} to "
                f"{_mib(info.file_size)}; limit {CONTAINER_MAX_RATIO}x): a decompression bomb"
            )
        self.left -= info.file_size
        return io.BufferedReader(_Counted(self._zip.open(info), info.file_size, name, self.kind))

    def read(self, name: str) -> bytes:
        """The whole part ``name`` (see :meth:`open`)."""
        with self.open(name) as stream:
            return stream.read()


class _Counted(io.RawIOBase):
    """A part's stream that refuses to yield more than its stored size."""

    def __init__(self, inner: IO[bytes], limit: int, name: str, kind: str) -> None:
        self.inner = inner
        self.limit = limit
        self.name = name
        self.kind = kind

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        data = self.inner.read(len(view))
        self.limit -= len(data)
        if self.limit < 0:
            raise ContainerError(f"malformed {self.kind}: part {self.name!r} is longer than its stored size")
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.inner.close()
        super().close()


def parse_xml(data: bytes) -> etree._Element:
    """A small XML part (a manifest, relationships, properties) as a tree, parsed safely."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)
    return etree.fromstring(data, parser)


def iterparse_xml(stream: IO[bytes]) -> Iterator[tuple[str, etree._Element]]:
    """``("start" | "end", element)`` events of an XML part read as a stream, parsed safely (the
    caller clears what it has used, so memory stays at one block of the document)."""
    events = etree.iterparse(
        stream,
        events=("start", "end"),
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )
    return cast("Iterator[tuple[str, etree._Element]]", events)


def read_container(
    path: Path, kind: str, source: str, document: Callable[[Container], Document | Skipped]
) -> Iterator[Document | Skipped]:
    """The one document ``document`` reads from the ``kind`` (``"DOCX"``, ``"EPUB"``) container at
    ``path``, or a :class:`~ragidx.read.document.Skipped` with one line when the file cannot be read,
    is not a ZIP container, is over the bounds, or has a damaged part (``malformed <kind>: ...``)."""
    try:
        with Container(path, kind) as box:
            yield document(box)
    except ContainerError as exc:
        yield Skipped(source, str(exc))
    except OSError as exc:
        yield Skipped(source, f"cannot read file: {os_reason(exc)}")
    except (etree.XMLSyntaxError, zipfile.BadZipFile, zlib.error, EOFError, RuntimeError) as exc:
        yield Skipped(source, f"malformed {kind}: {short_reason(exc)}")


def short_reason(exc: BaseException) -> str:
    """An exception as one short line (its first line, at most 160 characters)."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= _REASON_MAX else text[: _REASON_MAX - 3] + "..."


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB" if size >= 1 << 20 else f"{size:,} bytes"
