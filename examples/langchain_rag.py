"""Retrieval-augmented generation with LangChain over a ragidx index.

Ingests ``examples/docs`` (or ``--docs DIR``; only new or changed files are embedded), then runs a
LangChain chain: ``RagidxRetriever`` → the passages that matched, formatted as numbered sources → a
prompt → an LLM. The sources are passages (each document's best chunk), not whole documents:
``--search-type document`` sends whole documents instead, and stderr says how many characters the
sources take either way. Without an LLM configured it prints the assembled prompt and the sources
instead, so it runs offline. Run from the repository root (``pip install -e ".[langchain]"`` first)::

    python examples/langchain_rag.py "Who discovered what the honeybee waggle dance means?"
    python examples/langchain_rag.py "How do I squash commits?" -k 2 --search-type chunk
    python examples/langchain_rag.py "What is a startup visa?" --docs essays/ --index /tmp/essays
    python examples/langchain_rag.py "..." --llm openai:gpt-4o-mini   # needs `pip install langchain
                                                                     # langchain-openai` and a key
"""

from __future__ import annotations

import sys

from _common import QUESTION, SYSTEM, ingest_docs, numbered_sources, parse_args, size_report
from langchain_core.documents import Document
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough

from ragidx.integrations.langchain import RagidxRetriever

PROMPT = ChatPromptTemplate.from_messages([("system", SYSTEM), ("human", QUESTION)])


def format_sources(documents: list[Document]) -> str:
    """Numbered sources: where each comes from, how it was embedded, and its text (the passage)."""
    return numbered_sources([(doc.metadata, doc.page_content) for doc in documents])


def build_chain(retriever: RagidxRetriever, llm: Runnable | None = None) -> Runnable:
    """question → {sources, question} → prompt (→ llm → text, when there is one)."""
    prepare = {
        "sources": retriever | RunnableLambda(format_sources),
        "question": RunnablePassthrough(),
    }
    chain = prepare | PROMPT
    if llm is None:
        return chain
    from langchain_core.output_parsers import StrOutputParser

    return chain | llm | StrOutputParser()


def sources_size(retriever: RagidxRetriever, question: str) -> str:
    """How many characters the sources of ``question`` take, and what whole documents would take."""
    documents = retriever.invoke(question)
    sources = [(doc.metadata, doc.page_content) for doc in documents]
    return size_report(retriever.index, retriever.search_type, sources)


def load_llm(spec: str) -> Runnable:
    """A chat model from ``provider:model`` (LangChain's ``init_chat_model``)."""
    try:
        from langchain.chat_models import init_chat_model
    except ImportError:
        raise SystemExit(
            "--llm needs the langchain package and the provider's one: pip install langchain langchain-openai"
        ) from None
    return init_chat_model(spec)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__.split("\n\n")[0], ".ragidx/langchain-demo", argv)
    llm = load_llm(args.llm) if args.llm else None

    ingest_docs(args.docs, args.index)
    retriever = RagidxRetriever.from_index(
        args.index, k=args.k, search_type=args.search_type, context_chunks=args.context_chunks
    )
    print(sources_size(retriever, args.question), file=sys.stderr)
    if llm is not None:
        print(build_chain(retriever, llm).invoke(args.question))
        return 0
    prompt = build_chain(retriever).invoke(args.question)
    print("No --llm given: the prompt an LLM would receive.\n")
    for message in prompt.to_messages():
        print(f"--- {message.type}\n{message.content}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
