"""Text encodings: file bytes to text.

Settles a file's encoding, in order: a byte-order mark (UTF-8, UTF-16, UTF-32); a binary check
(NUL bytes or many control bytes are refused); strict UTF-8; an encoding the file declares (an HTML
``<meta charset>``); UTF-8 with U+FFFD replacements for a mostly-UTF-8 file with a few invalid bytes
(with a warning); ``charset_normalizer`` detection, preferring windows-1252 on an exact tie. A file
too large to hold has its encoding settled on its first block (:func:`stream_encoding`).
"""

from __future__ import annotations

import codecs

import charset_normalizer

__all__ = ["decode_bytes", "decode_with_warning", "stream_encoding"]

_SNIFF_BYTES = 8192
_CONTROL_SHARE_LIMIT = 0.10
# C0 control bytes not found in ordinary text (BS, tab, LF, VT, FF, CR and ESC are allowed).
_BINARY_CONTROL_BYTES = frozenset(range(0x20)) - {0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1B}
_CONTROL_DELETE = bytes(sorted(_BINARY_CONTROL_BYTES))  # bytes.translate's delete argument
# Longest first: the UTF-32 LE BOM starts with the UTF-16 LE BOM.
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
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


def decode_bytes(data: bytes, *, declared: str | None = None) -> tuple[str, str]:
    """Decode file bytes to text; return ``(text, encoding name)``.

    Order: a byte-order mark (UTF-8, UTF-16, UTF-32); a binary check (a NUL byte or a high share
    of control bytes in the first 8 KiB raises ``ValueError("binary file ...")``); strict UTF-8;
    the ``declared`` encoding (e.g. an HTML ``<meta charset>``) if it decodes strictly;
    ``charset_normalizer`` detection. Raises ``ValueError`` when no encoding fits. The text has
    any leading BOM removed and ``\\r\\n`` turned into ``\\n``. Text that is mostly UTF-8 with a few
    invalid bytes (mixed encodings) decodes as UTF-8 with U+FFFD in their place.
    """
    text, encoding, _ = decode_with_warning(data, declared)
    return text, encoding


def decode_with_warning(data: bytes, declared: str | None) -> tuple[str, str, str | None]:
    """:func:`decode_bytes`, plus a warning when bytes had to be replaced."""
    bom = _byte_order_mark(data)
    if bom is not None:
        skip, codec, encoding = bom
        return _normalise(data[skip:].decode(codec, errors="replace")), encoding, None
    _check_not_binary(data[:_SNIFF_BYTES])
    try:
        return _normalise(data.decode("utf-8")), "utf-8", None
    except UnicodeDecodeError:
        pass
    if declared:
        named = _lookup_codec(declared)
        if named is not None:
            try:
                return _normalise(data.decode(named)), named, None
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


def stream_encoding(sample: bytes) -> tuple[int, str]:
    """``(bytes to skip, codec)`` of a file too large to hold, settled on its first block
    (``sample``): its byte-order mark, else UTF-8 when the block is valid UTF-8, else the detected
    encoding. Raises ``ValueError`` (the reason to skip the file) for binary data or when no
    encoding fits."""
    bom = _byte_order_mark(sample)
    if bom is not None:
        skip, codec, _ = bom
        return skip, codec
    _check_not_binary(sample[:_SNIFF_BYTES])
    try:
        codecs.getincrementaldecoder("utf-8")().decode(sample, final=False)
    except UnicodeDecodeError:
        best = _detect(sample)
        if best is None:
            raise ValueError("unknown text encoding: convert the file to UTF-8") from None
        return 0, best.encoding
    return 0, "utf-8"


def _byte_order_mark(data: bytes) -> tuple[int, str, str] | None:
    """``(its length, the codec for the bytes after it, the encoding's name)`` of the byte-order
    mark ``data`` starts with, if any."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return len(bom), "utf-8" if encoding == "utf-8-sig" else encoding, encoding
    return None


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
        controls = len(sample) - len(sample.translate(None, _CONTROL_DELETE))  # counted in C
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
