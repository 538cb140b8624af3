"""The FastAPI application behind ``ragidx serve``: search, health and index-info endpoints over a
:class:`~ragidx.integrations.server.live.LiveIndex`.

``POST /search`` takes a :class:`~ragidx.integrations.server.api.SearchRequest` and answers
:class:`~ragidx.integrations.server.api.SearchResponse`; ``GET /health`` and ``GET /info`` say
which generation is served (``/info`` also every limit); ``/docs`` and ``/openapi.json`` describe it
all. Every error is JSON ``{"error": "<one line>"}`` (a validation error adds pydantic's
``detail``): 422 for a request that fails validation (bounds, strict types, unknown fields, a body
that is not UTF-8 JSON or nests too deep: :mod:`~ragidx.integrations.server.body`) or asks for more
work than the budget (:mod:`~ragidx.integrations.server.limits`), 400 for a search the index cannot
run, 413 for a body over :data:`MAX_BODY_BYTES`, 503 with ``Retry-After`` when the search's lane is
full or the search passes the time limit (:mod:`~ragidx.integrations.server.lanes`).

The event loop only reads and checks requests; searches run on the lanes' threads, where their
answer is built too, and the loop waits for them with the time limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from typing import Any, TypeVar

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ragidx import __version__
from ragidx.config import ServeOptions
from ragidx.errors import RagidxError
from ragidx.integrations.server import batch, embeddings
from ragidx.integrations.server import body as bodies
from ragidx.integrations.server.api import (
    MAX_IDS,
    MAX_K,
    MAX_TEXT_CHARS,
    Asked,
    Health,
    Info,
    SearchRequest,
    SearchResponse,
    Serving,
)
from ragidx.integrations.server.lanes import Busy, Deadline, Lane, TimedOut
from ragidx.integrations.server.limits import (
    LIGHT_BODY_BYTES,
    LIGHT_WORK,
    MAX_BODY_BYTES,
    MAX_JSON_DEPTH,
    RETRY_AFTER_S,
    Limits,
    over_budget,
    work,
)
from ragidx.integrations.server.live import LiveIndex
from ragidx.search.options import SearchKwargs

__all__ = ["MAX_BODY_BYTES", "create_app"]

T = TypeVar("T")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "the index cannot run this search (e.g. mode lexical without a lexical index)"},
    413: {"description": f"request body over {MAX_BODY_BYTES} bytes"},
    422: {
        "description": "the request failed validation (bounds, strict types, unknown fields, a body that is "
        "not UTF-8 JSON or nests too deep) or asks for more work than the server's budget"
    },
    503: {
        "description": "busy (the search's lane is full) or over the time limit: retry after Retry-After "
        "seconds, or ask for less"
    },
}
REQUEST_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SearchRequest"}}},
    }
}


def create_app(live: LiveIndex, *, threads: int, limits: Limits | None = None) -> FastAPI:
    """The application serving ``live`` (``threads``: the torch threads per query, for ``/info``;
    ``limits``: what a request may cost, by default ``[serve]``'s defaults). Starting and stopping
    the app starts and stops ``live``'s reload watcher and the search lanes."""
    bounds = limits or Limits.from_options(ServeOptions())
    light = Lane("light", bounds.workers, bounds.queue)
    heavy = Lane("heavy", bounds.heavy_workers, bounds.queue)
    reading = Lane("read", 1, bounds.queue)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        live.start()
        try:
            yield
        finally:
            live.stop()
            for lane in (reading, light, heavy):
                lane.shutdown()

    app = FastAPI(
        title="ragidx",
        version=__version__,
        summary="Search one ragidx index: its model is loaded once, new generations are picked up.",
        lifespan=lifespan,
    )
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)

    @app.exception_handler(RagidxError)
    async def refused(request: Request, exc: RagidxError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)

    @app.post("/search", response_model=SearchResponse, responses=ERRORS, openapi_extra=REQUEST_BODY)
    async def search(request: Request) -> Response:
        """The ``k`` best documents (or passages, ``per: "chunk"``) for ``text``; each result as
        ``ragidx query --json`` prints it."""
        if not bodies.is_json(request.headers.get("content-type")):
            return _invalid(bodies.JSON_CONTENT)
        raw = await request.body()
        deadline = Deadline(bounds.timeout)
        large = len(raw) > LIGHT_BODY_BYTES  # a long filter: read in its own lane, not on the event loop
        checked = (
            await _run(reading, deadline, _checked, raw, SearchRequest)
            if large
            else _checked(raw, SearchRequest)
        )
        if isinstance(checked, Response):
            return checked
        counts = live.current.index.manifest.counts
        cost = work(checked, counts.documents, counts.vectors)
        if cost.units > bounds.work_budget:
            refusal = over_budget(checked, cost, bounds.work_budget)
            return _invalid(refusal, [{"loc": ["body", "k"], "msg": refusal, "type": "work_budget"}])
        reranked = checked.rerank and live.rerank is not None  # a model pass per document: heavy
        lane = heavy if cost.units > LIGHT_WORK or reranked else light
        return await _run(lane, deadline, _answer, live, checked, deadline)

    async def _run(lane: Lane, deadline: Deadline, call: Callable[..., T], *args: Any) -> T | JSONResponse:
        """``call(*args)`` on ``lane``, waited for until ``deadline``: 503 when the lane is full or
        the deadline passes."""
        try:
            future = lane.submit(call, *args)
        except Busy as exc:
            return _unavailable(f"busy: {exc}; retry after {RETRY_AFTER_S} s")
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), deadline.remaining())
        except (TimeoutError, TimedOut):
            deadline.cancel()  # a waiting search never starts; a running one stops at its next check
            return _unavailable(
                f"the search took over {bounds.timeout:g} s (the server's time limit); ask for less "
                f"(k, sentences, with_text, where) or retry after {RETRY_AFTER_S} s"
            )

    serving = Serving(
        live=live,
        bounds=bounds,
        reading=reading,
        light=light,
        heavy=heavy,
        run=_run,
        checked=_checked,
        invalid=_invalid,
        rejected=_rejected,
        errors=ERRORS,
    )
    batch.register(app, serving)  # POST /search/batch
    embeddings.register(app, serving)  # POST /v1/embeddings

    @app.get("/health", response_model=Health)
    def health() -> Health:
        """Whether the served generation is the index's latest."""
        stale = live.reload_error is not None
        return Health(
            status="stale" if stale else "ok", generation=live.current.number, reload_error=live.reload_error
        )

    @app.get("/info", response_model=Info)
    def info() -> Info:
        """The served index: generation, counts, model, modes, limits, and its manifest."""
        generation = live.current
        manifest = generation.index.manifest
        return Info(
            directory=str(live.directory),
            generation=generation.number,
            loaded_at=generation.loaded_at.isoformat(),
            documents=manifest.counts.documents,
            vectors=manifest.counts.vectors,
            search_backend=generation.index.search_backend,
            model=manifest.encoder.name,
            rerank=None if live.rerank is None else live.rerank.model_dump(),
            lexical=generation.index.lexical is not None,
            default_mode=live.default_mode(),
            threads=threads,
            reload_interval=live.reload_interval,
            reload_error=live.reload_error,
            limits={
                "k": MAX_K,
                "text_chars": MAX_TEXT_CHARS,
                "doc_ids": MAX_IDS,
                "batch_queries": batch.MAX_QUERIES,
                "embed_inputs": embeddings.MAX_INPUTS,
                "embed_window_cost": embeddings.WINDOW_COST,
                **bounds.report(),
            },
            manifest=generation.index.info(),
        )

    def openapi() -> dict[str, Any]:
        """FastAPI's schema, with the search request's (the body is read by the endpoint itself)."""
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in (SearchRequest, batch.BatchRequest, embeddings.EmbeddingsRequest):
                request = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(request.pop("$defs", {}))
                components[model.__name__] = request
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema
    return app


