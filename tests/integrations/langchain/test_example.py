"""examples/langchain_rag.py: ingests examples/docs, retrieves with RagidxRetriever, builds the prompt."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from ragidx.embed.encoder import Encoder
from ragidx.index.directory import Index
from ragidx.integrations.langchain import RagidxRetriever

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "langchain_rag.py"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("langchain_rag", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_an_llm_it_prints_the_prompt_with_its_sources(
    example: ModuleType, example_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    question = "Who discovered what the honeybee waggle dance means?"
    assert example.main([question, "--index", str(example_index), "-k", "2"]) == 0
    out, err = capsys.readouterr()
    assert "0 added, 10 unchanged" in err  # the index already holds examples/docs: nothing re-embedded
    assert "--- system" in out and f"Question: {question}" in out
    first = out.index("[1] How honeybees communicate (score ")
    assert "Karl von Frisch" in out[first:] and "[2] " in out and "[3] " not in out


def test_with_an_llm_the_chain_answers(
    example: ModuleType, example_index: Path, default_encoder: Encoder
) -> None:
    retriever = RagidxRetriever(index=Index.open(example_index, encoder=default_encoder), k=1)
    llm = FakeListChatModel(responses=["Karl von Frisch [1]."])
    question = "Who decoded the waggle dance?"
    assert example.build_chain(retriever, llm).invoke(question) == "Karl von Frisch [1]."
    prompt = example.build_chain(retriever).invoke(question)
    assert "[1] How honeybees communicate" in prompt.to_messages()[1].content


def test_it_sends_passages_and_says_how_much_smaller_than_whole_documents(
    example: ModuleType, example_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    question = "Who designed the Eddystone tower?"
    lighthouses = (EXAMPLE.parent / "docs" / "lighthouses.txt").read_text()
    assert example.main([question, "--index", str(example_index), "-k", "1"]) == 0
    out, err = capsys.readouterr()
    sent, whole = re.search(
        r"sources: 1 passages, ([\d,]+) characters \(their whole documents: ([\d,]+)\)", err
    ).groups()  # type: ignore[union-attr]
    assert int(sent.replace(",", "")) < int(whole.replace(",", "")) == len(lighthouses)
    sources = out[out.index("[1] ") : out.index("Question:")]
    assert "Eddystone" in sources and len(sources) < len(lighthouses) // 2  # the passage, not the essay
    assert (
        example.main([question, "--index", str(example_index), "-k", "1", "--search-type", "document"]) == 0
    )
    out, err = capsys.readouterr()
    assert f"sources: 1 whole documents, {whole} characters (their whole documents: {whole})" in err
    assert " ".join(lighthouses.split()[-12:]) in " ".join(out.split())  # the essay's end is sent too
