"""Hostile input files for the ingestion tests: each is built in a few milliseconds."""

from __future__ import annotations

import os
import zlib
from pathlib import Path


def expanding_pdf(path: Path, content_bytes: int) -> Path:
    """A one-page PDF whose compressed content stream expands to ``content_bytes`` of drawing
    instructions (a decompression bomb when large)."""
    content = b"BT /F1 12 Tf 72 720 Td (" + b"A " * (content_bytes // 2) + b") Tj ET"
    data = zlib.compress(content, 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(out))
    return path


def hostile_folder(root: Path) -> dict[str, str]:
    """A folder of hostile files next to two good ones; returns {file name: expected outcome}, the
    outcome being ``ok``, ``warn:<text>`` or ``skip:<text>`` (text found in the one-line reason)."""
    root.mkdir(parents=True)
    expected: dict[str, str] = {}

    def put(name: str, data: bytes, outcome: str) -> None:
        (root / name).write_bytes(data)
        expected[name] = outcome

    put("good.txt", b"An ordinary document about honeybees.", "ok")
    put("notes.md", "# Notes\n\nCaf\u00e9 menus and na\u00efve art.".encode(), "ok")
    put("zero.txt", b"", "skip:empty document")
    put("image.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4, "skip:binary file")
    put(
        "mixed.txt",
        "caf\u00e9 \u2014 na\u00efve ".encode() * 20 + b"then cp1252 caf\xe9.",
        "warn:invalid UTF-8",
    )
    put("latin1.txt", "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e for everyone.".encode("cp1252"), "ok")
    deep = "<html><title>Deep</title><body>" + "<div>" * 50_000 + "deep text" + "</div>" * 50_000
    put("deep.html", deep.encode(), "ok")
    put("broken.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog", "skip:malformed PDF")
    expanding_pdf(root / "bomb.pdf", 3 << 20)
    expected["bomb.pdf"] = "skip:decompression bomb"
    put(
        "corpus.jsonl",
        b'{"_id": "j1", "text": "first"}\nnot json\n{"_id": "j1", "text": "again"}\n{"text": "no id"}\n',
        "ok",
    )
    os.symlink("loop-b.txt", root / "loop-a.txt")
    os.symlink("loop-a.txt", root / "loop-b.txt")
    expected["loop-a.txt"] = expected["loop-b.txt"] = "skip:symbolic link loop"
    os.symlink(root, root / "self-dir")  # a symlinked folder: never followed
    for name in ("new\nline.txt", "tab\there.md"):  # an id that would break the lines showing it
        put(name, f"Odd name {name!r}.".encode(), "skip:file name has a control character")
    odd = [
        "sp ace & [brackets] $HOME.txt",
        "-dash.txt",
        "\u00fcml\u00e4ut.txt",
    ]
    for name in odd:
        put(name, f"Odd name {name!r}.".encode(), "ok")
    raw = os.fsencode(root) + b"/bytes-\xff\xfe.txt"
    with open(raw, "wb") as handle:
        handle.write(b"A file whose name is not UTF-8.")
    expected["bytes-\\xff\\xfe.txt"] = "ok"
    return expected
