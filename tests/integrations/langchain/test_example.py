"""examples/langchain_rag.py: ingests examples/docs, retrieves with RagidxRetriever, builds the prompt."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from ragidx.embed.encoder import Encoder
from ragidx.index.directory import Index
from ragidx.integrations.langchain import RagidxRetriever
from tests.integrations.examples import check_prints_the_prompt, check_sends_passages
from tests.scripts import load_script

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "langchain_rag.py"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    return load_script(EXAMPLE, "langchain_rag")


def test_without_an_llm_it_prints_the_prompt_with_its_sources(
    example: ModuleType, example_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check_prints_the_prompt(example, example_index, capsys, user="human")


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
    check_sends_passages(example, example_index, capsys)
