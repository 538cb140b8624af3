"""Helpers for the read tests: files on disk, and picking documents and skips out of a read."""

from __future__ import annotations

from pathlib import Path

from fpdf import FPDF

from ragidx.read.document import Document, Skipped
from ragidx.read.walk import iter_documents

ACCENTED = (
    "Nous avons mangé une crème brûlée à Zürich, près de la naïve façade du café. "
    "Le garçon était très aimable et la soirée fut délicieuse. "
    "Après le dîner, nous sommes allés au théâtre voir une pièce française."
)


def documents_of(items: list[Document | Skipped]) -> list[Document]:
    return [item for item in items if isinstance(item, Document)]


def skips_of(items: list[Document | Skipped]) -> list[Skipped]:
    return [item for item in items if isinstance(item, Skipped)]


def one_doc(path: Path) -> Document:
    items = list(iter_documents(path))
    assert len(items) == 1, items
    assert isinstance(items[0], Document), items
    return items[0]


def one_skip(path: Path) -> Skipped:
    items = list(iter_documents(path))
    assert len(items) == 1, items
    assert isinstance(items[0], Skipped), items
    return items[0]


def touch(root: Path, rel: str, text: str = "some text") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def make_pdf(path: Path, pages: list[str], title: str | None = None) -> None:
    pdf = FPDF()
    if title:
        pdf.set_title(title)
    for page_text in pages:
        pdf.add_page()
        pdf.set_font("Helvetica", size=12)
        pdf.multi_cell(0, 10, text=page_text)
    path.write_bytes(bytes(pdf.output()))
