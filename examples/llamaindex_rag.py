"""Retrieval-augmented generation with LlamaIndex over a ragidx index.

Ingests ``examples/docs`` (or ``--docs DIR``; only new or changed files are embedded), then retrieves
with ``RagidxRetriever`` (LlamaIndex ``NodeWithScore``s: the passages that matched, the same ones
the LangChain retriever returns), formats them as numbered sources in a chat prompt and asks an LLM.
The sources are passages (each document's best chunk), not whole documents: ``--search-type
document`` sends whole documents instead, and stderr says how many characters the sources take
either way. Without an LLM configured it prints the assembled prompt, so it runs offline on the
bundled model. Run from the repository root (``pip install -e ".[llamaindex]"`` first)::

    python examples/llamaindex_rag.py "Who discovered what the honeybee waggle dance means?"
    python examples/llamaindex_rag.py "How do I squash commits?" -k 2 --search-type chunk
    python examples/llamaindex_rag.py "..." --llm openai:gpt-4o-mini   # needs `pip install
                                                                      # llama-index-llms-openai` and a key
"""

from __future__ import annotations

import importlib
import sys

from _common import QUESTION, SYSTEM, ingest_docs, numbered_sources, parse_args, size_report
from llama_index.core.llms import LLM, ChatMessage
from llama_index.core.prompts import ChatPromptTemplate
from llama_index.core.schema import NodeWithScore

from ragidx.integrations.llamaindex import RagidxRetriever

PROMPT = ChatPromptTemplate.from_messages([("system", SYSTEM), ("user", QUESTION)])


def format_sources(nodes: list[NodeWithScore]) -> str:
    """Numbered sources: where each comes from, how it was embedded, and its text (the passage)."""
    return numbered_sources([(found.node.metadata, found.node.get_content()) for found in nodes])


def build_messages(retriever: RagidxRetriever, question: str) -> list[ChatMessage]:
    """The chat an LLM receives: the instructions, then the sources and the question."""
    return PROMPT.format_messages(sources=format_sources(retriever.retrieve(question)), question=question)


def answer(retriever: RagidxRetriever, llm: LLM, question: str) -> str:
    return str(llm.chat(build_messages(retriever, question)).message.content)


def sources_size(retriever: RagidxRetriever, question: str) -> str:
    """How many characters the sources of ``question`` take, and what whole documents would take."""
    nodes = retriever.retrieve(question)
    sources = [(found.node.metadata, found.node.get_content()) for found in nodes]
    return size_report(retriever.index, retriever.search_type, sources)


def load_llm(spec: str) -> LLM:
    """An LLM from ``provider:model``: ``llama_index.llms.<provider>`` (``openai:gpt-4o-mini``)."""
    provider, _, model = spec.partition(":")
    try:
        module = importlib.import_module(f"llama_index.llms.{provider}")
    except ImportError:
        raise SystemExit(f"--llm {spec}: pip install llama-index-llms-{provider}") from None
    classes = {name.lower(): value for name, value in vars(module).items() if isinstance(value, type)}
    llm_class = classes.get(provider.replace("_", ""))
    if llm_class is None:
        raise SystemExit(f"--llm {spec}: llama_index.llms.{provider} has no class named like {provider!r}")
    llm: LLM = llm_class(model=model)
    return llm


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__.split("\n\n")[0], ".ragidx/llamaindex-demo", argv)
    llm = load_llm(args.llm) if args.llm else None

    ingest_docs(args.docs, args.index)
    retriever = RagidxRetriever.from_index(
        args.index, k=args.k, search_type=args.search_type, context_chunks=args.context_chunks
    )
    print(sources_size(retriever, args.question), file=sys.stderr)
    if llm is not None:
        print(answer(retriever, llm, args.question))
        return 0
    print("No --llm given: the prompt an LLM would receive.\n")
    for message in build_messages(retriever, args.question):
        print(f"--- {message.role.value}\n{message.content}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
