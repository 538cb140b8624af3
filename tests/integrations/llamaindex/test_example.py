"""examples/llamaindex_rag.py: ingests examples/docs, retrieves with RagidxRetriever, builds the prompt
(the bundled model: slow)."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest
from llama_index.core.llms import MockLLM

from ragidx.embed.encoder import Encoder
from ragidx.index.directory import Index
from ragidx.integrations.llamaindex import RagidxRetriever
from tests.integrations.examples import check_prints_the_prompt, check_sends_passages
from tests.scripts import load_script

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "llamaindex_rag.py"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    return load_script(EXAMPLE, "llamaindex_rag")


def test_without_an_llm_it_prints_the_prompt_with_its_sources(
    example: ModuleType, example_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check_prints_the_prompt(example, example_index, capsys, user="user")


def test_with_an_llm_it_answers_from_the_prompt(
    example: ModuleType, example_index: Path, default_encoder: Encoder
) -> None:
    retriever = RagidxRetriever(Index.open(example_index, encoder=default_encoder), 1)
    question = "Who decoded the waggle dance?"
    reply = example.answer(retriever, MockLLM(), question)  # MockLLM echoes what it was sent
    assert "[1] How honeybees communicate" in reply and f"Question: {question}" in reply


def test_it_sends_passages_and_says_how_much_smaller_than_whole_documents(
    example: ModuleType, example_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check_sends_passages(example, example_index, capsys)


def test_chunks_are_measured_against_their_documents(
    example: ModuleType, example_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--search-type chunk``: a node's id is the chunk's (``<doc_id>#<ordinal>``), the size report
    looks its document up by ``metadata["doc_id"]``."""
    question = "How do I squash commits?"
    args = [question, "--index", str(example_index), "-k", "2", "--search-type", "chunk"]
    assert example.main(args) == 0
    _, err = capsys.readouterr()
    assert re.search(r"sources: 2 chunks, [\d,]+ characters \(their whole documents: [\d,]+\)", err), err
