"""Tests for ragidx.read.epub: chapters in spine order, titles, and refusals of bad books.

Every .epub here is built in-process with :mod:`zipfile`: the container file, a package document
(manifest and spine) and XHTML chapters.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from ragidx.read import container
from tests.read.files import one_doc, one_skip

CONTAINER_XML = (
    '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
    '<rootfiles><rootfile full-path="{opf}" media-type="application/oebps-package+xml"/></rootfiles>'
    "</container>"
)


def chapter(heading: str, *paragraphs: str, title: str = "The Book") -> str:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (
        '<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml">'
        f"<head><title>{title}</title></head><body><h1>{heading}</h1>{body}</body></html>"
    )


def make_epub(
    path: Path,
    chapters: dict[str, str],
    spine: list[str] | None = None,
    title: str | None = "The Book",
    extra_items: str = "",
    extra_parts: dict[str, bytes] | None = None,
    opf: str = "OEBPS/content.opf",
    leave_out: tuple[str, ...] = (),
) -> Path:
    """An EPUB with ``chapters`` (href → XHTML, relative to the package folder) in the manifest,
    read in ``spine`` order (default: as given); ``leave_out``: hrefs not stored."""
    folder = opf.rpartition("/")[0]
    items = "".join(
        f'<item id="c{i}" href="{href}" media-type="application/xhtml+xml"/>'
        for i, href in enumerate(chapters)
    )
    ids = {href: f"c{i}" for i, href in enumerate(chapters)}
    order = spine if spine is not None else list(chapters)
    refs = "".join(f'<itemref idref="{ids.get(href, href)}"/>' for href in order)
    meta = f"<dc:title>{title}</dc:title>" if title is not None else ""
    package = (
        '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
        f'<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">{meta}</metadata>'
        f"<manifest>{items}{extra_items}</manifest><spine>{refs}</spine></package>"
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("mimetype", "application/epub+zip", zipfile.ZIP_STORED)
        archive.writestr("META-INF/container.xml", CONTAINER_XML.format(opf=opf))
        archive.writestr(opf, package)
        for href, xhtml in chapters.items():
            if href not in leave_out:
                archive.writestr(f"{folder}/{href}" if folder else href, xhtml)
        for name, data in (extra_parts or {}).items():
            archive.writestr(name, data)
    return path


def test_chapters_in_spine_order_with_title(tmp_path: Path) -> None:
    chapters = {
        "text/one.xhtml": chapter("One", "It was a bright cold day."),
        "text/two.xhtml": chapter("Two", "The clocks were striking thirteen.", "Winston slipped in."),
        "text/three.xhtml": chapter("Three", "He was dreaming of his mother."),
    }
    spine = ["text/two.xhtml", "text/one.xhtml", "text/three.xhtml"]  # not the manifest's order
    doc = one_doc(make_epub(tmp_path / "book.epub", chapters, spine))
    assert doc.doc_id == "book.epub"
    assert doc.title == "The Book"
    assert doc.text == (
        "Two\nThe clocks were striking thirteen.\nWinston slipped in.\n\n"
        "One\nIt was a bright cold day.\n\nThree\nHe was dreaming of his mother."
    )
    assert "The Book" not in doc.text  # each chapter's <title> repeats the book's: left out
    starts = doc.metadata["chapter_starts"]
    assert doc.metadata["format"] == "epub" and doc.metadata["chapters"] == 3
    assert [doc.text[s:].split("\n")[0] for s in starts] == ["Two", "One", "Three"]
    json.dumps(doc.metadata)


def test_navigation_images_and_escaped_hrefs(tmp_path: Path) -> None:
    chapters = {"my%20chapter.xhtml": chapter("Spaced", "A file name with a space.")}
    nav = '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
    image = '<item id="cover" href="cover.svg" media-type="image/svg+xml"/>'
    path = make_epub(
        tmp_path / "b.epub",
        {},
        spine=["nav", "cover"],
        extra_items=nav + image,
        extra_parts={"OEBPS/nav.xhtml": chapter("Contents", "1. Spaced").encode()},
    )
    assert "empty document" in one_skip(path).reason  # the table of contents is not the book's text
    escaped = make_epub(  # the manifest's href is URL-escaped; the part is stored under the plain name
        tmp_path / "d.epub",
        chapters,
        leave_out=("my%20chapter.xhtml",),
        extra_parts={"OEBPS/my chapter.xhtml": chapters["my%20chapter.xhtml"].encode()},
    )
    assert one_doc(escaped).text == "Spaced\nA file name with a space."


def test_package_at_the_root_and_no_title(tmp_path: Path) -> None:
    path = make_epub(
        tmp_path / "r.epub", {"c.xhtml": chapter("Root", "Text.")}, opf="content.opf", title=None
    )
    doc = one_doc(path)
    assert doc.text == "Root\nText." and doc.title is None


def test_declared_encoding_of_a_chapter(tmp_path: Path) -> None:
    latin = chapter("Café", "Crème brûlée.").replace("utf-8", "iso-8859-1").encode("latin-1")
    path = make_epub(
        tmp_path / "l.epub", {"c.xhtml": ""}, leave_out=("c.xhtml",), extra_parts={"OEBPS/c.xhtml": latin}
    )
    assert one_doc(path).text == "Café\nCrème brûlée."


def test_drm_and_damaged_books_are_one_line(tmp_path: Path) -> None:
    encryption = (
        b'<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
        b'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData><enc:CipherData>'
        b'<enc:CipherReference URI="OEBPS/c.xhtml"/></enc:CipherData></enc:EncryptedData></encryption>'
    )
    chapters = {"c.xhtml": chapter("C", "Text.")}
    cases = {
        make_epub(tmp_path / "drm.epub", chapters, extra_parts={"META-INF/encryption.xml": encryption}): (
            "encrypted EPUB (DRM): chapter 'OEBPS/c.xhtml'"
        ),
        make_epub(tmp_path / "missing.epub", chapters, leave_out=("c.xhtml",)): (
            "malformed EPUB: part 'OEBPS/c.xhtml' is missing"
        ),
        make_epub(tmp_path / "unknown.epub", chapters, spine=["nowhere"]): (
            "malformed EPUB: spine item 'nowhere' is not in the manifest"
        ),
    }
    # a container.xml naming no package, and a package that is not XML
    bad = tmp_path / "norootfile.epub"
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("META-INF/container.xml", "<container/>")
    cases[bad] = "malformed EPUB: META-INF/container.xml names no package document"
    broken = tmp_path / "broken.epub"
    with zipfile.ZipFile(broken, "w") as archive:
        archive.writestr("META-INF/container.xml", CONTAINER_XML.format(opf="p.opf"))
        archive.writestr("p.opf", "<package><manifest>")
    cases[broken] = "malformed EPUB:"
    not_zip = tmp_path / "plain.epub"
    not_zip.write_text("just text", encoding="utf-8")
    cases[not_zip] = "malformed EPUB: not a ZIP container"
    for path, reason in cases.items():
        skip = one_skip(path)
        assert reason in skip.reason, (path.name, skip.reason)
        assert "\n" not in skip.reason and skip.source == str(path)


def test_fonts_listed_as_encrypted_do_not_matter(tmp_path: Path) -> None:
    obfuscated = (
        b'<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
        b'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData><enc:CipherData>'
        b'<enc:CipherReference URI="OEBPS/fonts/a.otf"/></enc:CipherData></enc:EncryptedData></encryption>'
    )
    path = make_epub(
        tmp_path / "f.epub",
        {"c.xhtml": chapter("C", "Text.")},
        extra_parts={"META-INF/encryption.xml": obfuscated},
    )
    assert one_doc(path).text == "C\nText."


def test_decompression_bombs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = chapter("Bomb", "x" * (8 << 20))  # 8 MiB of one letter: deflates ~1000x
    skip = one_skip(make_epub(tmp_path / "ratio.epub", {"c.xhtml": bomb}))
    assert "EPUB part 'OEBPS/c.xhtml' expands" in skip.reason and "decompression bomb" in skip.reason
    monkeypatch.setattr(container, "CONTAINER_MAX_BYTES", 10_000)  # all parts together
    chapters = {f"c{i}.xhtml": chapter(f"Chapter {i}", "Some words. " * 100) for i in range(20)}
    skip = one_skip(make_epub(tmp_path / "total.epub", chapters))
    assert "EPUB expands beyond 10,000 bytes" in skip.reason and "\n" not in skip.reason
