"""Tests for ragidx.read.document: the light module every reader shares."""

from __future__ import annotations

import subprocess
import sys

from ragidx.read.document import SUPPORTED_SUFFIXES
from ragidx.read.formats import FORMATS


def test_supported_suffixes_are_the_format_table() -> None:
    assert tuple(FORMATS) == SUPPORTED_SUFFIXES  # the list itself: tests/read/test_formats.py


def test_the_document_module_imports_no_parser() -> None:
    """ragidx.config imports STREAM_BYTES from here: no parser or charset detector may load with it."""
    heavy = ("bs4", "lxml", "pypdf", "charset_normalizer")
    code = f"import sys, ragidx.read.document; print([m for m in {heavy!r} if m in sys.modules])"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
