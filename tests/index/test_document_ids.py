"""Ids added through the Python API are checked as ingest checks file names and JSONL ids (issue
39, item 5): a control character (ESC, a newline…) is refused with one line naming the id."""

from __future__ import annotations

import numpy as np
import pytest

from ragidx.errors import InputError
from ragidx.index.directory import ID_CONTROL, Index
from ragidx.index.manifest import ExternalEncoderInfo
from ragidx.ingestion.pipeline import add_documents, add_embedded
from ragidx.read.document import Document, control_character


@pytest.mark.parametrize("doc_id", ["esc\x1b[31mred", "two\nlines", "csi\x9b1m", "sep\u2028"])
def test_add_documents_refuses_control_characters(doc_id: str, tiny_encoder) -> None:
    index = Index.create(None, tiny_encoder)
    with pytest.raises(InputError, match="has a control character"):
        add_documents(index, [Document(doc_id, "river stone", "")])
    assert len(index) == 0


def test_add_embedded_refuses_control_characters() -> None:
    index = Index.create(None, ExternalEncoderInfo(name="elsewhere", dim=3))
    with pytest.raises(InputError, match=r"'esc\\x1bx'.*\('\\x1b'\)"):
        add_embedded(index, [Document("esc\x1bx", "one", "")], np.ones((1, 3)))
    add_embedded(index, [Document("fine [markup] id", "one", "")], np.ones((1, 3)))
    assert index.doc_ids() == ["fine [markup] id"]


def test_the_check_refuses_what_ingest_refuses() -> None:
    for code in [*range(0x3000), 0xFEFF, 0x10FFFF]:
        char = chr(code)
        assert (ID_CONTROL.search(char) is None) == (control_character(char) is None), hex(code)
