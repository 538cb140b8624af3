"""What the two RAG examples share (``langchain_rag.py``, ``llamaindex_rag.py``), free of both
frameworks: their command line, the ingest step, the instructions an LLM gets, the numbered sources
and the report of how many characters the sources take.

The examples import it as ``_common``: ``python examples/langchain_rag.py`` puts ``examples/`` on
the import path. Each source is a ``(metadata, text)`` pair, the metadata that both frameworks'
``RagidxRetriever`` give a result (``doc_id``, ``title``, ``score``, ``embed_mode``, …).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragidx import ingest
from ragidx.index.directory import Index

DOCS = Path(__file__).resolve().parent / "docs"
SYSTEM = (
    "Answer the question from the numbered sources only, citing them like [1]. "
    "If they do not contain the answer, say so."
)
QUESTION = "Sources:\n\n{sources}\n\nQuestion: {question}"  # the user's message: a prompt template

Source = tuple[Mapping[str, Any], str]  # a retrieved passage: its metadata and its text


def parse_args(description: str, index: str, argv: list[str] | None) -> argparse.Namespace:
    """The examples' command line: the question, ``--docs``, ``--index`` (default ``index``), ``-k``,
    ``--search-type``, ``--context-chunks`` and ``--llm``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("question", help="what to ask about the example documents")
    parser.add_argument(
        "--docs", type=Path, default=DOCS, help="the documents to ingest (default examples/docs)"
    )
    parser.add_argument("--index", type=Path, default=Path(index), help="index directory")
    parser.add_argument("-k", type=int, default=3, help="how many sources to retrieve")
    parser.add_argument(
        "--search-type",
        choices=["passage", "document", "chunk"],
        default="passage",
        help="passage: each document's passage that matched (default); document: whole documents; "
        "chunk: the best chunks, several of a document possibly",
    )
    parser.add_argument(
        "--context-chunks", type=int, default=0, help="neighbouring chunks added to a passage"
    )
    parser.add_argument("--llm", help="provider:model for an answer, e.g. openai:gpt-4o-mini")
    return parser.parse_args(argv)


def ingest_docs(docs: Path, index: Path) -> None:
    """Ingest ``docs`` into ``index`` (only new or changed files are embedded), saying so on stderr."""
    report = ingest(docs, index)
    print(f"index {index}: {report.added} added, {report.unchanged} unchanged", file=sys.stderr)


def numbered_sources(sources: Sequence[Source]) -> str:
    """Numbered sources: where each comes from, how it was embedded, and its text (the passage)."""
    blocks = []
    for number, (meta, text) in enumerate(sources, start=1):
        where = meta.get("title") or meta["doc_id"]
        blocks.append(
            f"[{number}] {where} (score {meta['score']:.3f}, embedded as {meta['embed_mode']})\n"
            f"{text.strip()}"
        )
    return "\n\n".join(blocks)


def size_report(index: Index, search_type: str, sources: Sequence[Source]) -> str:
    """How many characters ``sources`` take, and what their whole documents would take."""
    sent = sum(len(text) for _, text in sources)
    whole = sum(len(index.document(meta["doc_id"]).text) for meta, _ in sources)
    kind = "whole documents" if search_type == "document" else f"{search_type}s"
    return f"sources: {len(sources)} {kind}, {sent:,} characters (their whole documents: {whole:,})"
