"""Checks that hold for both RAG examples (``examples/langchain_rag.py``, ``examples/llamaindex_rag.py``)
on the example index: each example's own tests call them with its module, then check what is its
framework's own (the chain, the LLM call)."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import EXAMPLES


def check_prints_the_prompt(
    example: ModuleType, index: Path, capsys: pytest.CaptureFixture[str], user: str
) -> None:
    """Without ``--llm``: nothing re-embedded, and the prompt printed as messages (the user's under
    the role name ``user``), the two best sources numbered, the question last."""
    question = "Who discovered what the honeybee waggle dance means?"
    assert example.main([question, "--index", str(index), "-k", "2"]) == 0
    out, err = capsys.readouterr()
    assert "0 added, 10 unchanged" in err  # the index already holds examples/docs: nothing re-embedded
    assert "--- system" in out and f"--- {user}" in out and f"Question: {question}" in out
    first = out.index("[1] How honeybees communicate (score ")
    assert "Karl von Frisch" in out[first:] and "[2] " in out and "[3] " not in out


def check_sends_passages(example: ModuleType, index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The sources are passages, and stderr says how much smaller than their whole documents;
    ``--search-type document`` sends the whole document, to its end."""
    question = "Who designed the Eddystone tower?"
    lighthouses = (EXAMPLES / "lighthouses.txt").read_text()
    assert example.main([question, "--index", str(index), "-k", "1"]) == 0
    out, err = capsys.readouterr()
    sent, whole = re.search(
        r"sources: 1 passages, ([\d,]+) characters \(their whole documents: ([\d,]+)\)", err
    ).groups()  # type: ignore[union-attr]
    assert int(sent.replace(",", "")) < int(whole.replace(",", "")) == len(lighthouses)
    sources = out[out.index("[1] ") : out.index("Question:")]
    assert "Eddystone" in sources and len(sources) < len(lighthouses) // 2  # the passage, not the essay
    assert example.main([question, "--index", str(index), "-k", "1", "--search-type", "document"]) == 0
    out, err = capsys.readouterr()
    assert f"sources: 1 whole documents, {whole} characters (their whole documents: {whole})" in err
    assert " ".join(lighthouses.split()[-12:]) in " ".join(out.split())  # the essay's end is sent too
