"""Tests for ragidx.read.pdf: PDF text per page, and the limit against decompression bombs."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from fpdf import FPDF

from ragidx.read.walk import read_file
from tests.read.files import make_pdf, one_doc, one_skip


def test_pdf_pages_and_title(tmp_path: Path) -> None:
    path = tmp_path / "two.pdf"
    make_pdf(path, ["Alpha page one text.", "Beta page two text."], title="Two Page Test")
    doc = one_doc(path)
    assert doc.doc_id == "two.pdf"
    assert doc.title == "Two Page Test"
    assert doc.metadata["format"] == "pdf"
    assert doc.metadata["pages"] == 2
    starts = doc.metadata["page_starts"]
    assert starts[0] == 0
    assert doc.text[starts[0] : starts[1]].strip() == "Alpha page one text."
    assert doc.text[starts[1] :].strip() == "Beta page two text."
    assert doc.text[starts[1] - 2 : starts[1]] == "\n\n"
    json.dumps(doc.metadata)


def test_pdf_without_title(tmp_path: Path) -> None:
    path = tmp_path / "plain.pdf"
    make_pdf(path, ["Only page."])
    doc = one_doc(path)
    assert doc.title is None
    assert doc.metadata["page_starts"] == [0]


def test_malformed_pdf_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "broken.pdf"
    path.write_bytes(os.urandom(2048))
    skip = one_skip(path)
    assert skip.reason.startswith("malformed PDF: ")
    assert "\n" not in skip.reason


@pytest.mark.parametrize("data", [b"%PDF-1.4\ngarbage\n", b"not a pdf at all" * 64], ids=["header", "text"])
def test_garbage_pdf_gives_only_ragidx_s_reason(
    tmp_path: Path, data: bytes, caplog: pytest.LogCaptureFixture, recwarn: pytest.WarningsRecorder
) -> None:
    """pypdf's own log lines and warnings ("EOF marker not found") stay out of the output: the
    skip reason is the one line a user sees."""
    path = tmp_path / "garbage.pdf"
    path.write_bytes(data)
    with caplog.at_level(logging.DEBUG):
        assert one_skip(path).reason.startswith("malformed PDF: ")
    assert [r.getMessage() for r in caplog.records] == [] and len(recwarn) == 0
    assert logging.getLogger("pypdf").level == logging.NOTSET  # the logger is left as it was


def test_encrypted_pdf_is_skipped(tmp_path: Path) -> None:
    pdf = FPDF()
    pdf.set_encryption(owner_password="owner", user_password="secret")
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    pdf.cell(text="hidden text")
    path = tmp_path / "locked.pdf"
    path.write_bytes(bytes(pdf.output()))
    assert one_skip(path).reason == "encrypted PDF: cannot decrypt without a password"


def test_expanding_pdf_within_the_limit_is_read(tmp_path: Path) -> None:
    from tests.hostile import expanding_pdf

    doc = read_file(expanding_pdf(tmp_path / "ok.pdf", 2000), "ok.pdf")
    assert isinstance(doc, list) and doc[0].text.count("A") == 1000
