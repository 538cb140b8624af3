"""The FastAPI application behind ``ragidx serve``: search, health and index-info endpoints over a
:class:`~ragidx.integrations.server.live.LiveIndex`.

``POST /search`` takes a :class:`~ragidx.integrations.server.api.SearchRequest` and answers
:class:`~ragidx.integrations.server.api.SearchResponse`; ``GET /health`` and ``GET /info`` say
which generation is served; ``/docs`` and ``/openapi.json`` describe it all. Every error is JSON
``{"error": "<one line>"}`` (422 adds pydantic's ``detail``): 422 for a request that fails
validation (bounds, types, unknown fields, bad JSON), 400 for a search the index cannot run,
413 for a body over :data:`MAX_BODY_BYTES`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ragidx import __version__
from ragidx.errors import RagidxError
from ragidx.integrations.server.api import (
    MAX_IDS,
    MAX_K,
    MAX_TEXT_CHARS,
    Health,
    Info,
    SearchRequest,
    SearchResponse,
)
from ragidx.integrations.server.live import LiveIndex

MAX_BODY_BYTES = 1 << 20  # a search request is a few hundred bytes; this bounds what is read
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "the index cannot run this search (e.g. mode lexical without a lexical index)"},
    413: {"description": f"request body over {MAX_BODY_BYTES} bytes"},
    422: {"description": "the request failed validation (bounds, types, unknown fields, bad JSON)"},
}


def create_app(live: LiveIndex, *, threads: int) -> FastAPI:
    """The application serving ``live`` (``threads``: the torch threads per query, for ``/info``).
    Starting and stopping the app starts and stops ``live``'s reload watcher."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        live.start()
        try:
            yield
        finally:
            live.stop()

    app = FastAPI(
        title="ragidx",
        version=__version__,
        summary="Search one ragidx index: its model is loaded once, new generations are picked up.",
        lifespan=lifespan,
    )
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        json_body = "json" in request.headers.get("content-type", "")
        return JSONResponse({"error": _one_line(exc.errors(), json_body), "detail": detail}, status_code=422)

    @app.exception_handler(RagidxError)
    async def refused(request: Request, exc: RagidxError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)

    @app.post("/search", response_model=SearchResponse, responses=ERRORS)
    def search(request: SearchRequest) -> Response:
        """The ``k`` best documents (or passages, ``per: "chunk"``) for ``text``; each result as
        ``ragidx query --json`` prints it."""
        answer = live.search(request.text, request.k, request.options())
        hits = []
        for result in answer.results:
            hit = result.to_dict(with_text=request.with_text)
            if request.with_passage:
                hit["passage"] = result.passage
            hits.append(hit)
        body = {
            "query": request.text,
            "k": request.k,
            "mode": answer.mode,
            "per": request.per,
            "generation": answer.generation,
            "took_ms": round(answer.took_ms, 3),
            "notes": answer.notes,
            "results": hits,
        }
        # built here, in the request's worker thread: no second validation of what ragidx made
        return Response(json.dumps(body, ensure_ascii=False, allow_nan=False), media_type="application/json")

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
            model=manifest.encoder.name,
            lexical=generation.index.lexical is not None,
            default_mode=live.default_mode(),
            threads=threads,
            reload_interval=live.reload_interval,
            reload_error=live.reload_error,
            limits={
                "k": MAX_K,
                "text_chars": MAX_TEXT_CHARS,
                "doc_ids": MAX_IDS,
                "body_bytes": MAX_BODY_BYTES,
            },
            manifest=generation.index.info(),
        )

    return app


def _one_line(errors: Sequence[Any], json_body: bool) -> str:
    """The first validation problem as ``field.path: message`` (``request body`` for the body itself)."""
    first = errors[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if first["type"] == "json_invalid":
        reason = first.get("ctx", {}).get("error", "")
        return f"request body: not valid JSON at character {first['loc'][-1]} ({reason})"
    where = ".".join(str(part) for part in first["loc"][1:])
    if not where and not json_body:
        return "request body: send a JSON object with the header Content-Type: application/json"
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
