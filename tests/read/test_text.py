"""Tests for ragidx.read.text: text encodings."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragidx.read.text import decode_bytes
from tests.read.files import ACCENTED, one_doc, one_skip


def test_cp1252_text_is_decoded(tmp_path: Path) -> None:
    path = tmp_path / "latin.txt"
    path.write_bytes(ACCENTED.encode("cp1252"))
    doc = one_doc(path)
    assert doc.text == ACCENTED
    assert "crème brûlée" in doc.text
    assert "Zürich" in doc.text
    assert "naïve façade" in doc.text
    assert doc.metadata["encoding"] != "utf-8"


def test_utf16_bom_file(tmp_path: Path) -> None:
    path = tmp_path / "wide.txt"
    path.write_bytes(("Grüße aus Köln.\r\nZweite Zeile.").encode("utf-16"))  # BOM + native order
    doc = one_doc(path)
    assert doc.text == "Grüße aus Köln.\nZweite Zeile."
    assert doc.metadata["encoding"].startswith("utf-16")


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        ("\ufeffhé".encode("utf-16-le"), "utf-16-le"),
        ("\ufeffhé".encode("utf-16-be"), "utf-16-be"),
        ("\ufeffhé".encode("utf-32-le"), "utf-32-le"),
        ("\ufeffhé".encode("utf-32-be"), "utf-32-be"),
        ("\ufeffhé".encode(), "utf-8-sig"),
        ("hé".encode(), "utf-8"),
    ],
)
def test_decode_bytes_boms(data: bytes, encoding: str) -> None:
    assert decode_bytes(data) == ("hé", encoding)


def test_decode_bytes_rejects_binary() -> None:
    with pytest.raises(ValueError, match="binary"):
        decode_bytes(b"PK\x03\x04\x00\x00\xff\xfe\x12")
    with pytest.raises(ValueError, match="binary"):
        decode_bytes(bytes(range(1, 8)) * 50)


def test_binary_file_with_txt_suffix_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "image.txt"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    skip = one_skip(path)
    assert skip.source == str(path.resolve())
    assert "binary" in skip.reason
