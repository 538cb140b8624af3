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

:class:`Rerank` is the reranking stage's settings (``ragidx.search.rerank``): a cross-encoder and how
many of the first stage's documents it re-scores, given as a spec string ``MODEL[:N]``
(``ragidx query --rerank``, ``ragidx serve --rerank``) or as the model itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypedDict, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragidx.errors import ConfigError, describe_validation

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

RERANK_TOP_N = 50  # documents of the first stage a cross-encoder re-scores, by default
RERANK_PASSAGES = 2  # passages of each document it reads, by default: its dense and its BM25 best
_COUNT = re.compile(r"[+-]?\d+")


class Rerank(BaseModel):
    """A reranking stage (``ragidx.search.rerank``): the cross-encoder ``model`` (a folder or a hub
    id; ``ragidx train --objective rerank`` makes one) re-scores the first stage's ``top_n`` best
    documents (at least ``k``), each on its ``passages`` best passages by the first stage, a
    document scoring as its best passage; ``weight`` > 0 fuses the first stage's score in,
    ``(1 − w)·z(rerank) + w·z(first stage)`` over the reranked documents (0: the cross-encoder
    alone). ``batch_size``: pairs per forward pass."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(min_length=1, description="the cross-encoder: a folder or a hub id")
    top_n: int = Field(RERANK_TOP_N, ge=1, description="first-stage documents to re-score (at least k)")
    passages: int = Field(RERANK_PASSAGES, ge=1, description="passages of each document read")
    weight: float = Field(0.0, ge=0, le=1, description="the first stage's weight in the fused score")
    batch_size: int = Field(32, ge=1, description="query-passage pairs per forward pass")

    @classmethod
    def parse(cls, spec: str) -> Rerank:
        """``MODEL[:N]``: the model, and how many first-stage documents it re-scores (default 50).
        A model whose name holds ``:`` keeps it when what follows is not a number."""
        model, colon, count = spec.strip().rpartition(":")
        if not colon or not _COUNT.fullmatch(count.strip()):
            return cls.of({"model": spec.strip()}, spec)
        if int(count) < 1:
            raise ConfigError(
                f"rerank {spec}: N is how many documents the reranker re-scores; give 1 or more "
                f"(MODEL[:N], e.g. {model}:{RERANK_TOP_N})"
            )
        return cls.of({"model": model, "top_n": int(count)}, spec)

    @classmethod
    def of(cls, value: Rerank | str | Mapping[str, Any], spec: str | None = None) -> Rerank:
        """``value`` as settings: a :class:`Rerank`, a spec string (:meth:`parse`) or its fields
        (one :class:`~ragidx.errors.ConfigError` line for a bad one)."""
        if isinstance(value, Rerank):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        try:
            return cls.model_validate(dict(value))
        except ValidationError as exc:
            raise ConfigError(f"rerank {spec or dict(value)}: {describe_validation(exc)}") from None


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
    a query on a 2-core CPU). See ``ragidx.search.snippets``. It never changes the ranking.
    ``rerank``: re-score the first stage's best documents with a cross-encoder (:class:`Rerank`, or
    its spec ``MODEL[:N]``); each result then carries ``rerank`` (``ragidx.search.rerank``)."""

    where: Where | None = None
    per: Per = "document"
    hybrid: HybridConfig | None = None
    best_chunks: int | None = None
    mode: Mode | None = None
    lexical_weight: LexicalWeight | None = None
    sentences: Sentences | None = None
    rerank: Rerank | str | None = None


class SearchKwargs(TypedDict, total=False):
    """:class:`SearchOptions`' fields as keyword arguments (``Index.search(query, k, mode="lexical")``)."""

    where: Where | None
    per: Per
    hybrid: HybridConfig | None
    best_chunks: int | None
    mode: Mode | None
    lexical_weight: LexicalWeight | None
    sentences: Sentences | None
    rerank: Rerank | str | None
