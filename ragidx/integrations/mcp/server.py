"""The MCP server of ``ragidx mcp``: tools and resources over the indexes named at its start, read-only.

Tools (each takes an optional ``index``: a served index's name or path, default the first; any other
is refused, see :mod:`~ragidx.integrations.mcp.indexes`):

* ``search`` (query, k, mode, filters, per) → passages, best first, each with its ``doc_id``,
  ``source``, ``score``, ``span`` (character offsets of the passage in the document's text) and
  ``passage`` (that text), plus what ``ragidx query --json`` prints of a result (snippet, matched
  sentence, metadata, each mode's score). It runs as ``POST /search`` of ``ragidx serve`` does: the
  arguments are checked by the server's own request model
  (:class:`~ragidx.integrations.server.api.SearchRequest`: the same bounds, ``filters`` in the one
  filter language of ``ragidx.search.filters``), then :meth:`LiveIndex.search
  <ragidx.integrations.server.live.LiveIndex.search>`, i.e. ``Index.search``;
* ``fetch_document`` (doc_id, optional char_start / char_end) → the document's text, or that span of
  it, with its source, title and metadata; at most :data:`MAX_FETCH_CHARS` characters a call (a
  longer request is refused, saying the length, never cut);
* ``index_info`` → the index's generation, counts, model, the modes it can run, and the bounds.

Resources: ``ragidx://NAME/documents`` (one per index: its documents as JSON, each with the URI of
its text) and the template ``ragidx://NAME/documents/{doc_id}`` (a document's text).

Bad input (k=0, an unknown mode or argument, a filter the filter language refuses, an unknown
doc_id, an index not served) is a tool error of one line naming the argument; the server keeps
serving. Nothing here writes to an index.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

from mcp.server.mcpserver import Context, MCPServer, ResourceSecurity
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError, UnexpectedToolError
from mcp.server.mcpserver.resources import FunctionResource
from mcp.types import CallToolResult, InputRequiredResult, ToolAnnotations
from pydantic import Field, JsonValue, ValidationError

from ragidx import __version__
from ragidx.errors import RagidxError
from ragidx.integrations.mcp.indexes import Served
from ragidx.integrations.server.api import MAX_IDS, MAX_K, MAX_TEXT_CHARS, SearchRequest
from ragidx.integrations.server.live import LiveIndex
from ragidx.search.options import MODES, Mode, Per
from ragidx.search.retriever import SearchResult

if TYPE_CHECKING:
    from ragidx.index.store import DocumentRecord

MAX_FETCH_CHARS = 100_000  # characters of text one fetch_document call or resource read returns
SCHEME = "ragidx"
READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
# the server's request model names two things differently; errors name the tool's arguments
ARGUMENT = {"text": "query", "where": "filters"}
INSTRUCTIONS = (
    "Search long documents indexed by ragidx. Call search(query) for the best passages, each with its "
    "doc_id, source, span (character offsets) and score; fetch_document(doc_id, char_start, char_end) "
    "reads more of a document around a passage; index_info says what an index holds and which modes it "
    "can run. Every tool takes index= to pick one of the served indexes (index_info lists them)."
)

IndexArg = Annotated[
    str | None,
    Field(description="a served index, by name or path (default: the first; index_info lists them)"),
]


def create_server(indexes: Sequence[LiveIndex]) -> MCPServer[None]:
    """The MCP server over ``indexes`` (each loaded once; their reload watchers run while it runs)."""
    served = Served(indexes)

    @contextlib.asynccontextmanager
    async def lifespan(server: MCPServer[None]) -> AsyncIterator[None]:
        for _, live in served:
            live.start()
        try:
            yield
        finally:
            for _, live in served:
                live.stop()

    def search(
        query: Annotated[
            str, Field(min_length=1, max_length=MAX_TEXT_CHARS, description="the question or search text")
        ],
        k: Annotated[int, Field(ge=1, le=MAX_K, description="how many passages to return")] = 5,
        mode: Annotated[
            Mode | None,
            Field(
                description="dense: the vectors; lexical: BM25; hybrid: both fused (default where the "
                "index has a lexical index, else dense)"
            ),
        ] = None,
        filters: Annotated[
            dict[str, JsonValue] | None,
            Field(
                description="keep only documents matching all of these conditions: each key (doc_id, "
                "source: a glob on the path, title, else a metadata key, a.b nested) equal to a value, or "
                "{$eq $ne $in $nin $gt $gte $lt $lte $exists: value}; $and / $or: lists of such objects. "
                'Example: {"format": "pdf", "year": {"$gte": 2020}, "source": "*/essays/*"}'
            ),
        ] = None,
        per: Annotated[
            Per,
            Field(description="document: each document once, by its best passage; chunk: rank passages"),
        ] = "document",
        index: IndexArg = None,
    ) -> dict[str, Any]:
        """The passages of the indexed documents that best answer ``query``, best first: each with its
        doc_id, source, score, span (char_start, char_end in the document's text) and the passage's
        text. fetch_document reads more around a span."""
        name, live = _index(served, index)
        try:
            request = SearchRequest.model_validate(
                {"text": query, "k": k, "mode": mode, "per": per, "where": filters}
            )
        except ValidationError as exc:
            raise ToolError(one_line(exc)) from None
        try:
            answer = live.search(request.text, request.k, request.options())
        except RagidxError as exc:
            raise ToolError(_line(str(exc))) from None
        return {
            "index": name,
            "query": query,
            "mode": answer.mode,
            "per": per,
            "generation": answer.generation,
            "took_ms": round(answer.took_ms, 3),
            "notes": answer.notes,
            "passages": [passage(result) for result in answer.results],
        }

    def fetch_document(
        doc_id: Annotated[str, Field(min_length=1, description="a document's id (search gives them)")],
        char_start: Annotated[
            int | None, Field(ge=0, description="where to start in its text (default 0)")
        ] = None,
        char_end: Annotated[
            int | None, Field(ge=0, description="where to stop (default: the end of its text)")
        ] = None,
        index: IndexArg = None,
    ) -> dict[str, Any]:
        """A document's text (or the span char_start:char_end of it, e.g. a passage's span widened),
        with its source, title and metadata. At most 100000 characters a call: ask for spans of a
        longer document."""
        name, live = _index(served, index)
        record = _document(live, name, doc_id, ToolError)
        length = len(record.text)
        start = 0 if char_start is None else char_start
        end = length if char_end is None else char_end
        if not start <= end <= length:
            raise ToolError(
                f"char_start {start}, char_end {end}: not a span of {doc_id!r}, which has {length} "
                f"characters; give 0 <= char_start <= char_end <= {length}"
            )
        _check_length(doc_id, start, end, length, ToolError)
        return {
            "index": name,
            "doc_id": record.doc_id,
            "source": record.source,
            "title": record.title,
            "metadata": record.metadata,
            "embed_mode": record.embed_mode,
            "n_tokens": record.n_tokens,
            "length": length,
            "span": {"char_start": start, "char_end": end},
            "text": record.text[start:end],
        }

    def index_info(index: IndexArg = None) -> dict[str, Any]:
        """What a served index holds: documents, vectors, model, generation, the search modes it can
        run (and its default), the bounds of a call, and the names of every served index."""
        name, live = _index(served, index)
        generation = live.current
        manifest = generation.index.manifest
        return {
            "index": name,
            "directory": str(live.directory),
            "generation": generation.number,
            "loaded_at": generation.loaded_at.isoformat(),
            "documents": manifest.counts.documents,
            "vectors": manifest.counts.vectors,
            "model": manifest.encoder.name,
            "lexical": generation.index.lexical is not None,
            "modes": [mode for mode in MODES if _runs(live, mode)],
            "default_mode": live.default_mode(),
            "search_backend": generation.index.search_backend,
            "reload_error": live.reload_error,
            "limits": {
                "k": MAX_K,
                "query_chars": MAX_TEXT_CHARS,
                "filter_values": MAX_IDS,
                "fetch_chars": MAX_FETCH_CHARS,
            },
            "served": served.names,
            "resources": _listing_uri(name),
        }

    tools: dict[str, Callable[..., dict[str, Any]]] = {
        "search": search,
        "fetch_document": fetch_document,
        "index_info": index_info,
    }
    server = _Server(
        "ragidx",
        version=__version__,
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        log_level="WARNING",
        arguments={name: set(inspect.signature(fn).parameters) for name, fn in tools.items()},
    )
    for name, fn in tools.items():
        server.add_tool(fn, name=name, annotations=READ_ONLY, structured_output=False)

    for name, live in served:
        server.add_resource(
            FunctionResource.from_function(
                _listing(name, live),
                uri=_listing_uri(name),
                name=f"{name}: documents",
                description=f"The documents of index {name} ({live.directory}): doc_id, source, tokens "
                "and the URI of each one's text, as JSON",
                mime_type="application/json",
            )
        )

    # a doc_id is a key looked up in the store, never a path opened: it may hold '/' and '..'
    @server.resource(
        f"{SCHEME}://{{index}}/documents/{{+doc_id}}",
        name="document",
        description="A document's text, by index name and doc_id (each index's documents resource lists "
        "them)",
        mime_type="text/plain",
        security=ResourceSecurity(exempt_params={"doc_id"}),
    )
    def document(index: str, doc_id: str) -> str:
        try:
            name, live = served.get(index)
        except RagidxError as exc:
            raise ResourceNotFoundError(_line(str(exc))) from None
        record = _document(live, name, doc_id, ResourceNotFoundError)
        _check_length(doc_id, 0, len(record.text), len(record.text), ResourceNotFoundError)
        return record.text

    return server


class _Server(MCPServer[None]):
    """The SDK's server, with argument errors on one line: an unknown argument is refused (the SDK
    would ignore it), and a value the argument's schema refuses is reported as ``name: problem``
    (the SDK prints pydantic's multi-line report)."""

    def __init__(self, *args: Any, arguments: dict[str, set[str]], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._arguments = arguments

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[None, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        unknown = sorted(set(arguments) - self._arguments.get(name, set(arguments)))
        if unknown:
            known = ", ".join(sorted(self._arguments[name]))
            raise ToolError(f"Error executing tool {name}: unknown argument {unknown[0]!r}; it takes {known}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError) and not isinstance(exc, UnexpectedToolError):
                raise ToolError(f"Error executing tool {name}: {one_line(cause)}") from cause
            raise


def passage(result: SearchResult) -> dict[str, Any]:
    """One search result as the ``search`` tool returns it: what ``ragidx query --json`` prints (no
    full text), with ``span`` (where the passage is in the document's text) and ``passage`` (that text)."""
    return {**result.to_dict(), "span": passage_span(result), "passage": result.passage}


def passage_span(result: SearchResult) -> dict[str, int]:
    """The character span of ``result.passage`` in the document's text."""
    if result.passage_span is not None:
        span = result.passage_span
    elif result.chunk is not None and result.chunk["char_start"] >= 0:
        span = result.chunk
    else:
        span = {"char_start": 0, "char_end": len(result.text)}
    return {"char_start": span["char_start"], "char_end": span["char_end"]}


def one_line(error: ValidationError) -> str:
    """The first problem of ``error`` as ``argument: message``, in the tool's argument names."""
    problems = error.errors()
    first = problems[0]
    where = ".".join(
        ARGUMENT.get(str(part), str(part)) if i == 0 else str(part) for i, part in enumerate(first["loc"])
    )
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return _line(f"{where or 'arguments'}: {first['msg']}{more}")


def _line(text: str) -> str:
    return " ".join(text.split("\n"))


def _index(served: Served, index: str | None) -> tuple[str, LiveIndex]:
    try:
        return served.get(index)
    except RagidxError as exc:
        raise ToolError(_line(str(exc))) from None


def _document(live: LiveIndex, name: str, doc_id: str, error: type[Exception]) -> DocumentRecord:
    try:
        return live.current.index.document(doc_id)
    except KeyError:
        raise error(
            f"doc_id {doc_id!r}: no such document in index {name!r} (search gives the doc_ids, "
            f"{_listing_uri(name)} lists them)"
        ) from None


def _check_length(doc_id: str, start: int, end: int, length: int, error: type[Exception]) -> None:
    if end - start > MAX_FETCH_CHARS:
        raise error(
            f"{doc_id!r}: {end - start} characters asked ({length} in the document), over the "
            f"{MAX_FETCH_CHARS} one read returns; ask fetch_document for spans (char_start, char_end) of at "
            f"most {MAX_FETCH_CHARS}"
        )


def _runs(live: LiveIndex, mode: Mode) -> bool:
    try:
        live.current.index.search_mode(mode=mode)
    except RagidxError:
        return False
    return True


def _listing_uri(name: str) -> str:
    return f"{SCHEME}://{quote(name, safe='')}/documents"


def _listing(name: str, live: LiveIndex) -> Callable[[], str]:
    def documents() -> str:
        rows = live.current.index.summaries()
        for row in rows:
            row["uri"] = f"{SCHEME}://{quote(name, safe='')}/documents/{quote(row['doc_id'], safe='/')}"
        return json.dumps(rows, ensure_ascii=False)

    documents.__name__ = f"documents_{name}"
    return documents
