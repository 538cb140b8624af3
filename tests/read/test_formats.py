"""Tests for ragidx.read.formats: the one table of formats, and that everything derives from it.

A row is all the walk needs to read a format (the table is patched with a made-up one here), every
row's reader has the :class:`~ragidx.read.formats.Reader` signature, and no module but the table
lists the suffixes again (a list that a new format would miss).
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

import pytest

from ragidx.read import formats
from ragidx.read.document import Document, Skipped
from ragidx.read.formats import FORMATS, SUPPORTED_SUFFIXES, Format, format_of, suffix_list
from ragidx.read.walk import iter_documents, read_file
from tests.read.files import documents_of, touch
from tests.read.test_docx import body, make_docx, para
from tests.read.test_epub import chapter, make_epub

PACKAGE = Path(__file__).resolve().parents[2] / "ragidx"
SUFFIX = re.compile(r"(?<!\w)\.(?:" + "|".join(s[1:] for s in SUPPORTED_SUFFIXES) + r")\b", re.IGNORECASE)


def test_the_table() -> None:
    assert SUPPORTED_SUFFIXES == (
        ".txt",
        ".md",
        ".markdown",
        ".html",
        ".htm",
        ".pdf",
        ".jsonl",
        ".docx",
        ".epub",
    )
    assert {f.name for f in FORMATS.values()} == {"text", "markdown", "html", "pdf", "jsonl", "docx", "epub"}
    assert suffix_list() == ".txt .md .markdown .html .htm .pdf .jsonl .docx .epub"
    assert (
        format_of("Book.EPUB") is FORMATS[".epub"]
        and format_of("notes.rst") is None
        and format_of("x") is None
    )
    with pytest.raises(TypeError):
        FORMATS[".rst"] = FORMATS[".txt"]  # type: ignore[index]  # read-only: the table is changed in the source


@pytest.mark.parametrize("suffix", SUPPORTED_SUFFIXES)
def test_every_reader_has_the_reader_signature(suffix: str) -> None:
    reader = FORMATS[suffix].load()
    assert list(inspect.signature(reader).parameters) == ["path", "doc_id", "source", "stream_bytes"]
    assert inspect.isgeneratorfunction(reader) or "Iterator" in str(
        inspect.signature(reader).return_annotation
    )


def test_the_table_loads_no_parser() -> None:
    heavy = ("bs4", "lxml", "pypdf", "charset_normalizer", "ragidx.read.walk", "ragidx.read.docx")
    code = f"import sys, ragidx.read.formats; print([m for m in {heavy!r} if m in sys.modules])"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"


def read_rst(path: Path, doc_id: str, source: str, stream_bytes: int) -> Iterator[Document | Skipped]:
    """A made-up reader for the test below: the file's lines, upper-cased."""
    yield Document(doc_id, path.read_text(encoding="utf-8").upper(), source, metadata={"format": "rst"})


def test_a_row_is_all_a_new_format_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    touch(tmp_path, "a.txt", "plain")
    touch(tmp_path, "b.rst", "restructured")
    assert [d.doc_id for d in documents_of(list(iter_documents(tmp_path)))] == ["a.txt"]
    rst = Format("rst", "reStructuredText", f"{__name__}:read_rst")
    monkeypatch.setattr(formats, "FORMATS", MappingProxyType({**FORMATS, ".rst": rst}))
    docs = documents_of(list(iter_documents(tmp_path)))
    assert [(d.doc_id, d.text) for d in docs] == [("a.txt", "plain"), ("b.rst", "RESTRUCTURED")]


def test_a_folder_of_every_format(tmp_path: Path) -> None:
    touch(tmp_path, "a.txt", "Plain text about bees.")
    make_docx(tmp_path / "b.docx", body(para("A Word report about bees.")))
    make_epub(tmp_path / "c.epub", {"c.xhtml": chapter("One", "A book about bees.")})
    touch(tmp_path, "d.odt", "not read")
    docs = documents_of(list(iter_documents(tmp_path)))
    assert [(d.doc_id, d.metadata["format"]) for d in docs] == [
        ("a.txt", "text"),
        ("b.docx", "docx"),
        ("c.epub", "epub"),
    ]
    skipped = read_file(tmp_path / "d.odt", "d.odt")
    assert isinstance(skipped, Skipped)
    assert skipped.reason == f"unsupported file type '.odt': supported types are {suffix_list(', ')}"


def _listings(path: Path) -> list[tuple[int, list[str]]]:
    """Strings (docstrings and help texts too), literal collections and dict keys naming two or
    more suffixes."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            named = sorted({m.lower() for m in SUFFIX.findall(node.value)})
        elif isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict):
            elements = node.keys if isinstance(node, ast.Dict) else node.elts
            constants = [e.value for e in elements if isinstance(e, ast.Constant)]
            named = sorted({value for value in constants if value in SUPPORTED_SUFFIXES})
        else:
            continue
        if len(named) >= 2:
            found.append((node.lineno, named))
    return found


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "read" / "formats.py"],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_no_module_lists_the_suffixes_again(path: Path) -> None:
    hits = [f"{path.relative_to(PACKAGE.parent)}:{line}: {named}" for line, named in _listings(path)]
    assert not hits, "name them from ragidx.read.formats (SUPPORTED_SUFFIXES, suffix_list):\n" + "\n".join(
        hits
    )
