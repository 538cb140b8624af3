"""Tests for ragidx.read.docx: Word text in document order, titles, and refusals of bad archives.

Every .docx here is built in-process with :mod:`zipfile` (the parts Word writes, trimmed to what
the reader looks at), so the tests need no Word library.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from ragidx.read import container
from ragidx.read.document import Document, Skipped
from ragidx.read.docx import read_docx
from tests.read.files import one_doc, one_skip

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Target="{main}" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
    'relationships/officeDocument"/>'
    '<Relationship Id="rId2" Target="docProps/core.xml" Type="http://schemas.openxmlformats.org/package/2006/'
    'relationships/metadata/core-properties"/>'
    "</Relationships>"
)


def para(text: str, style: str | None = None) -> str:
    props = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
    return f'<w:p>{props}<w:r><w:t xml:space="preserve">{text}</w:t></w:r></w:p>'


def table(rows: list[list[str]]) -> str:
    cells = "".join("<w:tr>" + "".join(f"<w:tc>{para(c)}</w:tc>" for c in row) + "</w:tr>" for row in rows)
    return f"<w:tbl><w:tblPr/>{cells}</w:tbl>"


def body(*blocks: str) -> str:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{W}" xmlns:mc="{MC}"><w:body>'
        + "".join(blocks)
        + "<w:sectPr/></w:body></w:document>"
    )


def make_docx(
    path: Path,
    document_xml: str,
    title: str | None = None,
    main: str = "word/document.xml",
    rels: bool = True,
    method: int = zipfile.ZIP_DEFLATED,
    stored_as: str | None = None,
) -> Path:
    """A .docx whose relationships name ``main`` as the main part, stored as ``stored_as`` (default
    ``main``)."""
    with zipfile.ZipFile(path, "w", method) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        if rels:
            archive.writestr("_rels/.rels", RELS.format(main=main))
        archive.writestr(stored_as or main, document_xml)
        if title is not None:
            archive.writestr(
                "docProps/core.xml",
                '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/'
                f'core-properties" xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>{title}</dc:title>'
                "</cp:coreProperties>",
            )
    return path


def test_paragraphs_and_tables_in_document_order(tmp_path: Path) -> None:
    xml = body(
        para("Annual report", style="Title"),
        para("Revenue grew in every region."),
        table([["Region", "Revenue"], ["North", "12"], ["", ""], ["South", "9"]]),
        para("Costs fell.", style="Heading1"),
        "<w:p><w:r><w:t>Tab</w:t><w:tab/><w:t>and</w:t><w:br/><w:t>break</w:t></w:r></w:p>",
        para("   "),  # blank: left out
    )
    doc = one_doc(make_docx(tmp_path / "report.docx", xml, title="Report 2025"))
    assert doc.doc_id == "report.docx"
    assert doc.text == (
        "Annual report\nRevenue grew in every region.\nRegion | Revenue\nNorth | 12\nSouth | 9\n"
        "Costs fell.\nTab\tand\nbreak"
    )
    assert doc.title == "Report 2025"  # the document property wins over the Title style
    assert doc.metadata == {"format": "docx", "paragraphs": 4, "tables": 1}
    json.dumps(doc.metadata)


def test_title_style_when_no_property_and_none_at_all(tmp_path: Path) -> None:
    assert one_doc(
        make_docx(tmp_path / "a.docx", body(para("Body."), para(" My  Book ", "Title")))
    ).title == ("My Book")
    assert one_doc(make_docx(tmp_path / "b.docx", body(para("Body.")))).title is None


def test_revisions_fields_controls_text_boxes_and_nested_tables(tmp_path: Path) -> None:
    deleted = "<w:p><w:r><w:t>kept </w:t></w:r><w:del><w:r><w:delText>gone</w:delText></w:r></w:del>"
    inserted = "<w:ins><w:r><w:t>inserted</w:t></w:r></w:ins></w:p>"
    field = "<w:p><w:r><w:instrText> PAGE </w:instrText></w:r><w:r><w:t>page text</w:t></w:r></w:p>"
    control = f"<w:sdt><w:sdtPr/><w:sdtContent>{para('in a control')}</w:sdtContent></w:sdt>"
    box = (
        '<w:p><w:r><w:t>before box</w:t></w:r><w:r><mc:AlternateContent><mc:Choice Requires="wps">'
        f"<w:drawing><w:txbxContent>{para('boxed')}</w:txbxContent></w:drawing></mc:Choice>"
        f"<mc:Fallback><w:pict><w:txbxContent>{para('boxed')}</w:txbxContent></w:pict></mc:Fallback>"
        "</mc:AlternateContent></w:r></w:p>"
    )
    nested = (
        "<w:tbl><w:tr><w:tc>" + para("outer") + table([["inner a", "inner b"]]) + "</w:tc>"
        "<w:tc>" + para("right") + "</w:tc></w:tr></w:tbl>"
    )
    doc = one_doc(make_docx(tmp_path / "r.docx", body(deleted + inserted, field, control, box, nested)))
    assert doc.text == (
        "kept inserted\npage text\nin a control\nbefore box\nboxed\nouter inner a | inner b | right"
    )


def test_main_part_from_relationships_and_default(tmp_path: Path) -> None:
    moved = make_docx(tmp_path / "moved.docx", body(para("Moved main part.")), main="word/document2.xml")
    assert one_doc(moved).text == "Moved main part."
    bare = make_docx(tmp_path / "bare.docx", body(para("No relationships.")), rels=False)
    assert one_doc(bare).text == "No relationships."


def test_strict_open_xml_namespace(tmp_path: Path) -> None:
    strict = body(para("Strict text.")).replace(W, "http://purl.oclc.org/ooxml/wordprocessingml/main")
    assert one_doc(make_docx(tmp_path / "s.docx", strict)).text == "Strict text."


def test_body_is_streamed_block_by_block(tmp_path: Path) -> None:
    """Many paragraphs and a table: all read, in order, with the blocks dropped as they are read."""
    paragraphs = [para(f"Paragraph {i}.") for i in range(3000)]
    xml = body(*paragraphs[:1500], table([[f"r{i}", "x"] for i in range(50)]), *paragraphs[1500:])
    doc = one_doc(make_docx(tmp_path / "long.docx", xml))
    lines = doc.text.split("\n")
    assert len(lines) == 3050
    assert lines[1499] == "Paragraph 1499." and lines[1500] == "r0 | x" and lines[1550] == "Paragraph 1500."
    assert doc.metadata["paragraphs"] == 3000


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (
            b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(512),
            "malformed DOCX: not a ZIP container",
        ),  # an old .doc
        (b"", "malformed DOCX: not a ZIP container"),
    ],
)
def test_not_a_zip_is_one_line(tmp_path: Path, data: bytes, reason: str) -> None:
    path = tmp_path / "old.docx"
    path.write_bytes(data)
    skip = one_skip(path)
    assert skip.source == str(path) and reason in skip.reason and "\n" not in skip.reason


def test_corrupt_parts_are_one_line(tmp_path: Path) -> None:
    crc = make_docx(
        tmp_path / "crc.docx", body(para("Text to damage in the part.")), method=zipfile.ZIP_STORED
    )
    crc.write_bytes(crc.read_bytes().replace(b"damage", b"DAMAGE"))  # stored: the CRC no longer holds
    cases = {
        make_docx(
            tmp_path / "missing.docx", body(para("x")), main="word/other.xml", stored_as="word/a.xml"
        ): ("malformed DOCX: part 'word/other.xml' is missing"),
        make_docx(tmp_path / "badxml.docx", body(para("x"))[:-30]): "malformed DOCX:",
        make_docx(tmp_path / "nobody.docx", f'<w:document xmlns:w="{W}"/>'): "has no document body",
        make_docx(tmp_path / "empty.docx", body(para(" "))): "empty document",
        crc: "malformed DOCX: Bad CRC-32",
    }
    for path, reason in cases.items():
        skip = one_skip(path)
        assert reason in skip.reason, (path.name, skip.reason)
        assert "\n" not in skip.reason and skip.source == str(path)


def test_decompression_bomb_by_ratio(tmp_path: Path) -> None:
    filler = "<w:bookmarkStart/>" * 400_000  # ~7 MiB of markup that deflates ~500x
    path = make_docx(tmp_path / "bomb.docx", body(para("x"), filler))
    skip = one_skip(path)
    assert "decompression bomb" in skip.reason and "'word/document.xml'" in skip.reason
    assert "\n" not in skip.reason


def test_decompression_bomb_by_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(container, "CONTAINER_MAX_BYTES", 4096)
    path = make_docx(tmp_path / "big.docx", body(*[para(f"Paragraph number {i}.") for i in range(200)]))
    skip = one_skip(path)
    assert (
        "DOCX expands beyond 4,096 bytes (part 'word/document.xml'" in skip.reason and "\n" not in skip.reason
    )


def test_a_part_longer_than_its_stored_size_stops_there(tmp_path: Path) -> None:
    """A lying size in the archive's directory: the stream stops at it, the file is refused."""
    path = make_docx(tmp_path / "lie.docx", body(*[para(f"Paragraph {i}.") for i in range(100)]))
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("word/document.xml")
    real = info.file_size.to_bytes(4, "little")
    fake = (64).to_bytes(4, "little")
    data[:] = data.replace(real, fake)  # local header and central directory both
    path.write_bytes(bytes(data))
    skip = one_skip(path)
    assert skip.reason.startswith("malformed DOCX: Bad CRC-32") and "\n" not in skip.reason


def test_unsupported_compression_and_encryption(tmp_path: Path) -> None:
    path = make_docx(tmp_path / "bz.docx", body(para("x")), method=zipfile.ZIP_BZIP2)
    assert "only stored and deflate parts are read" in one_skip(path).reason
    enc = make_docx(tmp_path / "enc.docx", body(para("x")), method=zipfile.ZIP_STORED)
    data = bytearray(enc.read_bytes())
    for signature in (b"PK\x03\x04", b"PK\x01\x02"):  # set the encrypted flag on every entry
        at = data.find(signature)
        while at != -1:
            flag = at + (6 if signature == b"PK\x03\x04" else 8)
            data[flag] |= 0x1
            at = data.find(signature, at + 4)
    enc.write_bytes(bytes(data))
    assert "encrypted DOCX" in one_skip(enc).reason


def test_reader_never_raises_on_an_unreadable_file(tmp_path: Path) -> None:
    items = list(read_docx(tmp_path / "gone.docx", "gone.docx", "/x/gone.docx", 1 << 20))
    assert len(items) == 1 and isinstance(items[0], Skipped)
    assert items[0].reason.startswith("cannot read file:")
    assert not isinstance(items[0], Document)
