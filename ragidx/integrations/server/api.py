"""The HTTP API's requests and responses: pydantic models, validated strictly (unknown fields refused).

A search request carries what :meth:`ragidx.index.directory.Index.search` takes, as JSON: the text,
``k``, the mode, documents or passages (``per``), and a ``where`` filter in the JSON form of the
filter language (``ragidx.search.filters``: document ids, a source glob, title, metadata values,
ranges). Bounds are fixed and published in the OpenAPI schema: ``k`` ≤ :data:`MAX_K`, text ≤
:data:`MAX_TEXT_CHARS` characters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, JsonValue
from pydantic_core import PydanticCustomError

from ragidx.errors import ConfigError
from ragidx.integrations.server.limits import LimitError, check_where
from ragidx.search.filters import Filter
from ragidx.search.options import LexicalWeight, Mode, Per, Sentences

if TYPE_CHECKING:
    from fastapi.responses import JSONResponse
    from pydantic import ValidationError

    from ragidx.integrations.server.lanes import Lane
    from ragidx.integrations.server.limits import Limits
    from ragidx.integrations.server.live import LiveIndex
    from ragidx.search.options import SearchKwargs

MAX_K = 1000  # results per request
MAX_TEXT_CHARS = 10_000  # a query longer than this is refused (the model reads one window of it anyway)
MAX_IDS = 10_000  # values in one ``$in`` / ``$nin`` list of ``where`` (document ids, …)

Asked = TypeVar("Asked", bound=BaseModel)


class Checked(Protocol):
    """How every endpoint reads its body: the ``model`` request in ``raw``, or the 422 to answer
    (invalid JSON, too deep, or failing the model; one line and pydantic's errors as ``detail``)."""

    def __call__(self, raw: bytes, model: type[Asked]) -> Asked | JSONResponse: ...


Run = Callable[..., Any]  # the app's ``_run(lane, deadline, call, *args)``: ``call`` on a lane, awaited


@dataclass(frozen=True)
class Serving:
    """What the app shares with the endpoint modules it registers (``batch``, ``embeddings``): the
    served index and its bounds, the lanes searches run in, and the app's own ways to run a call on
    a lane, read a body (:class:`Checked`) and answer 422 (``invalid(error, detail)``, ``rejected``
    for a request that failed its model), with the error responses every endpoint documents."""

    live: LiveIndex
    bounds: Limits
    reading: Lane
    light: Lane
    heavy: Lane
    run: Run
    checked: Checked
    invalid: Callable[..., JSONResponse]
    rejected: Callable[[ValidationError], JSONResponse]
    errors: dict[int | str, dict[str, Any]]


class Strict(BaseModel):
    """A request part: unknown fields are an error, not silently ignored, and types are strict
    (``"k": "5"`` is refused, not converted)."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _where(value: dict[str, JsonValue] | None) -> dict[str, JsonValue] | None:
    """Refuse a filter the filter language cannot parse (422, one line naming the condition:
    ``where: year.$gt: give a number or a string to compare with``)."""
    if value is not None:
        try:
            Filter.from_mapping(value, max_values=MAX_IDS)
        except ConfigError as exc:
            message = str(exc).removeprefix("where.").removeprefix("where: ")
            raise PydanticCustomError("where", message) from None
    return value


def _bounded(value: object) -> object:
    """Refuse a ``where`` over the server's bounds before it is parsed (see ``limits``)."""
    try:
        check_where(value)
    except LimitError as exc:
        raise ValueError(str(exc)) from None
    return value


def _weight(value: float | str | None) -> float | str | None:
    if isinstance(value, float) and not 0 <= value <= 1:
        raise ValueError("give a number in [0, 1] or 'rrf'")
    return value


class SearchRequest(Strict):
    """One search (``POST /search``)."""

    text: str = Field(
        min_length=1,
        max_length=MAX_TEXT_CHARS,
        description="the question or search text",
        examples=["how do you get startup ideas?"],
    )
    k: int = Field(10, ge=1, le=MAX_K, description="how many documents (or passages) to return")
    mode: Mode | None = Field(
        None,
        description="dense: the vectors; lexical: BM25; hybrid: both fused (default where the index has "
        "a lexical index, else dense)",
    )
    per: Per = Field(
        "document", description="document: each document once (its best passage); chunk: rank passages"
    )
    where: Annotated[dict[str, JsonValue] | None, BeforeValidator(_bounded), AfterValidator(_where)] = Field(
        None,
        description="keep only documents matching all of these conditions (the filter language of "
        "ragidx.search.filters, as LangChain's filter and Index.search(where=…) take it): each key (doc_id, "
        "source: a glob on the path or id, title, embed_mode, else a metadata key, a.b nested) equal to a "
        "value (a metadata list: one element equal), or {$eq $ne $in $nin $gt $gte $lt $lte $exists: "
        "value}; $and / $or: lists of such objects",
        examples=[{"format": "pdf", "year": {"$gte": 2020}, "source": "*/essays/*.txt"}],
    )
    lexical_weight: Annotated[LexicalWeight | None, AfterValidator(_weight)] = Field(
        None, description="hybrid: BM25's weight in [0, 1], or 'rrf' (default: the index's)"
    )
    best_chunks: int | None = Field(
        None, ge=1, le=64, description="chunked documents score as the mean of their N best chunks"
    )
    sentences: Sentences = Field(
        "lexical",
        description="how each result's matched sentence (where its snippet starts) is chosen when the "
        "query's words cannot decide: lexical, by the words alone (no model; the server's default, for "
        "speed); dense, by embedding those sentences with the index's model, for every result (it costs "
        "model passes, see benchmarks/README.md); auto, dense within 32 sentences, top results first (what "
        "ragidx query does)",
    )
    with_text: bool = Field(False, description="include each document's full text")
    with_passage: bool = Field(False, description="include the text of the passage that matched")
    rerank: bool = Field(
        True,
        description="with the server's reranker (ragidx serve --rerank MODEL[:N]), when it has one; false: "
        "the first stage's ranking alone",
    )

    def options(self) -> SearchKwargs:
        """The keyword arguments of ``Index.search`` (``rerank`` None: the server's reranker skipped;
        absent: ``LiveIndex.search`` adds the server's, if any)."""
        options: SearchKwargs = {
            "where": None if self.where is None else Filter.from_mapping(self.where, max_values=MAX_IDS),
            "per": self.per,
            "mode": self.mode,
            "lexical_weight": self.lexical_weight,
            "best_chunks": self.best_chunks,
            "sentences": self.sentences,
        }
        if not self.rerank:
            options["rerank"] = None
        return options


class Hit(BaseModel):
    """One ranked document (or passage), as ``ragidx query --json`` prints it (the schema of the
    answer, for the OpenAPI page: the server sends the library's own dictionaries)."""

    rank: int
    score: float
    doc_id: str
    source: str
    title: str | None = None
    snippet: str
    embed_mode: str
    n_tokens: int
    chunk: dict[str, int] | None = Field(None, description="the span that matched, when chunked")
    metadata: dict[str, Any] = Field(default_factory=dict)
    match: dict[str, Any] | None = Field(
        None, description="the sentence that matched (text, char_start, char_end, by, score, terms, marks)"
    )
    passage_span: dict[str, int] | None = Field(None, description="where the passage is in the text")
    document_score: float | None = None
    chunk_score: float | None = None
    dense_score: float | None = None
    lexical_score: float | None = None
    rerank: dict[str, Any] | None = Field(
        None,
        description="reranked: the cross-encoder's score (score is the final one), the first stage's score "
        "and rank, the passage it preferred (char_start, char_end: the passage and snippet shown), the "
        "passages read and split, and this query's rerank time (ms)",
    )
    text: str | None = Field(None, description="with_text: the document's full text")
    passage: str | None = Field(None, description="with_passage: the text that matched")


class SearchResponse(BaseModel):
    query: str
    k: int
    mode: str = Field(description="the mode that ranked the results")
    per: str
    generation: int = Field(description="the index generation that answered")
    took_ms: float = Field(description="time spent searching, in milliseconds")
    notes: list[str] = Field(default_factory=list, description="how the search ran, e.g. a fallback to dense")
    results: list[Hit]


class Health(BaseModel):
    status: Literal["ok", "stale"] = Field(
        description="stale: a newer generation exists but could not be loaded (see reload_error)"
    )
    generation: int
    reload_error: str | None = None


class Info(BaseModel):
    directory: str
    generation: int
    loaded_at: str = Field(description="when this generation was loaded (UTC)")
    documents: int
    vectors: int
    search_backend: str | None = Field(
        None, description="what searched the vectors: faiss-gpu, torch-cuda float32|float16 or faiss-cpu"
    )
    model: str
    rerank: dict[str, Any] | None = Field(
        None, description="the reranking stage of every search (ragidx serve --rerank): model, top_n, …"
    )
    lexical: bool = Field(description="whether the index has a BM25 index (modes lexical and hybrid)")
    default_mode: str
    threads: int = Field(description="torch CPU threads per query")
    reload_interval: float
    reload_error: str | None = None
    limits: dict[str, int | float] = Field(description="every bound of a request (see README: Serving)")
    manifest: dict[str, Any]
