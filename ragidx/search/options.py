"""How one search ranks: :class:`SearchOptions`, the per-search choices in one object.

Every search entry point (``Index.search``, ``Retriever``, the CLI's ``query``, the LangChain
retriever and vector store) takes these choices; they travel together as one
:class:`SearchOptions`, never as loose arguments.

Each choice is defined here once, as a ``Literal`` type (:data:`Per`, :data:`Mode`,
:data:`Sentences`, :data:`LexicalWeight`), and every surface takes that type: the CLI's options
(Typer reads a ``Literal`` as a choice), the server's request and the LangChain retriever (pydantic
fields), the vector store. Where a list of the values is needed it is :func:`typing.get_args` of the
type (:data:`PER`, :data:`MODES`, :data:`SENTENCES`), so a new value reaches every surface at once
and mypy checks every value passed (``tests/search/test_options.py`` fails on a restated list).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypedDict, get_args

if TYPE_CHECKING:
    from ragidx.embed.config import HybridConfig
    from ragidx.index.store import DocumentRecord

Where = Callable[["DocumentRecord"], bool] | Mapping[str, Any]  # a dict: ragidx.search.filters
Per = Literal["document", "chunk"]
Mode = Literal["dense", "lexical", "hybrid"]
Sentences = Literal["dense", "lexical", "auto"]
LexicalWeight = float | Literal["rrf"]  # a hybrid search's BM25 weight in [0, 1], or reciprocal rank fusion

PER: tuple[Per, ...] = get_args(Per)
MODES: tuple[Mode, ...] = get_args(Mode)
SENTENCES: tuple[Sentences, ...] = get_args(Sentences)


@dataclass(frozen=True)
class SearchOptions:
    """``where``: keep only the documents it accepts (a search still returns ``k`` when that many
    match). ``per``: rank documents (a chunked document scores by its best chunk, reported once)
    or chunks. ``hybrid``: fuse a hybrid index's document and chunk levels this way instead of as
    its manifest says. ``best_chunks``: a document scores as the mean of its N best chunks instead
    of as the manifest says (1: max-sim). ``mode``: rank by the vectors (``dense``), by BM25
    (``lexical``), or by both fused (``hybrid``); None: hybrid where the index has a lexical
    index, else dense. ``lexical_weight``: the BM25 weight of a hybrid search, or ``"rrf"``
    (None: the manifest's). ``sentences``: how each result's matched sentence (and so its
    snippet) is chosen where the query's words cannot decide: ``dense`` (those sentences embedded by
    the index's encoder, compared with the query), ``lexical`` (words only, no model call: the
    default, None), ``auto`` (dense within a budget of 32 sentences embedded, results in rank order,
    for a single query the index embeds, else lexical: what ``ragidx query`` shows; about +0.3–0.6 s
    a query on a 2-core CPU). See ``ragidx.search.snippets``. It never changes the ranking."""

    where: Where | None = None
    per: Per = "document"
    hybrid: HybridConfig | None = None
    best_chunks: int | None = None
    mode: Mode | None = None
    lexical_weight: LexicalWeight | None = None
    sentences: Sentences | None = None


class SearchKwargs(TypedDict, total=False):
    """:class:`SearchOptions`' fields as keyword arguments (``Index.search(query, k, mode="lexical")``)."""

    where: Where | None
    per: Per
    hybrid: HybridConfig | None
    best_chunks: int | None
    mode: Mode | None
    lexical_weight: LexicalWeight | None
    sentences: Sentences | None
