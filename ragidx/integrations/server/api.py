"""The HTTP API's requests and responses: pydantic models, validated strictly (unknown fields refused).

A search request carries what :meth:`ragidx.index.directory.Index.search` takes, as JSON: the text,
``k``, the mode, documents or passages (``per``), and a declarative ``where`` (document ids, a source
glob, metadata values) that becomes the Python API's ``where`` predicate. Bounds are fixed and
published in the OpenAPI schema: ``k`` ≤ :data:`MAX_K`, text ≤ :data:`MAX_TEXT_CHARS` characters.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue

if TYPE_CHECKING:
    from ragidx.index.store import DocumentRecord
    from ragidx.search.options import SearchKwargs
    from ragidx.search.options import Where as WherePredicate

MAX_K = 1000  # results per request
MAX_TEXT_CHARS = 10_000  # a query longer than this is refused (the model reads one window of it anyway)
MAX_IDS = 10_000  # document ids in one ``where.doc_ids``


class Strict(BaseModel):
    """A request part: unknown fields are an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


class Where(Strict):
    """Which documents may be returned; every given condition must hold."""

    doc_ids: list[str] | None = Field(
        None, max_length=MAX_IDS, description="only these document ids", examples=[["avg.txt"]]
    )
    source: str | None = Field(
        None,
        min_length=1,
        description="a glob the document's source path or id must match (as ragidx delete --source)",
        examples=["*/essays/a*.txt"],
    )
    metadata: dict[str, JsonValue] | None = Field(
        None,
        description="metadata values the document must have (each key equal)",
        examples=[{"format": "pdf"}],
    )

    def predicate(self) -> WherePredicate:
        """The Python API's ``where``: a function of a stored document."""
        ids = None if self.doc_ids is None else frozenset(self.doc_ids)
        missing = object()

        def accepts(record: DocumentRecord) -> bool:
            if ids is not None and record.doc_id not in ids:
                return False
            if self.source is not None and not (
                fnmatchcase(record.source, self.source) or fnmatchcase(record.doc_id, self.source)
            ):
                return False
            return all(
                record.metadata.get(key, missing) == value for key, value in (self.metadata or {}).items()
            )

        return accepts


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
    mode: Literal["dense", "lexical", "hybrid"] | None = Field(
        None,
        description="dense: the vectors; lexical: BM25; hybrid: both fused (default where the index has "
        "a lexical index, else dense)",
    )
    per: Literal["document", "chunk"] = Field(
        "document", description="document: each document once (its best passage); chunk: rank passages"
    )
    where: Where | None = Field(None, description="keep only documents matching all of these")
    lexical_weight: Annotated[float | Literal["rrf"] | None, AfterValidator(_weight)] = Field(
        None, description="hybrid: BM25's weight in [0, 1], or 'rrf' (default: the index's)"
    )
    best_chunks: int | None = Field(
        None, ge=1, le=64, description="chunked documents score as the mean of their N best chunks"
    )
    sentences: Literal["lexical", "dense"] = Field(
        "lexical",
        description="how each result's matched sentence (where its snippet starts) is chosen when the "
        "query's words cannot decide: lexical, by the words alone (no model; the server's default, for "
        "speed); dense, by embedding those sentences with the index's model, for every result (ragidx "
        "query does it for its first 10; it costs model passes, see benchmarks/README.md)",
    )
    with_text: bool = Field(False, description="include each document's full text")
    with_passage: bool = Field(False, description="include the text of the passage that matched")

    def options(self) -> SearchKwargs:
        """The keyword arguments of ``Index.search``."""
        return {
            "where": None if self.where is None else self.where.predicate(),
            "per": self.per,
            "mode": self.mode,
            "lexical_weight": self.lexical_weight,
            "best_chunks": self.best_chunks,
            "sentences": self.sentences,
        }


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
    model: str
    lexical: bool = Field(description="whether the index has a BM25 index (modes lexical and hybrid)")
    default_mode: str
    threads: int = Field(description="torch CPU threads per query")
    reload_interval: float
    reload_error: str | None = None
    limits: dict[str, int]
    manifest: dict[str, Any]