def _checked(raw: bytes, model: type[Asked]) -> Asked | JSONResponse:
    """The ``model`` request in ``raw``, or its 422 (:class:`~ragidx.integrations.server.api.Checked`)."""
    try:
        return model.model_validate(bodies.parse(raw, MAX_JSON_DEPTH))
    except bodies.BodyError as exc:
        return _invalid(str(exc))
    except ValidationError as exc:
        return _rejected(exc)


def _rejected(exc: ValidationError) -> JSONResponse:
    """The 422 of a request that failed its model: one line, and pydantic's errors as ``detail``."""
    detail = [{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
    return _invalid(_one_line(exc.errors()), detail)


def _answer(live: LiveIndex, asked: SearchRequest, deadline: Deadline) -> Response:
    """Run one search and build its answer (on a lane's thread)."""
    deadline.check()  # waited past the time limit: the handler has answered 503 already
    options: SearchKwargs = deadline.guard(asked.options())
    answer = live.search(asked.text, asked.k, options)
    hits = []
    for result in answer.results:
        hit = result.to_dict(with_text=asked.with_text)
        if asked.with_passage:
            hit["passage"] = result.passage
        hits.append(hit)
    body = {
        "query": asked.text,
        "k": asked.k,
        "mode": answer.mode,
        "per": asked.per,
        "generation": answer.generation,
        "took_ms": round(answer.took_ms, 3),
        "notes": answer.notes,
        "results": hits,
    }
    # built here, on the search's thread: no second validation of what ragidx made
    return Response(json.dumps(body, ensure_ascii=False, allow_nan=False), media_type="application/json")


def _invalid(error: str, detail: list[dict[str, Any]] | None = None) -> JSONResponse:
    payload: dict[str, Any] = {"error": error}
    if detail is not None:
        payload["detail"] = detail
    return JSONResponse(payload, status_code=422)


def _unavailable(error: str) -> JSONResponse:
    return JSONResponse({"error": error}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})


def _one_line(errors: Sequence[Any]) -> str:
    """The first validation problem as ``field.path: message`` (``request body`` for the body itself)."""
    first = errors[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    where = ".".join(str(part) for part in first["loc"])
    return f"{where or 'request body'}: {first['msg']}{more}"


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with 413, by their Content-Length or while they are
    read (a chunked body), before any of it is parsed."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            body = json.dumps({"error": f"request body over {self.limit} bytes"}).encode()
            await send({"type": "http.response.start", "status": 413, "headers": _json_headers(body)})
            await send({"type": "http.response.body", "body": body})
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise HTTPException(413, f"request body over {self.limit} bytes")
            return message

        await self.app(scope, limited, send)


def _json_headers(body: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
